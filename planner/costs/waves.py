"""Tile and wave quantization of a GEMM over the GPU's streaming multiprocessors.

A GEMM library splits the (m x n) output into tiles of (tm x tn), one thread block (CTA) each,
and runs them in waves of one CTA per SM (NVIDIA, "Matrix Multiplication Background User's
Guide", DU-09799-001, section 3: tile quantization pads m and n up to whole tiles; wave
quantization rounds the CTA count up to whole waves of SM-count CTAs). The fraction of the
issued tile-work that is useful is

    u(tile, split) = (m n) / (ceil(m/tm) tm ceil(n/tn) tn)  x  C / (ceil(C/S) S),
    C = ceil(m/tm) ceil(n/tn) split,

where S is the SM count and ``split`` the split-K factor: when the output has too few tiles to
fill the GPU, cuBLAS splits the reduction dimension over several CTAs (split-K) and sums the
partial tiles afterwards. The library picks the best of its kernels; this module takes the best
u over the large tiles the guide lists as cuBLAS's efficient ones (256x128, 128x256, 128x128,
section 2.3) and split-K factors 1..4 while each K chunk keeps at least ``MIN_SPLIT_K``
elements (smaller tiles and the short-K penalty are the profile's smooth ``dim_half`` curve in
``compute.gemm_time_s``, which this factor multiplies).

The staircase is the one ml-engineering describes ("speedup between SM counts S1 < S2 is
ceil(C/S1)/ceil(C/S2)", training/performance/README.md, via shared/reference/hardware.md B1).
Large training GEMMs issue tens of waves and lose a few percent; a TP-8 GEMM of a 1,024-wide
model issues one or two waves and loses up to half. Without an SM count (``sm_count`` None in
the accelerator spec) the factor is 1.
"""

from __future__ import annotations

import math
from functools import lru_cache

# cuBLAS's most efficient CTA tiles (m x n), NVIDIA Matrix Multiplication Background guide 2.3.
TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))
MAX_SPLIT_K = 4
# elements of K per split chunk. Measured on an H200 (calibration/measured/h200-sxm-141gb-
# measured.json, 512 GEMMs in 4 dtypes, shape terms refitted for each value): 1024 left
# output-starved shapes (256 x 2048, K 1024: 32 tiles on 132 SMs) predicted up to 185 % slow;
# 256 brings the worst to 41 % and p90 from 15.2 to 14.2 %, median 5.8 -> 6.0 %. The public
# validation MAPE moved 7.18 -> 7.19 %, the independent set's not at all (large GEMMs split
# never). An empirical choice, not a cuBLAS heuristic read from source.
MIN_SPLIT_K = 256


def _padding(dim: float, tile: int) -> tuple[int, float]:
    """(tiles along one dimension, useful fraction of the padded length)."""
    tiles = max(1, math.ceil(dim / tile))
    return tiles, dim / (tiles * tile)


@lru_cache(maxsize=65536)
def wave_utilization(
    m: float, n: float, k: float, sm_count: int | None, batch: float = 1.0
) -> float:
    """Useful fraction (0, 1] of the tile-work issued for ``batch`` (m x k) @ (k x n) GEMMs run
    by one batched or grouped launch (their CTAs share the waves)."""
    if sm_count is None or m <= 0 or n <= 0:
        return 1.0
    batch = max(1.0, batch)
    splits = max(1, min(MAX_SPLIT_K, int(k // MIN_SPLIT_K)))
    best = 0.0
    for tm, tn in TILES:
        rows, fill_m = _padding(m, tm)
        cols, fill_n = _padding(n, tn)
        fill = fill_m * fill_n
        tiles = rows * cols * batch
        for split in range(1, splits + 1):
            ctas = math.ceil(tiles * split)
            u = fill * ctas / (math.ceil(ctas / sm_count) * sm_count)
            if u > best:
                best = u
    return best


__all__ = ["MAX_SPLIT_K", "MIN_SPLIT_K", "TILES", "wave_utilization"]
