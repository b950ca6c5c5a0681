"""`harness sweep` and `harness capacity`: a config run at several loads, as a folder of runs
(harness.run.sweep, harness.run.capacity), rendered by harness.report.sweep_view."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from harness.cli._common import build_run_config, config_options, console, err_console, handle_errors
from harness.errors import EXIT_INCOMPLETE, EXIT_NEGATIVE, ConfigError


def _progress(p: Any) -> None:
    shown = " ".join(f"{k}={v}" for k, v in p.values.items())
    of = f"/{p.planned}" if p.planned else ""
    eta = f" · about {_duration(p.eta_s)} left" if p.eta_s is not None else ""
    what = {"pilot": "pilot (Offline throughput)", "try": "try"}.get(p.role, "point")
    err_console.print(f"[bold]{what} {p.position}{of}[/] {shown}{eta}", highlight=False)


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def _pricer(cost_file: Path | None, base: Any) -> Any:
    from harness.analysis.cost import cost_for_run, load_sheet, parse_sheet, write_cost

    sheet = load_sheet(cost_file) if cost_file else (parse_sheet(base.cost, "cost section of the config") if base.cost else None)
    if sheet is None:
        return None
    return lambda outcome: write_cost(outcome.run_dir, cost_for_run(outcome.run_dir, outcome.summary, sheet))


def _base(config: Any, what: str) -> Any:
    if config is None:
        raise ConfigError(f"{what} needs a config: give -c FILE and/or --backend/--set (the demo is for `harness run`)")
    from harness.run.runner import resolve

    return resolve(config)


def _finish(data: dict[str, Any], sweep_dir: Path, as_json: bool) -> int:
    from harness.report.sweep_view import render_sweep

    if as_json:
        import json

        console.print_json(json.dumps(data))
    else:
        render_sweep(data, console, sweep_dir)
    if data["state"].startswith("stopped") or any(p.get("status") != "complete" for p in data["points"]):
        return EXIT_INCOMPLETE
    capacity = data.get("capacity")
    if capacity is not None:
        if capacity.get("capacity_qps") is None and capacity.get("stop_reason", "").startswith("no rate passed"):
            return EXIT_NEGATIVE  # an answer, and it is "no"
        if not capacity.get("converged"):
            return EXIT_INCOMPLETE
    return 0


def _resume_only(resume: Path | None, given: dict[str, Any]) -> None:
    extra = [k for k, v in given.items() if v not in (None, (), False)]
    if resume is not None and extra:
        raise ConfigError(f"--resume runs the sweep as its sweep.yaml says; drop {', '.join('--' + k for k in extra)}")


@click.command(short_help="One config at several loads or lengths: a folder of runs and their curves.")
@config_options
@click.option("--vary", "vary", multiple=True, metavar="KEY=V1,V2,...",
              help="an axis: any run or backend setting (as --set), or isl/osl/prefix_len/prefix_groups/n of a "
              "synthetic prompt set; several make a grid; target_qps=auto walks up from an Offline pilot")
@click.option("--zip", "zipped", is_flag=True, help="pair the axes value by value instead of a grid")
@click.option("--accuracy", "accuracy", is_flag=True, help="score the answers given at each point against the "
              "dataset's references (refused before any run when it has none) and show the score per point")
@click.option("--resume", type=click.Path(path_type=Path), help="a sweep folder: run only its missing points")
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--cost", "cost_file", type=click.Path(path_type=Path), help="price sheet YAML; writes each point's cost.json")
@click.option("--json", "as_json", is_flag=True, help="print sweep.json instead of the table")
@handle_errors
def sweep(vary: tuple[str, ...], zipped: bool, accuracy: bool, resume: Path | None, output_dir: Path,
          cost_file: Path | None, as_json: bool, config_file: Path | None, overrides: tuple[str, ...], weights: Path | None,
          mlperf_conf: Path | None, user_conf: Path | None, **cli_values: Any) -> None:
    """Run one config at each point of the --vary axes (docs/sweeps.md)."""
    from harness.run.sweep import SweepSpec, new_sweep, parse_vary, run_sweep

    _resume_only(resume, {"vary": vary, "zip": zipped, "accuracy": accuracy, "config": config_file, "set": overrides,
                          "weights": weights, "mlperf-conf": mlperf_conf, "user-conf": user_conf, **cli_values})
    if resume is not None:
        spec = SweepSpec.load(resume)
        sweep_dir = resume
    else:
        if not vary:
            raise ConfigError("give at least one axis, e.g. --vary target_qps=100,200,400 (or target_qps=auto)")
        base = _base(build_run_config(config_file, overrides, weights, mlperf_conf, user_conf, **cli_values), "sweep")
        spec = SweepSpec("sweep", base, [parse_vary(v) for v in vary], zipped, accuracy=accuracy)
        sweep_dir = new_sweep(spec, output_dir)
    err_console.print(f"sweep folder: {sweep_dir}", highlight=False)
    data = run_sweep(spec, sweep_dir, _progress, _pricer(cost_file, spec.base))
    sys.exit(_finish(data, sweep_dir, as_json))


@click.command(short_help="The highest Server rate that meets the targets, by bracketing and bisection.")
@config_options
@click.option("--slo", "slo", multiple=True, metavar="KEY=MS", help="per-request target (ttft_ms, tpot_ms, e2e_ms); "
              "with --attainment the search judges by these instead of LoadGen's VALID")
@click.option("--attainment", type=float, help="share of requests that must meet every --slo target, e.g. 0.99")
@click.option("--precision", type=float, default=0.02, show_default=True, help="stop when the bracket is this narrow, "
              "as a fraction of the rate")
@click.option("--need", type=click.IntRange(min=1), default=2, show_default=True, help="a rate passes when NEED of OF tries pass")
@click.option("--of", "of", type=click.IntRange(min=1), default=3, show_default=True, help="tries at most per rate")
@click.option("--start-qps", type=float, help="where to start [default: the throughput of an Offline pilot]")
@click.option("--budget-s", type=float, default=3600.0, show_default=True, help="stop after this much run time")
@click.option("--resume", type=click.Path(path_type=Path), help="a capacity folder: go on from its tries")
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--cost", "cost_file", type=click.Path(path_type=Path), help="price sheet YAML; writes each try's cost.json")
@click.option("--json", "as_json", is_flag=True, help="print sweep.json instead of the table")
@handle_errors
def capacity(slo: tuple[str, ...], attainment: float | None, precision: float, need: int, of: int,
             start_qps: float | None, budget_s: float, resume: Path | None, output_dir: Path, cost_file: Path | None,
             as_json: bool, config_file: Path | None, overrides: tuple[str, ...], weights: Path | None,
             mlperf_conf: Path | None, user_conf: Path | None, **cli_values: Any) -> None:
    """Search the highest target_qps at which the Server run meets its targets (docs/sweeps.md)."""
    from harness.run.capacity import Search
    from harness.run.sweep import SweepSpec, new_sweep, run_sweep

    _resume_only(resume, {"slo": slo, "attainment": attainment, "start-qps": start_qps, "config": config_file,
                          "set": overrides, "weights": weights, "mlperf-conf": mlperf_conf, "user-conf": user_conf,
                          **cli_values})
    if resume is not None:
        spec = SweepSpec.load(resume)
        if spec.kind != "capacity":
            raise ConfigError(f"{resume} is a {spec.kind} folder; resume it with `harness {spec.kind} --resume`")
        sweep_dir = resume
    else:
        overrides = (*overrides, *(f"slo.{item}" for item in slo))
        if cli_values.get("scenario") is None and config_file is None:
            cli_values["scenario"] = "Server"
        base = _base(build_run_config(config_file, overrides, weights, mlperf_conf, user_conf, **cli_values), "capacity")
        search = Search(base, precision, need, of, start_qps, attainment, budget_s)  # checks its settings
        spec = SweepSpec("capacity", base, search=search.settings())
        sweep_dir = new_sweep(spec, output_dir)
    err_console.print(f"capacity folder: {sweep_dir}", highlight=False)
    data = run_sweep(spec, sweep_dir, _progress, _pricer(cost_file, spec.base))
    sys.exit(_finish(data, sweep_dir, as_json))
