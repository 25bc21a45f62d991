"""Shared fixtures: shipped clusters and a builder for small, hand-checkable model specs."""

from __future__ import annotations

import pytest

import planner
from planner.specs.model import ModelSpec

# Flags of one Llama-3.1-70B layout on 64 H100s shared by the advise and goodput CLI tests
LLAMA70B_H100_64 = [
    "--model",
    "llama3.1-70b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--pp",
    "4",
    "--global-batch",
    "64",
    "--seq-len",
    "8192",
    "--recompute",
    "full",
]


def _make_gpt(
    layers: int = 4,
    hidden: int = 1024,
    heads: int = 16,
    vocab: int = 32000,
    ffn_mult: int = 4,
    **overrides,
) -> ModelSpec:
    """A GPT-2/3-style model: MHA, GeLU MLP of width ffn_mult * hidden, untied, no position table."""
    fields = dict(
        name="test-gpt",
        layers=layers,
        hidden=hidden,
        ffn_hidden=ffn_mult * hidden,
        activation="gelu",
        heads=heads,
        vocab=vocab,
    )
    fields.update(overrides)
    return ModelSpec(**fields)


@pytest.fixture(scope="session")
def make_gpt():
    """Factory for GPT-style test models (see ``_make_gpt``)."""
    return _make_gpt


@pytest.fixture(scope="session")
def h100():
    return planner.load_cluster("dgx-h100")


@pytest.fixture(scope="session")
def a100():
    return planner.load_cluster("dgx-a100-80gb")


@pytest.fixture(scope="session")
def llama8b():
    return planner.load_model("llama3.1-8b")


@pytest.fixture(scope="session")
def llama70b():
    return planner.load_model("llama3.1-70b")


def synthetic_attention(
    seqs: tuple[int, ...],
    peak_flops: float,
    eta_max: float,
    seq_half: float,
    bwd_ratio: float,
    shape: tuple[int, int, int] = (2, 4, 64),
    dtype: str = "fp32",
    backend: str = "default",
    tokens: int | None = None,
) -> list:
    """Noise-free causal SDPA samples on eta(S) = eta_max S / (S + seq_half), the backward at
    ``bwd_ratio`` of the forward's efficiency; ``shape`` is (batch, heads, head_dim), the batch
    ``tokens // S`` instead where ``tokens`` is given (calibration tests' synthetic suites)."""
    from calibration.samples import AttentionSample

    out = []
    batch, heads, head_dim = shape
    for s in seqs:
        b = tokens // s if tokens else batch
        flops = 4 * b * heads * s * s * head_dim * 0.5
        eta = eta_max * s / (s + seq_half)
        out.append(
            AttentionSample(
                batch=b,
                heads=heads,
                seq=s,
                head_dim=head_dim,
                dtype=dtype,
                fwd_seconds=flops / (eta * peak_flops),
                bwd_seconds=2.5 * flops / (bwd_ratio * eta * peak_flops),
                backend=backend,
            )
        )
    return out
