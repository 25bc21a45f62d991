"""Planner messages shown through Streamlit's Markdown keep their characters (issue 15 item 6)."""

from __future__ import annotations

from app_pages.common import one_line
from app_pages.fmt import md_escape
from planner.errors import PlannerError


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out)


def test_a_rule_with_stars_is_not_italics():
    text = "pp*vpp = 40 exceeds layers + 2 = 34 (pp*vpp <= 34)"
    escaped = md_escape(text)
    assert "*" not in escaped.replace("\\*", "")
    assert _unescape(escaped) == text


def test_one_line_escapes_for_markdown_and_not_for_tables():
    exc = PlannerError("layout.vpp", "pp*vpp = 40 exceeds 34", "pp*vpp <= 34")
    assert "\\*" in one_line(exc)
    assert "\\" not in one_line(exc, markdown=False)
    assert _unescape(one_line(exc)) == one_line(exc, markdown=False)
