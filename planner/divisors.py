"""Divisors of a positive integer in O(sqrt n) steps: no input can make legality checks or
suggestions loop for as long as a number is large (``heads: 1e12`` answers at once)."""

from __future__ import annotations

from math import isqrt

# Largest n whose divisors are listed; beyond it (far above any spec's cap) isqrt(n) steps
# would be slow, so callers get an empty list and say "a divisor of n" instead.
MAX_DIVISOR_INPUT = 10**12


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order; ``[]`` for n < 1 or n above
    MAX_DIVISOR_INPUT (about 1e6 steps at most)."""
    if n < 1 or n > MAX_DIVISOR_INPUT:
        return []
    small: list[int] = []
    large: list[int] = []
    for d in range(1, isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def divisors_text(n: int, limit: int = 24) -> str:
    """Divisors of ``n`` as a comma-separated list for an error message, shortened to
    ``limit`` entries with an ellipsis; "a divisor of n" where they are not listed."""
    ds = divisors(n)
    if not ds:
        return f"a divisor of {n}"
    if len(ds) > limit:
        head = ", ".join(str(d) for d in ds[: limit - 2])
        return f"{head}, ..., {ds[-1]} ({len(ds)} divisors)"
    return ", ".join(str(d) for d in ds)
