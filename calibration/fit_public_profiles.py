"""Fit the default calibration profile of every shipped accelerator from public measurements.

    python -m calibration.fit_public_profiles      # writes calibration/profiles/<accelerator>.json

Inputs are the public figures transcribed in shared/reference/hardware.md, repeated below with
their sources so the fit is reproducible from this repository alone. No validation case is used here, except through the two global numbers below.

* GEMM: Maximum Achievable Matmul FLOPS (stas00/ml-engineering, compute/accelerator/README.md):
  eta_max = MAMF / peak / s(M) s(N) s(K) / u(M, N, K) at the best shape, s(d) = d / (d + dim_half),
  u the tile / wave quantization over the SM count (planner/costs/waves.py).
* Attention: FlashAttention-2 on A100 (Dao 2023, arXiv 2307.08691, Figs. 4-6), causal, d=128,
  fwd and bwd TFLOP/s over sequence length: eta_max and seq_half fitted by least squares
  (scipy.optimize.curve_fit). Hopper uses FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608)
  16k figures with the A100 seq_half, and cuDNN's own column of the same figures for the
  cuDNN kernel Transformer Engine runs (``attention_cudnn``, Hopper only); Blackwell scales
  Hopper by the measured FA4-on-B200 over FA3-on-H200 attention speed-up, 1.88x at 8k and 1.95x
  at 32k (ml-engineering insights/when-to-upgrade-gpus): a saturated speed-up and Blackwell's
  own seq_half that give both (its larger tiles fill later).
* Collectives: ring all-reduce busbw at 16 GiB / NVLink spec (ml-engineering network/README.md:
  A100 234.89 of 300, H200 ring 367.2 of 450, B200 ring-only 682.2 of 900, MI300X 312.9 of 448);
  NIC efficiency 47/50 from the NVIDIA maintainer's "46-48 GB/s per NDR NIC" (nccl-tests #290);
  hierarchical overlap fitted to the 4-node B200 all-reduce (4 GiB: 22.05 ms, 1 node 740.64
  GB/s busbw); NCCL base latency 8.4 us (tuning.cc baseLat Ring/Simple); on A100 the
  nccl-tests all_reduce busbw over message size (32 KiB to 16 GiB), the in-domain size curve.
* In-training parameters (sustained_fraction per GPU generation, overlap_contention, host
  op_us): fitted by calibration/fit_global.py on the public validation set (docs/validation.md).
* Memory-bound kernels: 0.85 of HBM peak, the low end of the 85-92% streaming ceiling noted in
  hardware.md B8 (weakly sourced; replaced by measurement in `planner calibrate`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.optimize import brentq, curve_fit

from planner.costs.waves import wave_utilization
from planner.profile import (
    PROFILES_DIR,
    AttentionEfficiency,
    CalibrationProfile,
    CommEfficiency,
    GemmEfficiency,
    HostOverhead,
    MemoryEfficiency,
)
from planner.specs.hardware import AcceleratorSpec
from planner.specs.loading import ACCELERATORS_DIR, load_accelerator, shipped_ids

# Every file this fit reads (tests/calibration/test_fit_inputs.py): the accelerator specs and
# the three global numbers; the microbenchmark tables are transcribed in this module.
READS = (
    "hardware_specs/accelerators/*.yaml",
    "calibration/global_params.json",
    "calibration/device_ratios.json",
)

DIM_HALF = 64.0  # GEMM dimension at half efficiency: half a 128-wide tile (assumption)
GEMM_FIXED_US = 4.0  # launch + wave tail per GEMM kernel (assumption)
MEM_FIXED_US = 3.0  # launch per memory-bound kernel (assumption)
ETA_HBM = 0.85
NCCL_BASE_LATENCY_US = 8.4
NIC_ETA = 47.0 / 50.0

# MI300X has no fp8 MAMF row (hardware.md B1: "no value"). AMD's own max-achievable FLOPs,
# hipBLASLt at its best shapes on an MI300X (750 W), are 708 TFLOP/s bf16 and 1273 TFLOP/s fp8
# (ROCm blog "Measuring Max-Achievable FLOPs - Part 2", Table 1, Feb 2025): fp8 reaches 1.80x
# bf16, not the 2x of the peaks. The bf16 MAMF scaled by that measured ratio, at the bf16 shape:
MI300X_FP8_MAMF = 668.4 * 1273.0 / 708.0
# MAMF (TFLOP/s, best shape M x N x K), ml-engineering MAMF tables (hardware.md B1).
MAMF = {
    "a100": {"bf16": (271.2, (1024, 10240, 5120))},
    "h100": {"bf16": (794.5, (2048, 2048, 13312)), "fp8": (1402.6, (1024, 9216, 14336))},
    "h200": {"bf16": (794.5, (2048, 2048, 13312)), "fp8": (1453.4, (1280, 4096, 12032))},
    "b200": {"bf16": (1745.0, (1792, 16128, 3072)), "fp8": (3432.5, (15360, 4096, 3072))},
    "gb200": {"bf16": (1822.0, (4096, 9728, 2048)), "fp8": (3615.6, (19456, 5120, 1536))},
    "b300": {"bf16": (1769.0, (12288, 18432, 1024)), "fp8": (3353.3, (3072, 6144, 7168))},
    "mi300x": {
        "bf16": (668.4, (10240, 15360, 8192)),
        "fp8": (MI300X_FP8_MAMF, (10240, 15360, 8192)),
    },
}
# which measured family each shipped accelerator borrows (same silicon or closest measured)
FAMILY = {
    "a100-sxm4-40gb": "a100",
    "a100-sxm4-80gb": "a100",
    "h100-sxm5-80gb": "h100",
    "h100-sxm5-96gb": "h100",
    "h800-sxm-80gb": "h100",
    "h200-sxm-141gb": "h200",
    "b200": "b200",
    "gb200": "gb200",
    "b300": "b300",
    "gb300": "gb200",
    "mi300x": "mi300x",
}
# the GPU generation whose in-training sustained fraction each accelerator takes
# (calibration/fit_global.py fits one per generation with public cases; the others take their mean)
GENERATION = {
    "a100-sxm4-40gb": "ampere",
    "a100-sxm4-80gb": "ampere",
    "h100-sxm5-80gb": "hopper",
    "h100-sxm5-96gb": "hopper",
    "h800-sxm-80gb": "hopper",
    "h200-sxm-141gb": "hopper",
    "b200": "blackwell",
    "gb200": "blackwell",
    "b300": "blackwell",
    "gb300": "blackwell",
    "mi300x": "cdna3",
}
# FlashAttention-2, A100 80GB, causal, head_dim 128, TFLOP/s (hardware.md B7)
FA2_SEQ = np.array([512, 1024, 2048, 4096, 8192, 16384], dtype=float)
FA2_FWD = np.array([108, 126, 133, 148, 148, 148], dtype=float)
FA2_BWD = np.array([90, 122, 145, 165, 175, 186], dtype=float)
A100_PEAK = 312.0
# FlashAttention-3, H100, FP16, causal d=128 fwd 616; non-causal d=128 bwd 561 TFLOP/s at 16k.
FA3_FWD_16K, FA3_BWD_16K, H100_PEAK = 616.0, 561.0, 989.0
# FlashAttention-2 on H100 (FA3 paper baseline column): fwd causal d128 335, bwd d128 322 at 16k
FA2_H100_FWD_16K, FA2_H100_BWD_16K = 335.0, 322.0
# cuDNN 9.1.1 fused attention on H100 (FA3 paper cuDNN column, the kernel Transformer Engine
# runs): fwd causal d128 539, bwd d128 516 TFLOP/s at 16k (FA3: 616 / 561)
CUDNN_H100_FWD_16K, CUDNN_H100_BWD_16K = 539.0, 516.0
# FA4 on B200 / FA3 on H200, attention fwd+bwd: (sequence length, speed-up)
BLACKWELL_ATTN_SPEEDUP = ((8192.0, 1.88), (32768.0, 1.95))
# A100 SXM 8-GPU node, nccl-tests all_reduce_perf busbw (GB/s) over message size
# (ml-engineering network/README.md "Real network throughput"; hardware.md B4): the measured
# in-domain bandwidth-over-size curve of the A100 profiles, as fractions of the 16 GiB busbw.
# Hopper and Blackwell have no ring-only curve measured at mid sizes (the H200 table runs NVLS,
# which outruns the ring from 2 MiB): their profiles keep the alpha-beta model.
A100_ALLREDUCE_BUSBW = (
    (2**15, 1.31), (2**16, 2.45), (2**17, 4.43), (2**18, 7.47), (2**19, 11.41),
    (2**20, 18.00), (2**21, 36.18), (2**22, 72.33), (2**23, 109.93), (2**24, 106.16),
    (2**25, 138.49), (2**26, 171.54), (2**27, 176.92), (2**28, 194.07), (2**29, 222.72),
    (2**30, 229.04), (2**31, 231.41), (2**32, 233.88), (2**33, 234.61), (2**34, 234.89),
)  # fmt: skip
SIZE_CURVES = {
    "a100": tuple((float(b), round(bw / 234.89, 4)) for b, bw in A100_ALLREDUCE_BUSBW),
}
# Ring all-reduce busbw / NVLink spec at 16 GiB (hardware.md B4)
SCALE_UP_ETA = {
    "a100": 234.89 / 300,
    "h100": 367.2 / 450,
    "h200": 367.2 / 450,
    "b200": 682.2 / 900,
    "gb200": 682.2 / 900,
    "b300": 682.2 / 900,
    "mi300x": 312.9 / 448,
}


def _shape(dims: tuple[int, int, int]) -> float:
    return float(np.prod([d / (d + DIM_HALF) for d in dims]))


def _saturating(s: np.ndarray, eta: float, half: float) -> np.ndarray:
    return eta * s / (s + half)


def fit_attention() -> tuple[float, float, float]:
    """(eta_fwd, eta_bwd, seq_half) on A100 from the FlashAttention-2 causal d=128 curves."""
    (ef, hf), _ = curve_fit(_saturating, FA2_SEQ, FA2_FWD / A100_PEAK, p0=(0.5, 300.0))
    (eb, hb), _ = curve_fit(_saturating, FA2_SEQ, FA2_BWD / A100_PEAK, p0=(0.6, 300.0))
    return float(ef), float(eb), float((hf + hb) / 2)


def blackwell_attention(half: float) -> tuple[float, float]:
    """(saturated speed-up over Hopper's FlashAttention-3 curve, Blackwell's seq_half) that
    reproduce both measured speed-ups of :data:`BLACKWELL_ATTN_SPEEDUP`: with Hopper's
    efficiency growing as s / (s + ``half``) and Blackwell's as s / (s + H), the speed-up at
    length s is R (s + half) / (s + H); two points give R and H in closed form."""
    (s1, r1), (s2, r2) = BLACKWELL_ATTN_SPEEDUP
    big = (r2 * s2 * (s1 + half) - r1 * s1 * (s2 + half)) / (r1 * (s2 + half) - r2 * (s1 + half))
    return r1 * (s1 + big) / (s1 + half), big


def fit_hierarchical_overlap() -> float:
    """Fraction of the shorter phase hidden, from the 4-node x 8 B200 all-reduce of 4 GiB."""
    size = 4 * 2**30
    intra = 2 * 7 / 8 * size / 740.64e9  # one-node measured busbw
    inter = 2 * 3 / 4 * (size / 8) / (50e9 * NIC_ETA)
    measured = 22.05e-3
    return float(
        np.clip(brentq(lambda f: intra + inter - f * min(intra, inter) - measured, -5, 5), 0.0, 1.0)
    )


# peak (dense bf16 TFLOP/s) that each measured family's MAMF figures are relative to
FAMILY_PEAK = {
    "a100": 312,
    "h100": 989,
    "h200": 989,
    "b200": 2250,
    "gb200": 2500,
    "b300": 2250,
    "mi300x": 1307.4,
}
SOURCES = (
    "GEMM: stas00/ml-engineering compute/accelerator/README.md MAMF tables",
    "attention: FlashAttention-2 (arXiv 2307.08691) Figs. 4-6; FlashAttention-3 "
    "(arXiv 2407.08608); ml-engineering insights/when-to-upgrade-gpus",
    "collectives: ml-engineering network/README.md; NVIDIA/nccl-tests #290; "
    "NVIDIA/nccl src/graph/tuning.cc",
    "memory: shared/reference/hardware.md B8 (85-92% streaming ceiling, weakly sourced)",
)
# sources only one family's profile rests on
FAMILY_SOURCES = {
    "mi300x": (
        "GEMM fp8: bf16 MAMF x 1273/708, AMD's fp8/bf16 max-achievable FLOPs (ROCm blog "
        "'Measuring Max-Achievable FLOPs - Part 2', Table 1)",
    ),
}


def _gemm_eta(accel: AcceleratorSpec, fam: str) -> tuple[dict[str, float], dict[str, dict]]:
    """(GEMM eta_max per precision, the MAMF figures behind them) of ``accel`` from its
    family's MAMF: eta_max = MAMF / family peak / shape factor / wave quantization at the best
    shape (planner/costs/waves.py, over ``accel.sm_count``), at most 0.99."""
    eta: dict[str, float] = {}
    mamf: dict[str, dict] = {}
    for prec, (tflops, dims) in MAMF[fam].items():
        peak = getattr(accel.peak_tflops, prec) or accel.peak_tflops.fp16
        fam_peak = FAMILY_PEAK[fam] * (2 if prec == "fp8" else 1)
        waves = wave_utilization(*map(float, dims), accel.sm_count)
        eta[prec] = min(0.99, tflops / fam_peak / _shape(dims) / waves)
        mamf[prec] = {
            "tflops": tflops,
            "shape": list(dims),
            "family_peak": fam_peak,
            "accelerator_peak": peak,
        }
    return eta, mamf


def _attention_eta(
    accel: AcceleratorSpec, fam: str, attn: tuple[float, float, float], gemm_eta: dict[str, float]
) -> tuple[float, float, float]:
    """(eta_max fwd, eta_max bwd, seq_half) of attention on ``accel``: the A100
    FlashAttention-2 fit, FlashAttention-3 on Hopper, Hopper scaled by the measured speed-up
    on Blackwell (:func:`blackwell_attention`, with its own seq_half), and the A100 fit scaled
    by the GEMM efficiency ratio on MI300X; not yet clipped to 1."""
    ef, eb, half = attn
    if fam in ("h100", "h200"):
        ef, eb = (
            FA3_FWD_16K / H100_PEAK / _saturating(16384, 1, half),
            FA3_BWD_16K / H100_PEAK / (16384 / (16384 + half)),
        )
    elif fam in ("b200", "gb200", "b300"):
        h_ef = FA3_FWD_16K / H100_PEAK / (16384 / (16384 + half))
        h_eb = FA3_BWD_16K / H100_PEAK / (16384 / (16384 + half))
        speedup, half = blackwell_attention(half)
        scale = speedup * H100_PEAK / accel.peak_tflops.fp16
        ef, eb = h_ef * scale, h_eb * scale
    elif fam == "mi300x":
        ratio = gemm_eta["bf16"] / (MAMF["a100"]["bf16"][0] / 312 / _shape(MAMF["a100"]["bf16"][1]))
        ef, eb = ef * ratio, eb * ratio
    return ef, eb, half


def _flash2_attention(accel: AcceleratorSpec, fam: str, half: float) -> AttentionEfficiency | None:
    """FlashAttention-2 efficiency on Hopper and Blackwell (None elsewhere)."""
    if fam not in ("h100", "h200", "b200", "gb200", "b300"):
        return None
    sat16k = 16384 / (16384 + half)
    # FA2 uses no Hopper/Blackwell-specific features: same absolute TFLOP/s as on H100
    # (assumption for Blackwell, where no FA2 figure is published)
    scale = H100_PEAK / accel.peak_tflops.fp16
    return AttentionEfficiency(
        eta_max_fwd=round(FA2_H100_FWD_16K / H100_PEAK / sat16k * scale, 4),
        eta_max_bwd=round(FA2_H100_BWD_16K / H100_PEAK / sat16k * scale, 4),
        seq_half=round(half, 1),
    )


def _cudnn_attention(fam: str, half: float) -> AttentionEfficiency | None:
    """cuDNN fused attention on Hopper, from its own column of the FlashAttention-3 paper
    (None elsewhere: no public cuDNN figure apart from the best kernel; the fused curve)."""
    if fam not in ("h100", "h200"):
        return None
    sat16k = 16384 / (16384 + half)
    return AttentionEfficiency(
        eta_max_fwd=round(CUDNN_H100_FWD_16K / H100_PEAK / sat16k, 4),
        eta_max_bwd=round(CUDNN_H100_BWD_16K / H100_PEAK / sat16k, 4),
        seq_half=round(half, 1),
    )


def build_profile(accel_id: str, attn: tuple[float, float, float], overlap: float) -> dict:
    """The calibration profile of ``accel_id`` (as a dict) from the public figures, the
    attention fit ``attn`` (eta_fwd, eta_bwd, seq_half) and the hierarchical overlap."""
    accel = load_accelerator(accel_id)
    fam = FAMILY[accel_id]
    glob = global_params()
    eta, mamf = _gemm_eta(accel, fam)
    half = attn[2]
    ef, eb, attn_half = _attention_eta(accel, fam, attn, eta)
    profile = CalibrationProfile(
        id=accel_id,
        accelerator=accel_id,
        method="fitted from public figures by calibration/fit_public_profiles.py",
        gemm=GemmEfficiency(
            eta_max={k: round(v, 4) for k, v in eta.items()},
            dim_half=DIM_HALF,
            fixed_us=GEMM_FIXED_US,
            sustained_fraction=sustained_fraction(glob, accel_id),
        ),
        attention=AttentionEfficiency(
            eta_max_fwd=round(min(ef, 1.0), 4),
            eta_max_bwd=round(min(eb, 1.0), 4),
            seq_half=round(attn_half, 1),
        ),
        attention_flash2=_flash2_attention(accel, fam, half),
        attention_cudnn=_cudnn_attention(fam, half),
        memory=MemoryEfficiency(eta_hbm=ETA_HBM, fixed_us=MEM_FIXED_US),
        comm=CommEfficiency(
            scale_up_eta=round(SCALE_UP_ETA[fam], 4),
            scale_out_eta=NIC_ETA,
            base_latency_us=NCCL_BASE_LATENCY_US,
            size_curve=SIZE_CURVES.get(fam, ()),
            hierarchical_overlap=round(overlap, 4),
            overlap_contention=glob["overlap_contention"],
        ),
        host=HostOverhead(op_us=glob["host_op_us"]),
        sources=list(SOURCES) + (list(FAMILY_SOURCES[fam]) if fam in FAMILY_SOURCES else []),
        raw={"mamf": mamf} | {"measured_family": fam},
    )
    return profile.with_triton_attention_slowdown(glob["attention_triton_slowdown"]).model_dump()


GLOBAL_PARAMS = Path(__file__).resolve().parent / "global_params.json"
# a device's in-training speed over its generation's, measured from paired published runs
# (calibration/fit_device_ratio.py: GB300 over GB200)
DEVICE_RATIOS = Path(__file__).resolve().parent / "device_ratios.json"


def sustained_fraction(glob: dict, accel_id: str) -> float:
    """The fitted sustained fraction of ``accel_id``'s generation (one number: every one),
    times the device's own ratio where ``calibration/fit_device_ratio.py`` measured one."""
    sf = glob["sustained_fraction"]
    base = float(sf.get(GENERATION[accel_id], sf["default"])) if isinstance(sf, dict) else float(sf)
    ratios = json.loads(DEVICE_RATIOS.read_text()) if DEVICE_RATIOS.is_file() else {}
    return round(base * float(ratios.get(accel_id, {}).get("sustained_ratio", 1.0)), 4)


def global_params() -> dict:
    """In-training parameters fitted by calibration/fit_global.py (1.0 / 0.0 before a fit)."""
    if GLOBAL_PARAMS.is_file():
        data = json.loads(GLOBAL_PARAMS.read_text())
        return {
            "sustained_fraction": data["sustained_fraction"],
            "overlap_contention": data["overlap_contention"],
            "host_op_us": data.get("host_op_us", 0.0),
            "attention_triton_slowdown": data.get("attention_triton_slowdown", 1.0),
        }
    return {
        "sustained_fraction": 1.0,
        "overlap_contention": 0.0,
        "host_op_us": 0.0,
        "attention_triton_slowdown": 1.0,
    }


def main() -> None:
    attn = fit_attention()
    overlap = fit_hierarchical_overlap()
    PROFILES_DIR.mkdir(parents=True, exist_ok=True)
    for accel_id in shipped_ids(ACCELERATORS_DIR):
        data = build_profile(accel_id, attn, overlap)
        path = Path(PROFILES_DIR) / f"{accel_id}.json"
        path.write_text(json.dumps(data, indent=2) + "\n")
        g = data["gemm"]["eta_max"]
        print(
            f"{accel_id:16} gemm {g}  attn fwd/bwd {data['attention']['eta_max_fwd']:.3f}/"
            f"{data['attention']['eta_max_bwd']:.3f}  up {data['comm']['scale_up_eta']:.3f}"
        )


if __name__ == "__main__":
    main()
