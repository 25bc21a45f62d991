"""Torch microbenchmark suite behind ``planner calibrate``.

Parts (each returns samples from :mod:`calibration.samples`):

* :mod:`.gemm` -- matmuls with the (m, n, k) shapes transformer layers produce.
* :mod:`.attention` -- ``scaled_dot_product_attention`` forward and backward.
* :mod:`.memory` -- memory-bound ops (copy, norms, softmax cross-entropy, AdamW).
* :mod:`.collectives` -- ``torch.distributed`` collectives (gloo on CPU, nccl on CUDA).

:func:`.run.run_suite` runs all of them and returns a
:class:`calibration.samples.SuiteResult`. Importing this package does not import torch;
each submodule does.
"""

from __future__ import annotations

__all__ = ["attention", "collectives", "gemm", "memory", "run", "timing"]
