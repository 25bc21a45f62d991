"""One-line descriptions of a parallel layout, for the terminal, the app and the benchmarks."""

from __future__ import annotations

from planner.specs.layout import Layout, Training


def overlap_names(layout: Layout, zero3: str = "z3") -> list[str]:
    """The communication overlaps in effect: dp, tp, ep and the ZeRO-3 gather (``zero3``)."""
    return [
        name
        for name, on in (
            ("dp", layout.overlap_dp_grad_reduce),
            ("tp", layout.overlap_tp_comm and layout.tp > 1),
            ("ep", layout.overlap_ep_comm and layout.ep > 1),
            (zero3, layout.overlap_zero3_param_gather and layout.zero == 3),
        )
        if on
    ]


def _overlaps(layout: Layout) -> str:
    return "+".join(overlap_names(layout)) or "-"


def layout_summary(layout: Layout) -> str:
    """One line describing a layout, e.g. 'TP 8 x PP 4 x DP 32 x CP 1, EP 1, ZeRO 0, ...'."""
    parts = [
        f"TP {layout.tp} x PP {layout.pp} x DP {layout.dp} x CP {layout.cp}",
        f"EP {layout.ep}",
        f"VPP {layout.vpp or 1}",
        f"ZeRO {layout.zero}"
        + (
            f" (HSDP: sharded over {layout.zero_shard}, {layout.dp_replicas} replicas)"
            if layout.dp_replicas > 1
            else ""
        ),
        f"SP {'on' if layout.sequence_parallel else 'off'}",
        f"schedule {layout.pipeline_schedule}",
    ]
    parts.append("overlap " + ("+".join(overlap_names(layout, "zero3")) or "none"))
    return ", ".join(parts)


def compact_layout(layout: Layout, training: Training) -> str:
    """One short line, e.g. 'TP2 PP1 DP8 CP1 EP1 VPP1 mb2 rc:none Z1 SP+ ov:dp+tp'."""
    return (
        f"TP{layout.tp} PP{layout.pp} DP{layout.dp} CP{layout.cp} EP{layout.ep} "
        f"VPP{layout.virtual_stages} mb{training.micro_batch} rc:{training.recompute} "
        f"Z{layout.zero}{f'/{layout.zero_shard}' if layout.dp_replicas > 1 else ''} "
        f"SP{'+' if layout.sequence_parallel else '-'} ov:{_overlaps(layout)}"
    )
