"""Token-mixer kinds and their costs, one module each, looked up by the spec's ``kind``.

>>> from planner.specs.blocks import Mamba2Mixer
>>> mixer_costs(Mamba2Mixer()).kind
'mamba2'

A new mixer: its spec class in :mod:`planner.specs.blocks` (fields and ``params``), one module
here implementing :class:`~planner.costs.blocks.base.MixerCosts`, and one line in
``MIXER_COSTS``. Channel mixers (dense MLP, MoE, none) are
:mod:`planner.costs.blocks.channel`, looked up the same way (``channel_costs``).
"""

from __future__ import annotations

from typing import Any

from planner.costs.blocks.attention import AttentionCosts
from planner.costs.blocks.base import MixerActivations, MixerCosts, MixerElementwise
from planner.costs.blocks.linear_attention import LinearAttentionCosts
from planner.costs.blocks.mamba2 import Mamba2Costs

MIXER_COSTS: dict[str, MixerCosts] = {
    c.kind: c for c in (AttentionCosts(), Mamba2Costs(), LinearAttentionCosts())
}


def mixer_costs(mixer: Any) -> MixerCosts:
    """The costs of ``mixer``'s kind (``mixer.kind``, a token-mixer spec)."""
    return MIXER_COSTS[mixer.kind]


__all__ = ["MIXER_COSTS", "MixerActivations", "MixerCosts", "MixerElementwise", "mixer_costs"]
