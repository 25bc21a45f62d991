"""Simulator speed: evaluations per second on one core (the exhaustive search depends on it).

    python benchmarks/simulate_speed.py

Prints a table; never fails. Target (issue 2): >= 5,000 evaluations/s for a 126-layer dense
model (Llama 3.1 405B) on one core.
"""

from __future__ import annotations

import time

import planner
from planner.simulate import simulate_step

CASES = [
    (
        "llama3.1-405b",
        "dgx-h100",
        dict(tp=8, pp=8, dp=16, vpp=4, sequence_parallel=True, zero=1),
        dict(seq_len=8192, global_batch=1024, micro_batch=1, precision="bf16"),
    ),
    (
        "llama3.1-8b",
        "dgx-h100",
        dict(tp=1, pp=1, dp=8, zero=1),
        dict(seq_len=8192, global_batch=64, micro_batch=1),
    ),
    (
        "gpt3-175b",
        "dgx-a100-80gb",
        dict(tp=8, pp=8, dp=16, sequence_parallel=True),
        dict(seq_len=2048, global_batch=1536, micro_batch=1, recompute="selective"),
    ),
    (
        "mixtral-8x7b",
        "dgx-h100",
        dict(tp=1, pp=4, dp=16, ep=8, zero=1),
        dict(seq_len=4096, global_batch=256, micro_batch=1),
    ),
]


def measure(
    model_id: str, cluster_id: str, layout: dict, training: dict, seconds: float = 1.0
) -> tuple[int, float]:
    model = planner.load_model(model_id)
    cluster = planner.load_cluster(cluster_id)
    lay = planner.Layout(**layout)
    tr = planner.Training(**training)
    prof = planner.default_profile(cluster)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        simulate_step(model, cluster, lay, tr, prof)
        n += 1
    return model.layers, n / (time.perf_counter() - start)


def main() -> None:
    print(f"{'model':16} {'cluster':14} {'layers':>6} {'evals/s':>9}")
    for model_id, cluster_id, layout, training in CASES:
        layers, rate = measure(model_id, cluster_id, layout, training)
        print(f"{model_id:16} {cluster_id:14} {layers:6d} {rate:9.0f}")


if __name__ == "__main__":
    main()
