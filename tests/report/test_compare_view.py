"""The compare view: the gate's outcome is the first line, and values with brackets (a
list in a setting) are shown as text, not eaten as Rich markup; 80 columns."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from harness.analysis.compare import compare, markdown
from harness.config.run_config import RunConfig
from harness.report.compare_view import render_comparison
from harness.run import runner

FAST = dict(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.2, offline_expected_qps=4000)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare-view")
    a = runner.run(RunConfig(**FAST, backend_options={"per_sample_ms": 0.2}), root).run_dir
    b = runner.run(RunConfig(**FAST, backend_options={"per_sample_ms": 0.6}), root).run_dir
    return a, b


def render(comparison, width: int = 80) -> list[str]:
    out = io.StringIO()
    render_comparison(comparison, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def test_the_outcome_comes_first(pair):
    a, b = pair
    fired = render(compare([a, b], ["throughput < -10%"]))
    assert fired[0].startswith("FAIL: 1 of 1 rules fired (throughput < -10%)")
    quiet = render(compare([a, a], ["throughput < -10%"]))
    assert quiet[0] == "PASS: none of 1 rules fired"
    assert render(compare([a, b]))[0].startswith("no --fail-if rule given")
    assert markdown(compare([a, b], ["throughput < -10%"])).splitlines()[0] == (
        "**harness compare: FAIL: 1 of 1 rules fired (throughput < -10%)**"
    )


@pytest.mark.parallel
def test_bracketed_values_survive_and_lines_fit(pair, embedded_model, tmp_path):
    """ONNX Runtime beside synthetic: its output shape `[null, 10]` reads to Rich as a
    [tag]; it was printed as nothing."""
    ort = runner.run(RunConfig(backend="onnxruntime", model=str(embedded_model), dataset="digits", scenario="Offline",
                               max_batch=16, min_duration_s=0.2, offline_expected_qps=4000), tmp_path).run_dir
    comparison = compare([ort, pair[0]])
    assert "[null, 10]" in "\n".join(render(comparison, width=250))
    assert all(len(line) <= 80 for line in render(comparison))
    # #16 item 9: settings only one side has are one wrapped line per category, not a
    # `null vs value` table row each (there were ~30)
    text = render(comparison)
    one_sided = [line for line in text if line.startswith("  backend: only ")]
    assert len(one_sided) == 2, text
    assert not any(" null " in line or line.rstrip().endswith(" null") for line in text), text


@pytest.mark.parallel
def test_sides_are_lettered_and_named_in_full(pair):
    """Run folder names share their date prefix: cut to a column they were cut exactly where
    they differ. Columns are A, B (B/A), and the first lines say which folder is which."""
    a, b = pair
    wide = render(compare([a, b], ["throughput < -10%"]), width=250)
    assert wide[1:3] == [f"A = {a}", f"B = {b}"]
    narrow = render(compare([a, b], ["throughput < -10%"]))
    assert all(len(line) <= 80 for line in narrow)
    header = next(line for line in narrow if line.lstrip().startswith("figure"))
    assert header.split() == ["figure", "A", "B", "B/A"]
    rule = next(line for line in narrow if line.lstrip().startswith(("FAIL throughput", "ok throughput")))
    assert rule.lstrip().split(" · ")[1].startswith("B: ")
    md = markdown(compare([a, b])).splitlines()
    assert f"- A = {a}" in md and f"- B = {b}" in md and "| figure | A | B | B/A |" in md


@pytest.mark.parallel
def test_a_rows_figures_share_their_decimals():
    from harness.analysis.compare import row_format

    fmt = row_format([1295.3, 791.8])
    assert (fmt(1295.3), fmt(791.8)) == ("1,295", "792")
    fmt = row_format([0.611, 0.7])
    assert (fmt(0.611), fmt(0.7)) == ("0.6110", "0.7000")
    fmt = row_format([99.87, 101.2])
    assert (fmt(99.87), fmt(101.2)) == ("99.9", "101.2")
