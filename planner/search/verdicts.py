"""The knob rules' verdicts, kept under the values the rules read (the generator's hot loop)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from planner.legality import Candidate, Rule
from planner.specs.hardware import Cluster
from planner.specs.layout import Layout, Training
from planner.specs.model import ModelSpec


def _first_broken(rules: Sequence[Rule], c: Candidate) -> str | None:
    """Name of the first rule ``c`` breaks."""
    for rule in rules:
        if rule.check(c) is not None:
            return rule.name
    return None


def knob_verdicts(
    model: ModelSpec, cluster: Cluster, rules: Sequence[Rule]
) -> Callable[[int, Layout, Training], str | None]:
    """``(gpus, layout, training) -> the first knob rule broken`` (None: none), each answer
    kept under the values the knob rules read (``Rule.reads``: Layout and Training fields and
    the GPU count), so that a search asks each rule once per distinct combination."""
    reads = sorted(set().union(*(r.reads for r in rules)))
    on_layout = [f for f in reads if f in Layout.model_fields]
    on_training = [f for f in reads if f in Training.model_fields]
    if not set(reads) <= {*on_layout, *on_training, "gpus"}:  # pragma: no cover
        on_layout = list(Layout.model_fields)  # a read the key cannot see: every field
    of_layout = operator.itemgetter(*on_layout) if on_layout else lambda d: ()
    of_training = operator.itemgetter(*on_training) if on_training else lambda d: ()
    gpus_read = "gpus" in reads
    known: dict[tuple, str | None] = {}

    def verdict(gpus: int, layout: Layout, tr: Training) -> str | None:
        key = (of_layout(layout.__dict__), of_training(tr.__dict__), gpus if gpus_read else 0)
        out = known.get(key, UNSEEN)
        if out is UNSEEN:
            out = known[key] = _first_broken(rules, Candidate(model, cluster, layout, tr, gpus))
        return out

    verdict.layout_reads = lambda layout: of_layout(layout.__dict__)  # type: ignore[attr-defined]
    return verdict


UNSEEN = object()
