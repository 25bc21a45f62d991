"""Closed-loop check: build a real torch model from a ModelSpec and time its training step.

``gpt.build_gpt`` turns a dense :class:`planner.specs.model.ModelSpec` into a decoder-only
transformer whose parameter count matches ``spec.total_params``; ``train`` times full training
steps (single process and DDP) so measured step times can be compared with the planner's.
"""

from calibration.closed_loop.gpt import GPT, build_gpt, lm_loss
from calibration.closed_loop.train import measure_ddp_step, measure_training_step

__all__ = ["GPT", "build_gpt", "lm_loss", "measure_ddp_step", "measure_training_step"]
