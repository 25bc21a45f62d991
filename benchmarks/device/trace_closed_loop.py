"""PyTorch profiler traces of the closed-loop GPT's training steps on a GPU, for
``planner compare-trace`` (measured time per category against the simulated breakdown).

    python benchmarks/device/trace_closed_loop.py --out DIR [--model gpt3-1.3b ...]
                                                  [--seq-len 2048] [--micro-batch 4]

Per (model, sequence): two warm-up steps, one profiler warm-up step, two recorded steps
(``ProfilerStep#``), CPU and CUDA activity, exported by ``export_chrome_trace`` without shapes
or stacks and gzipped: ``DIR/<model>-s<seq>.json.gz``. Prints each run's median step time
(profiled, so a little slower than an unprofiled closed loop) and the SDPA backend it ran.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, schedule

import planner
from calibration.closed_loop.train import measure_training_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", nargs="+", default=["gpt3-1.3b", "gpt-3.6b"])
    ap.add_argument("--seq-len", type=int, nargs="+", default=[2048])
    ap.add_argument("--micro-batch", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for model_id in args.model:
        spec = planner.load_model(model_id)
        for seq in args.seq_len:
            with profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                schedule=schedule(wait=2, warmup=1, active=2, repeat=1),
            ) as prof:
                result = measure_training_step(
                    spec,
                    seq,
                    args.micro_batch,
                    steps=3,
                    warmup=2,
                    device="cuda",
                    after_step=prof.step,
                )
            raw = out / f"{model_id}-s{seq}.json"
            prof.export_chrome_trace(str(raw))
            with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            raw.unlink()
            print(
                f"{model_id} seq {seq} mb {args.micro_batch}: median step "
                f"{result['median_step_s'] * 1e3:.1f} ms (profiled), SDPA "
                f"{result['sdpa_backend']} -> {raw}.gz",
                flush=True,
            )


if __name__ == "__main__":
    main()
