"""Number formatting of the web app: SI prefixes, durations, percentages, money, energy."""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.specs.layout import Layout, Training


def _si(value: float, units: Sequence[tuple[float, str]], digits: int = 3) -> str:
    """``value`` scaled by the first (scale, suffix) it reaches."""
    for scale, suffix in units:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {suffix}".rstrip()
    scale, suffix = units[-1]
    return f"{_sig(value / scale, digits)} {suffix}".rstrip()


def _sig(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures, thousands separated, no exponent."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{decimals}f}"


def fmt_tokens_per_s(value: float) -> str:
    """Tokens per second with an SI prefix: '166 k tokens/s', '1.45 M tokens/s'."""
    return _si(
        value, ((1e9, "G tokens/s"), (1e6, "M tokens/s"), (1e3, "k tokens/s"), (1, "tokens/s"))
    )


def fmt_count(value: float, unit: str = "") -> str:
    """A count with an SI prefix: '15 T tokens', '1.2 M'."""
    units = ((1e12, f"T {unit}"), (1e9, f"G {unit}"), (1e6, f"M {unit}"), (1e3, f"k {unit}"))
    return _si(value, (*units, (1, unit)))


def fmt_seconds(seconds: float) -> str:
    """A duration in the unit that reads best: ms, s, min, h or days."""
    if seconds < 1:
        return f"{_sig(seconds * 1e3)} ms"
    if seconds < 120:
        return f"{_sig(seconds)} s"
    if seconds < 7200:
        return f"{_sig(seconds / 60)} min"
    if seconds < 3 * 86400:
        return f"{_sig(seconds / 3600)} h"
    return f"{_sig(seconds / 86400)} days"


def fmt_pct(value: float, digits: int = 1) -> str:
    """A percentage: '54.3 %'."""
    return f"{value:.{digits}f} %"


def fmt_gib(value: float) -> str:
    """Memory in GiB: '45.5 GiB'."""
    return f"{value:,.1f} GiB"


def fmt_usd(value: float) -> str:
    """Dollars with an SI prefix: '$12.3 M', '$950'."""
    if abs(value) >= 1e9:
        return f"${_sig(value / 1e9)} B"
    if abs(value) >= 1e6:
        return f"${_sig(value / 1e6)} M"
    if abs(value) >= 1e3:
        return f"${_sig(value / 1e3)} k"
    return f"${value:,.2f}"


def fmt_energy_kwh(kwh: float) -> str:
    """Energy: kWh, MWh or GWh."""
    if kwh >= 1e6:
        return f"{_sig(kwh / 1e6)} GWh"
    if kwh >= 1e3:
        return f"{_sig(kwh / 1e3)} MWh"
    return f"{_sig(kwh)} kWh"


def layout_text(layout: Layout, training: Training) -> str:
    """A compact layout: 'TP2 PP1 DP4 CP1 EP1 VPP1 mb1 rc:none Z1 SP+ ov:dp+tp'."""
    from planner.render import compact_layout

    return compact_layout(layout, training)


# the characters that turn plain text into emphasis, code, strike-through or LaTeX in
# Streamlit's Markdown (an underscore inside a word, as in field names, stays literal)
MARKDOWN_SPECIALS = "\\`*~$"


def md_escape(text: str) -> str:
    """``text`` with Markdown's special characters backslash-escaped, so that Streamlit shows
    it as written (a rule such as ``pp*vpp <= 34`` is not turned into italics)."""
    return "".join("\\" + ch if ch in MARKDOWN_SPECIALS else ch for ch in text)
