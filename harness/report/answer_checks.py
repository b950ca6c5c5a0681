"""The answers' checks in the report: how many answers the dataset's validators and JSON
Schemas (structured outputs) accepted, the rejected ones by reason, and an example of each.

summary.json `tokens.validation` holds the figures (harness.results.token_metrics); its
rate stands in the headline beside latency, as the answers' accuracy does, because a
faster server whose answers break their schema is not the better one.
"""

from __future__ import annotations

from typing import Any

# the headline's line (`checks_line`) lives in figures.py beside the answers' accuracy line,
# which the headline is built from; this module adds the section's table and examples
from harness.report.figures import Table, checks_line, pct, validation, what_was_checked


def checks_table(summary: dict[str, Any]) -> Table:
    v = validation(summary) or {}
    n = v.get("checked") or 0
    rows = [["answers checked", f"{n:,}", ""], [f"{what_was_checked(summary)}", f"{v.get('valid', 0):,}", pct(v.get("rate"))]]
    rows += [[f"invalid: {reason}", f"{count:,}", pct(count / n if n else None)]
             for reason, count in (v.get("invalid_by_reason") or {}).items()]
    return ["answers", "n", "share"], rows


def example_lines(summary: dict[str, Any]) -> list[str]:
    """Each reason's first rejected answer, what was wrong with it."""
    v = validation(summary) or {}
    return [f"first {reason}: {detail}" for reason, detail in (v.get("invalid_example") or {}).items() if detail]
