"""The answers' checks in the report: how many answers the dataset's validators and JSON
Schemas (structured outputs) accepted, the rejected ones by reason, and an example of each.

summary.json `tokens.validation` holds the figures (harness.results.token_metrics); its
rate stands in the headline beside latency, as the answers' accuracy does, because a
faster server whose answers break their schema is not the better one.
"""

from __future__ import annotations

from typing import Any

from harness.report.figures import HEADLINE_WIDTH, Table, cut_middle, pct


def validation(summary: dict[str, Any]) -> dict[str, Any] | None:
    v = (summary.get("tokens") or {}).get("validation")
    return v if isinstance(v, dict) and v.get("checked") else None


def _what(summary: dict[str, Any]) -> str:
    """"schema-valid" when every check was a schema's, else "valid"."""
    ds = summary.get("dataset") or {}
    return "schema-valid" if ds.get("with_schema") and not ds.get("validators") else "valid"


def checks_line(summary: dict[str, Any]) -> str | None:
    """The headline's line: the valid rate, of how many, and the rejected ones by reason."""
    v = validation(summary)
    if v is None:
        return None
    line = f"answers {_what(summary)} {pct(v['rate'])} ({v['valid']:,} of {v['checked']:,} checked)"
    reasons = v.get("invalid_by_reason") or {}
    if reasons:
        line += " · invalid: " + ", ".join(f"{k} {n:,}" for k, n in reasons.items())
    return cut_middle(line, HEADLINE_WIDTH)


def checks_table(summary: dict[str, Any]) -> Table:
    v = validation(summary) or {}
    n = v.get("checked") or 0
    rows = [["answers checked", f"{n:,}", ""], [f"{_what(summary)}", f"{v.get('valid', 0):,}", pct(v.get("rate"))]]
    rows += [[f"invalid: {reason}", f"{count:,}", pct(count / n if n else None)]
             for reason, count in (v.get("invalid_by_reason") or {}).items()]
    return ["answers", "n", "share"], rows


def example_lines(summary: dict[str, Any]) -> list[str]:
    """Each reason's first rejected answer, what was wrong with it."""
    v = validation(summary) or {}
    return [f"first {reason}: {detail}" for reason, detail in (v.get("invalid_example") or {}).items() if detail]
