"""A schema 1 case's measured tokens/s/GPU from the throughput figure it gives instead.

Sources publish throughput per job or per step as often as per GPU: total tokens/s, sequences
(samples) per second, or the time of one training step (vTrain's iteration times, Paxml's
sequences/s). Schema 1 scores tokens/s/GPU; where a case leaves that field out (missing or null)
and gives one of these under its ``measured``, the figure follows from the case's own sizes:

- tokens/s for the whole job / ``num_gpus``;
- sequences/s x ``training.seq_len`` / ``num_gpus``;
- a step time: ``training.global_batch`` x ``seq_len`` / step time / ``num_gpus`` (seconds or
  milliseconds, as the key says).

``planner.validate.leniency`` applies it (schema 1, not under ``--strict``) and the row names
the figure it was read from; the key is then dropped. A case that gives tokens/s/GPU keeps it.
"""

from __future__ import annotations

import math
import re
from typing import Any

# the measured keys (lower case, "-" and spaces as "_") of each kind of figure, and the factor
# to its base unit (tokens/s, sequences/s, seconds)
JOB_TOKENS: dict[str, float] = dict.fromkeys(
    ("tokens_per_s", "tokens_per_sec", "tokens_per_second", "throughput_tokens_per_s"), 1.0
)
SEQUENCES: dict[str, float] = dict.fromkeys(
    (
        "sequences_per_s",
        "sequences_per_sec",
        "sequences_per_second",
        "samples_per_s",
        "samples_per_sec",
        "samples_per_second",
    ),
    1.0,
)
STEP_TIME: dict[str, float] = {
    **dict.fromkeys(("step_time_s", "iteration_time_s", "step_time", "iteration_time"), 1.0),
    **dict.fromkeys(("step_time_ms", "iteration_time_ms"), 1e-3),
}
SCORED = "tokens_per_s_per_gpu"


def _key(key: Any) -> str | None:
    return key.strip().lower().replace("-", "_").replace(" ", "_") if isinstance(key, str) else None


def _positive(value: Any) -> float | None:
    """``value`` as a finite positive number (text as tables print it: "1,234.5"), else None."""
    if isinstance(value, str):
        word = value.strip().replace(",", "").replace("_", "")
        value = float(word) if re.fullmatch(r"\d+(\.\d*)?([eE][+-]?\d+)?", word) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def per_gpu(case: dict[str, Any]) -> list[str]:
    """Set ``measured.tokens_per_s_per_gpu`` from the first job-level figure the case gives in
    its place (:data:`JOB_TOKENS`, :data:`SEQUENCES`, :data:`STEP_TIME`), dropping that key;
    what was done. ``case`` and its ``measured`` must be the caller's own copies."""
    measured = case.get("measured")
    if not isinstance(measured, dict) or measured.get(SCORED) is not None:
        return []
    if any("per_gpu" in (_key(k) or "") for k in measured):  # a per-GPU figure, spelled otherwise
        return []
    training = case.get("training") if isinstance(case.get("training"), dict) else {}
    gpus, seq = _positive(case.get("num_gpus")), _positive(training.get("seq_len"))
    batch = _positive(training.get("global_batch"))
    for key, value in list(measured.items()):
        word, figure = _key(key), _positive(value)
        if word is None or figure is None or gpus is None:
            continue
        if word in JOB_TOKENS:
            tokens, how = figure * JOB_TOKENS[word], "it / num_gpus"
        elif word in SEQUENCES and seq is not None:
            tokens, how = figure * SEQUENCES[word] * seq, "it x seq_len / num_gpus"
        elif word in STEP_TIME and seq is not None and batch is not None:
            tokens = batch * seq / (figure * STEP_TIME[word])
            how = "global_batch x seq_len / it / num_gpus"
        else:
            continue
        del measured[key]
        measured[SCORED] = round(tokens / gpus, 6)
        shown = f"{value!s:.20}"
        return [
            f"measured.{word} {shown} read as tokens_per_s_per_gpu = {how} = {measured[SCORED]:g}"
        ]
    return []


__all__ = ["JOB_TOKENS", "SCORED", "SEQUENCES", "STEP_TIME", "per_gpu"]
