"""The independent check in schema 1 form: what a writer of ``public.yaml``-style cases gets.

    python benchmarks/independent_v1.py [--cases]

The hidden sets that judge the planner are written in schema 1 (``shared/validation/README.md``):
a free-text ``framework`` instead of a stack, no ``unstated`` list, no field for offload, MTP,
CUDA graphs, the FP8 recipe or the optimizer's state. This script rewrites every independent
case (``benchmarks/independent/*.yaml``, vTrain's bulk file aside: its own schema 1 form is
``benchmarks/vtrain_import.py``'s) with only the README's fields, as such a writer would: the
framework its stack is published as, an unstated micro-batch or interleaving depth as null, an
unstated ZeRO stage as the stack's distributed optimizer (1, where it runs it) and an unstated
recompute as ``none`` (the writer's assumption; the planner raises it where the run could not
have fitted). It prints, per file, how many cases run (``ok``) and the MAPE of each form, and
lists every case that does not run: a case a hidden set would score as not covered.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import planner
from planner.validate import read_case_file, run_case, summarize
from planner.validate.inputs import V1_MODEL_KEYS, V1_MOE_KEYS

DIR = Path(__file__).resolve().parent / "independent"
SKIP = {"vtrain.yaml"}
# the framework each shipped stack is published as
FRAMEWORK = {
    "megatron-bridge": "megatron-bridge",
    "nemo": "nemo",
    "megatron-core": "megatron-core",
    "torchtitan-eager": "torchtitan",
    "torchtitan-compiled": "torchtitan",
    "torchtitan-compiled-float8": "torchtitan",
    "torchtitan-async-tp": "torchtitan",
    "deepspeed-zero": "deepspeed",
    "llm-foundry-2023": "llm-foundry",
    "llm-foundry": "llm-foundry",
    "megatron-deepspeed-2022": "megatron-deepspeed",
    "megatron-deepspeed": "megatron-deepspeed",
    "megatron-lm-2021": "megatron-lm",
    "megatron-lm-2022": "megatron-lm",
    "deepspeed-zero3-2021": "deepspeed",
    "hai-llm": "hai-llm",
}
# the model keys schema 1 states (planner/validate/inputs.py), its name and the MoE section
MODEL_KEYS = ("name", *V1_MODEL_KEYS, "moe")
MOE_KEYS = V1_MOE_KEYS
LAYOUT_DEFAULTS = {
    "tp": 1,
    "pp": 1,
    "dp": 1,
    "cp": 1,
    "ep": 1,
    "vpp": None,
    "sequence_parallel": False,
    "zero": None,
}


def _pct(value: float | None) -> str:
    """A MAPE for the table: one decimal, or '-' where no case was scored."""
    return "-" if value is None else f"{value:.1f}"


def to_v1(case: dict) -> dict:
    """``case`` (schema 2) with only the fields schema 1 has."""
    stack = planner.load_stack(case["stack"])
    unstated = set(case.get("unstated") or ())
    lay, tr, mod = case["layout"], case["training"], case["model"]
    model = {k: mod.get(k) for k in MODEL_KEYS}
    if model["moe"]:
        model["moe"] = {k: model["moe"].get(k) for k in MOE_KEYS}
    layout = {k: lay.get(k, default) for k, default in LAYOUT_DEFAULTS.items()}
    if "vpp" in unstated:
        layout["vpp"] = None
    if layout["zero"] is None:
        stages = stack.capabilities.zero_stages
        layout["zero"] = 1 if 1 in stages else stages[0]
    training: dict[str, Any] = {
        "seq_len": tr["seq_len"],
        "micro_batch": None if "micro_batch" in unstated else tr.get("micro_batch"),
        "global_batch": tr["global_batch"],
        "recompute": tr.get("recompute") or "none",
        "precision": tr.get("precision") or stack.precision,
    }
    return {
        "id": case["id"],
        "source": case.get("source", ""),
        "quality": case.get("quality", "partial"),
        "scored": case.get("scored", True),
        "model": model,
        "cluster": case["cluster"],
        "num_gpus": case["num_gpus"],
        "framework": FRAMEWORK[case["stack"]],
        "layout": layout,
        "training": training,
        "measured": {"tokens_per_s_per_gpu": case["measured"]["tokens_per_s_per_gpu"]},
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    print(f"{'file':26} {'n':>4} {'v1 ok':>6} {'v1 MAPE %':>10} {'v2 ok':>6} {'v2 MAPE %':>10}")
    missed = []
    all_v1, all_v2 = [], []
    for path in sorted(DIR.glob("*.yaml")):
        if path.name in SKIP:
            continue
        _, cases = read_case_file(path)
        v2 = [run_case(c, planner.default_profile, 2) for c in cases]
        v1 = [run_case(to_v1(c), planner.default_profile, 1) for c in cases]
        for row, case in zip(v1, cases, strict=True):
            row["scored"] = case.get("scored", True)
        s1, s2 = summarize(v1), summarize(v2)
        print(
            f"{path.name:26} {len(cases):4d} {s1['n_ok']:6d} {_pct(s1['mape_pct']):>10} "
            f"{s2['n_ok']:6d} {_pct(s2['mape_pct']):>10}"
        )
        missed += [r for r in v1 if r["status"] != "ok"]
        all_v1 += v1
        all_v2 += v2
        if "--cases" in argv:
            for a, b in zip(v1, v2, strict=True):
                print(
                    f"  {a['id'][:56]:56} {a['status']:10} {a['error_pct']!s:>8} {b['error_pct']!s:>8}"
                )
    s1, s2 = summarize(all_v1), summarize(all_v2)
    print(
        f"{'all':26} {len(all_v1):4d} {s1['n_ok']:6d} {_pct(s1['mape_pct']):>10} "
        f"{s2['n_ok']:6d} {_pct(s2['mape_pct']):>10}"
    )
    for r in missed:
        print(f"not ok in schema 1 form: {r['id']}: {r['status']}: {r['reason'][:300]}")


if __name__ == "__main__":
    main()
