"""Fit a CalibrationProfile from the raw samples of ``planner calibrate`` (scipy).

* GEMM: t = 2mnk / (peak x eta_dtype x s(m)s(n)s(k) u) + fixed, s(d) = d / (d + dim_half),
  u the tile / wave quantization over the accelerator's SM count (planner/costs/waves.py),
  one dim_half and fixed cost fitted jointly over dtypes by least squares on log time. On a
  GPU eta_dtype is the best measured throughput over the datasheet peak (the MAMF convention
  of the public tables that the shipped profiles and the global sustained fraction are built
  on); on a CPU it is fitted with the shape terms.
* Attention: eta(S) = eta_max S / (S + seq_half) for forward and backward, FLOPs in the
  FlashAttention convention (forward 4 b h S^2 d, halved for causal; backward 2.5x).
* Memory-bound ops: t = bytes / bandwidth_op + fixed (non-negative least squares), one
  effective bandwidth per op (copy, norms, softmax + cross-entropy, AdamW) over the reference
  (datasheet on GPUs, measured copy bandwidth on CPUs).
* Collectives: per op and group size, alpha-beta t = latency + factor(n) bytes / busbw with
  non-negative least squares (nccl-tests bus-bandwidth factors).

The peak a GPU profile is relative to is its accelerator's datasheet figure; a CPU host has
none, so its best measured GEMM throughput per dtype is its "peak" (``MeasuredDevice``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from scipy.optimize import curve_fit, least_squares, nnls

from calibration.samples import AttentionSample, SuiteResult
from calibration.suite.memory import ADAMW_BYTES_PER_ELEMENT
from planner.costs.comms import _factor
from planner.costs.elementwise import ADAM_BYTES, CLIP_NORM_READ_BYTES
from planner.costs.waves import wave_utilization
from planner.profile import (
    AttentionEfficiency,
    CalibrationProfile,
    CollectiveFit,
    CommEfficiency,
    GemmEfficiency,
    HostOverhead,
    MeasuredDevice,
    MemoryEfficiency,
    load_profile,
)
from planner.specs.hardware import AcceleratorSpec

FOREACH_ADAM_PASS_BYTES = ADAM_BYTES["foreach"] - CLIP_NORM_READ_BYTES
"""HBM bytes per parameter of the passes of PyTorch's foreach AdamW as the simulator counts
them (planner/costs/elementwise.py), without the gradient-norm read the suite does not run."""

PASS_BYTES = {"adamw": FOREACH_ADAM_PASS_BYTES / ADAMW_BYTES_PER_ELEMENT}
"""Simulator bytes over suite bytes per memory op, where they differ (1 elsewhere)."""

# Every file this fit reads (tests/calibration/test_fit_inputs.py): none. It fits the samples
# ``planner calibrate`` measured in this process (a SuiteResult in memory), nothing else.
READS: tuple[str, ...] = ()

CPU_COMM = {"base_latency_us": 0.0, "hierarchical_overlap": 0.5, "overlap_contention": 1.0}


def _shape(m: np.ndarray, n: np.ndarray, k: np.ndarray, half: float) -> np.ndarray:
    return (m / (m + half)) * (n / (n + half)) * (k / (k + half))


def measured_peaks(suite: SuiteResult) -> dict[str, float]:
    """Best measured GEMM throughput per dtype, TFLOP/s."""
    best: dict[str, float] = defaultdict(float)
    for g in suite.gemm:
        best[g.dtype] = max(best[g.dtype], 2.0 * g.m * g.n * g.k / g.seconds / 1e12)
    return dict(best)


def fit_gemm(
    suite: SuiteResult,
    peaks_tflops: dict[str, float],
    sm_count: int | None = None,
    eta_as_mamf: bool = False,
) -> tuple[GemmEfficiency, dict]:
    """(dim_half, fixed_us) and an eta per dtype, with the tile / wave quantization of each
    measured shape over ``sm_count`` SMs held fixed (planner/costs/waves.py; None: a CPU,
    none), by least squares on log time; returns the fit and its residuals.

    ``eta_as_mamf`` (a GPU relative to its datasheet): eta is the best measured throughput over
    the peak, the convention of the public tables (stas00/ml-engineering's MAMF, "maximum
    achievable matmul FLOPS") on which the shipped profiles and the global sustained fraction
    are built, and only the shape terms are fitted. Otherwise (a CPU relative to its own best
    throughput, no sustained fraction) eta is fitted with them."""
    dtypes = sorted({g.dtype for g in suite.gemm if g.dtype in peaks_tflops})
    rows = [g for g in suite.gemm if g.dtype in dtypes]
    m = np.array([g.m for g in rows], float)
    n = np.array([g.n for g in rows], float)
    k = np.array([g.k for g in rows], float)
    t = np.array([g.seconds for g in rows])
    peak = np.array([peaks_tflops[g.dtype] * 1e12 for g in rows])
    idx = np.array([dtypes.index(g.dtype) for g in rows])
    waves = np.array([wave_utilization(g.m, g.n, g.k, sm_count) for g in rows], float)
    flops = 2 * m * n * k
    efficiency = flops / t / peak
    mamf = np.array([efficiency[idx == i].max() for i in range(len(dtypes))])

    def model(x: np.ndarray) -> np.ndarray:
        half, fixed = x[0], x[1]
        etas = mamf if eta_as_mamf else x[2:]
        return flops / (peak * etas[idx] * _shape(m, n, k, half) * waves) + fixed * 1e-6

    x0, lo, hi = np.r_[32.0, 5.0], np.r_[1.0, 0.0], np.r_[4096.0, 1e5]
    if not eta_as_mamf:
        x0 = np.r_[x0, np.full(len(dtypes), 0.8)]
        lo = np.r_[lo, np.full(len(dtypes), 0.01)]
        hi = np.r_[hi, np.full(len(dtypes), 1.5)]
    res = least_squares(lambda x: np.log(model(x) / t), x0, bounds=(lo, hi))
    half, fixed = res.x[0], res.x[1]
    etas = mamf if eta_as_mamf else res.x[2:]
    rel = model(res.x) / t - 1.0
    eta = {d: float(min(e, 1.0)) for d, e in zip(dtypes, etas, strict=True)}
    if "bf16" not in eta:  # the profile schema keys the fallback on bf16
        eta["bf16"] = eta.get("fp16", eta.get("fp32", 0.5))
    fit = GemmEfficiency(
        eta_max={k_: round(v, 4) for k_, v in eta.items()},
        dim_half=round(float(half), 2),
        fixed_us=round(float(fixed), 3),
    )
    return fit, {
        "gemm_median_abs_rel_error": float(np.median(np.abs(rel))),
        "gemm_max_abs_rel_error": float(np.max(np.abs(rel))),
        "gemm_median_signed_rel_error": float(np.median(rel)),
        "gemm_eta": "mamf" if eta_as_mamf else "fitted",
    }


def _sat(s: np.ndarray, eta: float, half: float) -> np.ndarray:
    return eta * s / (s + half)


def fit_attention(
    samples: Sequence[AttentionSample], peak_flops: float
) -> tuple[AttentionEfficiency, dict]:
    """Saturating efficiency in sequence length for the forward and backward kernels of one
    SDPA backend's samples."""
    a = samples
    s = np.array([x.seq for x in a], float)
    fwd_flops = np.array(
        [4.0 * x.batch * x.heads * x.seq**2 * x.head_dim * (0.5 if x.causal else 1.0) for x in a]
    )
    ef = fwd_flops / np.array([x.fwd_seconds for x in a]) / peak_flops
    eb = 2.5 * fwd_flops / np.array([x.bwd_seconds for x in a]) / peak_flops
    # half >= 1 token: noisy timings (a loaded CPU) can flatten the curve to half = 0, which
    # no profile accepts (seq_half > 0)
    bounds = ([1e-4, 1.0], [2.0, 1e6])
    (f_eta, f_half), _ = curve_fit(_sat, s, ef, p0=(float(ef.max()), 100.0), bounds=bounds)
    (b_eta, b_half), _ = curve_fit(_sat, s, eb, p0=(float(eb.max()), 100.0), bounds=bounds)
    pred_f, pred_b = _sat(s, f_eta, f_half), _sat(s, b_eta, b_half)
    err = np.abs(np.r_[pred_f / ef, pred_b / eb] - 1.0)
    fit = AttentionEfficiency(
        eta_max_fwd=round(float(min(f_eta, 1.0)), 4),
        eta_max_bwd=round(float(min(b_eta, 1.0)), 4),
        seq_half=max(round(float((f_half + b_half) / 2), 1), 1.0),
    )
    return fit, {"attention_median_abs_rel_error": float(np.median(err))}


def fit_attention_backends(
    suite: SuiteResult, peak_flops: float, base: CalibrationProfile | None
) -> tuple[dict[str, AttentionEfficiency | None], dict]:
    """The profile's attention curves from the samples of each SDPA backend.

    "flash" (FlashAttention-2 kernels) fills ``attention_flash2`` and "cudnn"
    ``attention_cudnn``; "default" (SDPA's own choice: a CPU, or an older samples file) fills
    ``attention``. FlashAttention-3, the ``attention`` curve of a GPU, is not in torch: it stays
    the public-figure profile's (``base``) where there is one, else the better measured curve.
    A backend with no samples keeps ``base``'s curve (None without one)."""
    groups: dict[str, list[AttentionSample]] = defaultdict(list)
    for x in suite.attention:
        groups[x.backend].append(x)
    fits: dict[str, AttentionEfficiency] = {}
    errs: dict[str, float] = {}
    for backend, samples in sorted(groups.items()):
        fits[backend], err = fit_attention(samples, peak_flops)
        errs[backend] = err["attention_median_abs_rel_error"]
    measured = [fits[b] for b in ("cudnn", "flash") if b in fits]
    if "default" in fits:
        fused = fits["default"]
    elif base is not None:
        fused = base.attention
    else:
        fused = max(measured, key=lambda f: f.eta_max_fwd + f.eta_max_bwd)
    curves = {
        "attention": fused,
        "attention_flash2": fits.get("flash", base.attention_flash2 if base else None),
        "attention_cudnn": fits.get("cudnn", base.attention_cudnn if base else None),
    }
    report = {
        "attention_median_abs_rel_error": float(np.median(list(errs.values()))),
        "attention_backends_measured": sorted(fits),
    }
    return curves, report


def fit_memory(suite: SuiteResult, reference_bytes_per_s: float) -> tuple[MemoryEfficiency, dict]:
    """t = bytes / bandwidth_op + fixed: one bandwidth per op, one fixed cost (non-negative
    least squares on relative error); eta per op = bandwidth over the reference.

    The suite counts bytes by the STREAM convention (each byte the op must move, once), the
    simulator by the passes the kernel makes. Where they differ the effective bandwidth is put
    in the simulator's count: the suite's AdamW is PyTorch's foreach AdamW, which the simulator
    costs at :data:`FOREACH_ADAM_PASS_BYTES` per parameter against the suite's 28, so its eta
    is the bandwidth of those passes (counted once, a measured foreach step is costed at its
    measured time instead of three times it)."""
    ops = sorted({x.op for x in suite.memory})
    b = np.array([x.bytes_moved for x in suite.memory])
    t = np.array([x.seconds for x in suite.memory])
    cols = [np.where([x.op == op for x in suite.memory], b, 0.0) for op in ops]
    design = np.c_[np.array(cols).T, np.ones_like(b)] / t[:, None]
    coef, _ = nnls(design, np.ones_like(t))
    inv_bw, fixed = np.maximum(coef[:-1], 1e-30), coef[-1]
    rel = design @ np.r_[inv_bw, fixed] - 1.0
    bws = {op: 1.0 / ib for op, ib in zip(ops, inv_bw, strict=True)}
    op_eta = {
        op: max(
            round(float(min(bw * PASS_BYTES.get(op, 1.0) / reference_bytes_per_s, 1.0)), 4), 1e-4
        )
        for op, bw in bws.items()
    }
    fit = MemoryEfficiency(
        eta_hbm=op_eta.get("copy", float(np.median(list(op_eta.values())))),
        op_eta=op_eta,
        fixed_us=round(float(fixed * 1e6), 3),
    )
    return fit, {
        "memory_bandwidth_gb_per_s": {op: bw / 1e9 for op, bw in bws.items()},
        "memory_median_abs_rel_error": float(np.median(np.abs(rel))),
    }


def fit_collectives(suite: SuiteResult) -> tuple[list[CollectiveFit], dict]:
    """Alpha-beta per (op, ranks), relative least squares with non-negative terms."""
    groups: dict[tuple[str, int, str], list] = defaultdict(list)
    for c in suite.collectives:
        groups[(c.op, c.ranks, c.backend)].append(c)
    fits, errs = [], []
    for (op, ranks, backend), cs in sorted(groups.items()):
        x = np.array([_factor(op, ranks) * c.bytes for c in cs], float)  # type: ignore[arg-type]
        t = np.array([c.seconds for c in cs])
        (lat, inv_bw), _ = nnls(np.c_[np.ones_like(x), x] / t[:, None], np.ones_like(t))
        inv_bw = max(inv_bw, 1e-15)
        errs.extend(np.abs((lat + inv_bw * x) / t - 1.0))
        fits.append(
            CollectiveFit(
                op=op,
                ranks=ranks,
                latency_us=round(float(lat * 1e6), 3),
                bus_bandwidth_gb_per_s=round(float(1.0 / inv_bw / 1e9), 4),
                backend=backend,
            )
        )
    return fits, {"collective_median_abs_rel_error": float(np.median(errs)) if errs else None}


def fit_profile(
    suite: SuiteResult,
    profile_id: str,
    accelerator: AcceleratorSpec | None = None,
    accelerator_id: str | None = None,
) -> CalibrationProfile:
    """A full profile from one suite run. GPUs: relative to ``accelerator``'s datasheet, other
    fields from its public-figure profile; CPUs: relative to the measured peaks."""
    meta = suite.metadata
    peaks = measured_peaks(suite)
    copies = [x for x in suite.memory if x.op == "copy"]
    copy_bw = max(x.bytes_moved / x.seconds for x in copies) if copies else 1e10
    device = MeasuredDevice(
        name=meta.device_name,
        kind=meta.device,
        peak_tflops={k: round(v, 4) for k, v in peaks.items()},
        memory_bandwidth_gb_per_s=round(copy_bw / 1e9, 3),
        memory_gib=meta.memory_gib,
        threads=meta.cpu_threads,
    )
    if accelerator is not None:
        ref_peaks = {
            d: accelerator.peak_flops_per_s(d) / 1e12
            for d in peaks
            if getattr(accelerator.peak_tflops, d, None)
        }
        ref_bw = accelerator.hbm_bandwidth_tb_per_s * 1e12
        attn_peak = accelerator.peak_flops_per_s("bf16")
        base: CalibrationProfile | None = load_profile(accelerator.profile)
        comm = base.comm
        sustained = base.gemm.sustained_fraction
        host = base.host  # a global fit (calibration/fit_global.py), not measured here
    else:
        base = None
        host = HostOverhead()
        ref_peaks, ref_bw = peaks, copy_bw
        attn_dtype = "bf16" if meta.device == "cuda" and "bf16" in peaks else "fp32"
        attn_peak = peaks.get(attn_dtype, max(peaks.values())) * 1e12
        comm = CommEfficiency(scale_up_eta=1.0, scale_out_eta=1.0, **CPU_COMM)
        sustained = 1.0
    gemm, g_err = fit_gemm(
        suite,
        ref_peaks,
        accelerator.sm_count if accelerator else None,
        eta_as_mamf=accelerator is not None,
    )
    gemm = gemm.model_copy(update={"sustained_fraction": sustained})
    attn, a_err = fit_attention_backends(suite, attn_peak, base)
    mem, m_err = fit_memory(suite, ref_bw)
    colls, c_err = fit_collectives(suite)
    profile = CalibrationProfile(
        id=profile_id,
        accelerator=accelerator_id or meta.device_name,
        method=f"measured by planner calibrate ({'quick' if meta.quick else 'full'} suite) on "
        f"{meta.device_name}, fitted by calibration/fit_measured.py",
        gemm=gemm,
        **attn,
        memory=mem,
        comm=comm,
        host=host,
        collectives=colls,
        device=device,
        metadata=meta.model_dump() | {"fit": g_err | a_err | m_err | c_err},
        sources=[f"measured: {meta.command} on {meta.hostname}, {meta.date}"],
        raw=suite.model_dump(exclude={"metadata"}),
    )
    if base is not None and base.attention_flash_triton is not None:
        # the Triton FlashAttention is not measured: the shipped profile's fitted slowdown
        # over its FlashAttention-2 curve, applied to the measured one
        ref = base.attention_flash2 or base.attention
        profile = profile.with_triton_attention_slowdown(
            ref.eta_max_fwd / base.attention_flash_triton.eta_max_fwd
        )
    return profile
