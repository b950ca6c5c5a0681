"""Readability of the views (#16): figures shown in units and ranges that make sense."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from harness.report.compare_view import render_aggregate
from harness.results.stats import over_runs


def test_interval_of_a_positive_figure_never_goes_below_zero():
    s = over_runs([0.1, 0.1, 9.0])
    assert s["ci95"] is None or s["ci95"][0] >= 0
    assert s["ci95_note"] and "too few runs" in s["ci95_note"]
    # A tight sample keeps its t interval of the mean.
    tight = over_runs([10.0, 10.5, 11.0])
    assert tight["ci95"] is not None and 0 <= tight["ci95"][0] <= tight["mean"] <= tight["ci95"][1]
    # A figure that can be negative (a difference) keeps its interval across zero.
    assert over_runs([-1.0, 0.5, 2.0])["ci95"][0] < 0


def test_aggregate_view_says_too_few_runs_instead_of_a_negative_bound(tmp_path: Path):
    data = {"n": 3, "metrics": {"latency_p50": over_runs([0.1, 0.1, 9.0])}, "warnings": []}
    console = Console(width=100, record=True, color_system=None)
    render_aggregate(data, console, tmp_path)
    text = console.export_text()
    assert "too few runs" in text and "-0." not in text and "−" not in text
