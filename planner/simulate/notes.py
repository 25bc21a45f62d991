"""What the report says besides its figures: assumptions, host-bound and schedule notes, and the
check that every figure is finite."""

from __future__ import annotations

import math

from planner.costs import compute, elementwise, host_offload, memory
from planner.errors import PlannerError
from planner.report import StepReport
from planner.schedules import Schedule
from planner.simulate.layers import TP_OVERLAP_FRACTION
from planner.specs.hardware import AcceleratorSpec
from planner.specs.layout import Layout, Training


def default_assumptions(layout: Layout, training: Training) -> list[str]:
    """Modelling assumptions that apply to this run, printed with the report."""
    kernel = {
        "fused": "fused (flash) attention",
        "cudnn": "cuDNN fused attention",
        "flash2": "FlashAttention-2",
        "flash_triton": "Triton FlashAttention (flash-attn flash_attn_triton)",
        "unfused": "unfused attention (materialised scores)",
    }[training.attention_kernel]
    notes = [
        f"{kernel}; {'with' if training.dropout else 'no'} dropout",
        f"gradient buffer and DP reduction in {training.grad_reduce_dtype}",
        {
            "in_place": "loss: online-softmax cross-entropy, gradient written into the logits",
            "fp32_copy": "loss: cross-entropy keeps an fp32 softmax of the logits",
            "fp32_log_softmax": "loss: PyTorch cross-entropy on an fp32 copy (fp32 log-softmax "
            "saved; backward holds it with the fp32 NLL and input gradients)",
            "compiled": "loss: torch.compile'd cross-entropy (logits and a log-sum-exp saved, "
            "gradient at the logits' precision)",
            "loss_parallel": "loss: PyTorch loss parallel over the TP-sharded vocabulary on an "
            "fp32 copy (DTensor's log-softmax and NLL backward as separate fp32 ops)",
        }[elementwise.loss_kernel(training.cross_entropy, layout.tp)],
    ]
    if training.precision == "fp8":
        gather = ", weights all-gathered in fp8" if training.fp8_param_gather else ""
        if memory.fp8_weight_cache_bytes(training) and layout.zero < 3:
            gather += (
                ", the weights' fp8 copies and transposes kept across micro-batches "
                "(2 B per layer parameter, in the weights' memory)"
            )
        wgrad = ", weight gradients in bf16" if training.fp8_recipe == "rowwise_gw_hp" else ""
        notes.append(
            f"FP8 recipe {training.fp8_recipe} (cast bytes: planner/costs/fp8.py){wgrad}{gather}"
        )
    if training.offload_layers:
        notes.append(
            f"activations of {training.offload_layers} layers offloaded to host memory; each "
            "copy hides behind one layer's compute"
        )
    if training.checkpoint_offload:
        notes.append(
            "full-recompute checkpoints kept in host memory (two layers' on the GPU); each copy "
            "hides behind one layer's compute"
        )
    if training.optimizer_offload:
        notes.append(
            "optimizer offload: master weights and Adam moments in host memory; the CPU "
            f"update streams {host_offload.CPU_ADAM_BYTES_PER_PARAM:.0f} B per parameter at "
            f"{host_offload.HOST_DRAM_EFFICIENCY:.0%} of the node's host DRAM bandwidth (an "
            "assumption), overlapped with the weights' copy back; gradient copies to the host "
            "hide behind backward"
        )
    if layout.ep > 1:
        notes.append(f"expert tensor parallel size = {layout.expert_tp}; balanced routing")
    if layout.overlap_tp_comm:
        notes.append(f"TP comm overlap hides up to {TP_OVERLAP_FRACTION:.0%} behind GEMMs")
    return notes


def power_note(accel: AcceleratorSpec) -> list[str]:
    """The power cap the GEMM and attention throughput is costed under (nothing uncapped)."""
    clock = accel.tensor_clock_fraction
    if clock >= 1.0:
        return []
    return [
        f"power cap {accel.tdp_w:.0f} W of the {accel.rated_power_w:.0f} W the peaks are rated "
        f"at: GEMM and attention at {clock:.3f} of the rated tensor clock ((cap / rated)^(1/3), "
        "dynamic power ~ f^3 under voltage scaling); MFU stays against the rated peak"
    ]


def schedule_notes(schedule: Schedule, layout: Layout) -> list[str]:
    """What a zero-bubble or V schedule assumes (nothing for 1F1B and interleaved)."""
    if not schedule.splits_backward or layout.pp == 1:
        return []
    notes = [
        f"{schedule.title} schedule: weight-gradient GEMMs run apart from the input gradient "
        "to fill the bubble; a micro-batch keeps its activations until its weight gradient"
    ]
    if schedule.name != "zb-h1":
        notes.append(
            "zero bubble as Qi et al. count it: the optimizer step is validated afterwards "
            "(no all-reduce before it), so each stage starts the next step when it is done"
        )
    if schedule.placement == "v":
        notes.append("V placement: rank 0 holds the first and the last chunk (embedding, loss)")
    return notes


def host_note(breakdown: dict[str, float], step_s: float, dev: compute.Device) -> list[str]:
    """A note when the step waits for the host, with what would relieve it."""
    waiting = breakdown.get("host_overhead", 0.0)
    if waiting <= 0.05 * step_s:
        return []
    return [
        f"host-bound: the GPU waits {waiting:.2f} s ({100 * waiting / step_s:.0f}% of the step) "
        f"for the host to issue kernels ({dev.host_op_s * 1e6:.1f} us per framework op); larger "
        "micro-batches, fewer local experts or CUDA graphs (--host-op-us 0 to model them) "
        "relieve it"
    ]


# the inputs each figure is computed from, for the error of a non-finite figure
_FIGURE_INPUTS = {
    "compute": "accelerator peak_tflops and hbm_bandwidth, profile gemm/attention/memory",
    "recompute": "accelerator peak_tflops, profile gemm/attention efficiencies",
    "comm": "cluster bandwidths and latencies, profile comm efficiencies",
    "ep_comm": "model.moe (load_imbalance, capacity_factor), cluster bandwidths, profile comm",
    "host_overhead": "profile host.op_us",
    "activation_offload": "accelerator host_link_gb_per_s",
    "pipeline_bubble": "layout pp/vpp, the per-stage costs",
    "optimizer": "accelerator hbm_bandwidth, profile memory efficiency",
    "memory": "model widths, training seq_len/micro_batch",
}


def _inputs_of(figure: str) -> str:
    name = figure.split(".")[-1]
    for key in (name, name.split("_")[-1], name.split("_")[0]):
        if key in _FIGURE_INPUTS:
            return _FIGURE_INPUTS[key]
    if figure.startswith("memory"):
        return _FIGURE_INPUTS["memory"]
    return "the model, cluster and profile figures"


def check_finite(report: StepReport) -> StepReport:
    """``report`` when every figure is finite, else a PlannerError naming the first
    non-finite figure and the inputs it is computed from."""
    figures = {
        "step_time_s": report.step_time_s,
        "tokens_per_s": report.tokens_per_s,
        "mfu_pct": report.mfu_pct,
        "hfu_pct": report.hfu_pct,
        "model_flops_per_token": report.model_flops_per_token,
        "peak_memory_gib": report.peak_memory_gib,
        "usable_memory_gib": report.usable_memory_gib,
        **{f"time_breakdown_s.{k}": v for k, v in report.time_breakdown_s.items()},
        **{f"memory_breakdown_gib.{k}": v for k, v in report.memory_breakdown_gib.items()},
    }
    if all(math.isfinite(v) for v in figures.values()):
        return report
    # name the breakdown entry first: it points at the mechanism, the totals follow from it
    bad = sorted(
        (k for k, v in figures.items() if not math.isfinite(v)), key=lambda k: "." not in k
    )
    raise PlannerError(
        f"report.{bad[0]}",
        f"the model gives {figures[bad[0]]} (not a finite number); it is computed from "
        f"{_inputs_of(bad[0])}",
        "inputs within their documented ranges (docs/limits.md)",
    )
