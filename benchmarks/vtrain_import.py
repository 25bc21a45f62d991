"""Write ``benchmarks/independent/vtrain.yaml`` from a checkout of VIA-Research/vTrain.

    python benchmarks/vtrain_import.py /path/to/vTrain [--out FILE]

vTrain (Bang et al., MICRO 2024, arXiv 2312.12391) publishes the iteration times it measured to
validate its simulator: ``data/ground_truth_single.csv`` (1,440 single-node runs of GPT models
with hidden 1,024 or 2,048, 12-24 layers, sequence 1,024, on 2, 4 or 8 A100) and
``data/ground_truth_multi.csv`` (109 runs of 3.6B-175B GPT models on up to 512 A100, 800 Gb/s
per node). ``data/README.md``: "All data points here are collected using Megatron-DeepSpeed".
Each row's simulation config (``config/validation/{single,multi}/*.json``) states
``use_checkpoint: true`` (full activation recompute) for every run, 1F1B, and vTrain's model code
(``src/model/gpt_model.py``) is Megatron's GPT in fp16 (``.half()``), dropout 0.1, fused
scale-mask-softmax and bias-GeLU, vocabulary 50,257 (``src/config.py`` default).

The rows are an independent check (no fit reads ``benchmarks/independent/``): each becomes a
schema 2 case on ``megatron-deepspeed-2022`` (what schema 1's ``megatron-deepspeed`` on an A100
maps to) and the ``hgx-a100-80gb-100g`` preset (A100 80 GB, NVSwitch, 100 Gb/s per GPU = the
800 Gb/s per node vTrain's configs state). tokens/s/GPU = global batch x sequence / iteration
time / GPUs. The ZeRO stage is not published (the DeepSpeed config is not in the repository):
unstated. Read at vTrain commit f8dda84.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import yaml

COMMIT = "f8dda84"
OUT = Path(__file__).resolve().parent / "independent" / "vtrain.yaml"
VOCAB = 50257  # vTrain src/config.py vocab_size default (GPT-2 BPE)


def _case(kind: str, index: int, row: dict, config: dict) -> dict:
    g, gb, mb = int(row["# GPUs"]), int(row["global batch"]), int(row["micro batch"])
    h, heads, layers = int(row["hidden size"]), int(row["attention heads"]), int(row["# layers"])
    seq = int(row["sequence length"])
    tp, dp, pp = (
        int(row["tensor parallelism"]),
        int(row["data parallelism"]),
        int(row["pipeline parallelism"]),
    )
    ms = float(row["iteration time (ms)"])
    checkpoint = bool(config["use_checkpoint"])
    return {
        "id": f"vtrain_{kind}_{index:04d}",
        "source": (
            f"VIA-Research/vTrain {COMMIT} data/ground_truth_{kind}.csv row {index + 1}, "
            f"config/validation/{kind}/{config['_file']}"
        ),
        "quality": "verified_primary",
        "scored": True,
        "model": {
            "name": f"vtrain-gpt-h{h}-l{layers}",
            "layers": layers,
            "hidden": h,
            "ffn_hidden": 4 * h,
            "activation": "gelu",
            "heads": heads,
            "kv_heads": heads,
            "head_dim": h // heads,
            "vocab": VOCAB,
            "tied_embeddings": True,
            "moe": None,
            "mla": None,
            "learned_position_embeddings": True,
            "max_positions": seq,
        },
        "cluster": "hgx-a100-80gb-100g",
        "num_gpus": g,
        "stack": "megatron-deepspeed-2022",
        "layout": {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1, "sequence_parallel": False},
        "training": {
            "seq_len": seq,
            "global_batch": gb,
            "micro_batch": mb,
            "recompute": "full" if checkpoint else "none",
            "precision": "fp16",
        },
        "unstated": ["zero"],
        "measured": {
            "tokens_per_s_per_gpu": round(gb * seq / (ms / 1000.0) / g, 2),
            "mfu_pct": None,
        },
        "notes": f"iteration {ms} ms; tokens/s/GPU = {gb} x {seq} / {ms / 1000.0} s / {g} GPUs",
    }


def _configs(root: Path, kind: str) -> list[dict]:
    out = []
    for path in sorted((root / "config" / "validation" / kind).glob("*.json")):
        cfg = json.loads(path.read_text())
        cfg["_file"] = path.name
        out.append(cfg)
    return out


# the measured row's columns and the simulation config's keys that identify one run
KEY = (
    ("# GPUs", "num_gpus"),
    ("global batch", "global_batch_size"),
    ("micro batch", "micro_batch_size"),
    ("hidden size", "hidden_size"),
    ("# layers", "num_layers"),
    ("tensor parallelism", "tensor_parallel_size"),
    ("data parallelism", "data_parallel_size"),
    ("pipeline parallelism", "pipeline_parallel_size"),
)


def _match(row: dict, configs: list[dict]) -> dict:
    """The simulation config of a measured row (same GPUs, batch, shape and layout)."""
    key = tuple(int(row[column]) for column, _ in KEY)
    for c in configs:
        if tuple(c[name] for _, name in KEY) == key:
            return c
    raise SystemExit(f"no config for row {row}")


def cases(root: Path) -> list[dict]:
    """Every measured row of both files, as schema 2 cases."""
    out = []
    for kind in ("single", "multi"):
        configs = _configs(root, kind)
        with open(root / "data" / f"ground_truth_{kind}.csv", encoding="utf-8-sig") as f:
            for i, row in enumerate(csv.DictReader(f)):
                out.append(_case(kind, i, row, _match(row, configs)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vtrain", type=Path, help="a checkout of github.com/VIA-Research/vTrain")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    body = {"schema": 2, "cases": cases(a.vtrain)}
    head = (
        "# Independent check: vTrain's measured iteration times (Megatron-DeepSpeed, A100),\n"
        "# written by benchmarks/vtrain_import.py from VIA-Research/vTrain "
        f"{COMMIT}. No fit reads it.\n"
    )
    a.out.write_text(head + yaml.safe_dump(body, sort_keys=False, width=100))
    print(f"{len(body['cases'])} cases -> {a.out}")


if __name__ == "__main__":
    main()
