"""Every plot of a run's and a sweep's HTML report, read off the matplotlib axes it was drawn on.

Real folders: a 2-point concurrency sweep and a 2-point target-rate sweep, a Server run
against the injected-delay OpenAI server, an Offline concurrency point, and token runs
whose lengths sit far from zero (96-128 tokens out, 480-512 in) — where 5 % margins taken
from the data's own range shrink to nothing once the axis starts at zero. The two rules
(tests/support/plot_frames.py): nothing drawn on the top or right frame, and a rate or a
share from zero unless the plot says from where.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes

from harness.analysis.points import load_sweep
from harness.analysis.run_data import load_run
from harness.config.run_config import RunConfig
from harness.report.plots import all_plots
from harness.report.sections import itl
from harness.report.sweep_plots import sweep_plots
from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep
from tests.support.http_servers import ServerThread, Timing, openai_app
from tests.support.plot_frames import check_frames, check_zero
from tests.support.report_runs import http_token_run, server_run_with_failures, token_run

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

def _sweep(spec: SweepSpec, root: Path) -> Path:
    d = new_sweep(spec, root)
    run_sweep(spec, d)
    return d


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("frames")
    out: dict[str, Path] = {}
    # decode slows with the requests in flight (TPOT = 3 + 1 ms x N): two close points
    with ServerThread(openai_app(Timing(ttft_ms=10, tpot_ms=3, tokens=16, tpot_ms_per_in_flight=1.0))) as srv:
        cfg = RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=32,osl=16,n=16",
                        backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                        min_duration_s=0, min_query_count=16, concurrency=1,
                        use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000)
        out["concurrency"] = _sweep(SweepSpec("sweep", cfg, [Axis("concurrency", ("1", "2"))]), root / "c")
    server = RunConfig(backend="synthetic", scenario="Server", backend_options={"service_time_ms": 2.0}, max_batch=1,
                       target_latency_ms=20, min_duration_s=0.5, min_query_count=50)
    out["rates"] = _sweep(SweepSpec("sweep", server, [Axis("target_qps", ("100", "200"))]), root / "r")
    out["point"] = sorted(p for p in out["concurrency"].iterdir() if p.is_dir())[-1]
    out["http"] = http_token_run(root / "http")
    failures = server_run_with_failures(root / "f")
    out["tokens"] = token_run(failures, root / "tokens")
    out["long"] = token_run(failures, root / "long", input_range=(480, 513), output_range=(96, 129))
    return out


def _run_axes(run: Path) -> list[tuple[str, Axes]]:
    d = load_run(run)
    plots = all_plots(d.columns, d.breakdown, d.rates["target_per_s"], itl(d))
    return [(cap, ax) for cap, uri in plots.figures for ax in uri.figure.axes]


def _sweep_axes(sweep: Path) -> list[tuple[str, Axes]]:
    return [(cap, ax) for cap, uri in sweep_plots(load_sweep(sweep)) for ax in uri.figure.axes]


@pytest.mark.parametrize("kind", ["concurrency", "rates"])
def test_sweep_plots_keep_their_data_off_the_frame(folders, kind):
    axes = _sweep_axes(folders[kind])
    assert len(axes) >= 4, [c for c, _ in axes]
    assert check_frames(axes) == []


@pytest.mark.parametrize("kind", ["concurrency", "rates"])
def test_sweep_plots_start_rates_and_shares_at_zero(folders, kind):
    axes = _sweep_axes(folders[kind])
    captions = {c for c, _ in axes}
    if kind == "concurrency":  # the plots of the reported defects are there to be checked
        assert {"per-user vs total output tokens/s (labels: point index)", "TPOT and E2E vs concurrency",
                "throughput vs latency (p50, p99)", "backlog share of latency vs load"} <= captions
    assert check_zero(axes) == []


@pytest.mark.parametrize("kind", ["http", "point", "tokens", "long"])
def test_run_plots_keep_their_data_off_the_frame(folders, kind):
    axes = _run_axes(folders[kind])
    captions = {c for c, _ in axes}
    # an Offline concurrency point holds its own backlog: the harness names that stage so
    stage = "backlog" if kind == "point" else "queue"
    assert f"{stage} vs service breakdown" in captions
    if kind == "long":
        assert {"TPOT vs output length", "TTFT vs input length"} <= captions
    assert check_frames(axes) == []


@pytest.mark.parametrize("kind", ["http", "point", "tokens", "long"])
def test_run_plots_start_rates_and_shares_at_zero(folders, kind):
    assert check_zero(_run_axes(folders[kind])) == []


def test_stages_over_time_stack_stays_inside_the_frame(folders):
    """The stacked means reach exactly the sum of the bins' stage means, which the run's
    own time series gives: the frame's top is above it by the headroom."""
    for kind in ("http", "point", "long"):
        ax = next(ax for cap, ax in _run_axes(folders[kind]) if ax.get_title() == "stages over time")
        tops = [np.max(p.vertices[:, 1]) for c in ax.collections for p in c.get_paths()]
        assert max(tops) == pytest.approx(ax.dataLim.y1)
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > max(tops)
        assert check_frames([("breakdown", ax)]) == []
