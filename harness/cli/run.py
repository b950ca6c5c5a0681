"""`harness run`, `report`, `cost` and `backends`: parse, build the config, call one library
function, print. Errors become one line and an exit code in harness.cli._common."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from harness.cli._common import build_run_config, config_options, console, err_console, handle_errors
from harness.errors import EXIT_INCOMPLETE, EXIT_NEGATIVE, ConfigError
from harness.results.folder import REPORT_HTML


@contextmanager
def _stop_signals_noted() -> Iterator[list[str]]:
    """While the command runs, a stop signal (SIGINT, SIGTERM, SIGHUP) that lands between or
    after runs (the third Ctrl-C of an impatient user) is noted instead of aborting the
    summary's rendering with click's exit 1: the command then ends, as stopped (exit 3).
    During a run, harness.run.runner's own handlers take over and give these back."""
    noted: list[str] = []
    sigs = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, lambda signum, frame: noted.append(signal.Signals(signum).name))
    try:
        yield noted
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@click.command(short_help="Run one LoadGen test (no arguments: the embedded demo).")
@config_options
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print summary.json instead of the table")
@click.option("--cost", "cost_file", type=click.Path(path_type=Path), help="price sheet YAML (docs/cost.md); writes cost.json")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="N runs, each in its own process, plus their aggregate (docs/reproducibility.md)")
@handle_errors
def run(
    config_file: Path | None,
    scenario: str | None,
    mode: str | None,
    backend: str | None,
    model: str | None,
    weights: Path | None,
    dataset: str | None,
    name: str | None,
    mlperf_conf: Path | None,
    user_conf: Path | None,
    benchmark: str | None,
    no_mlperf_conf: bool,
    overrides: tuple[str, ...],
    telemetry: tuple[str, ...],
    telemetry_optional: bool,
    output_dir: Path,
    as_json: bool,
    cost_file: Path | None,
    repeat: int,
) -> None:
    """Run one LoadGen test (no arguments: the embedded demo)."""
    from harness.analysis.cost import load_sheet

    # Read the price sheet before the test, so a typo in it costs no run.
    sheet = load_sheet(cost_file) if cost_file else None
    config = build_run_config(config_file, overrides, weights, mlperf_conf, user_conf, scenario=scenario, mode=mode,
                              backend=backend, model=model, dataset=dataset, name=name, benchmark=benchmark,
                              no_mlperf_conf=no_mlperf_conf, telemetry=telemetry,
                              telemetry_optional=telemetry_optional)
    if sheet is not None and sheet.energy_per_kwh > 0 and config is not None and not config.telemetry.gpu:
        raise ConfigError("the price sheet sets energy_per_kwh: measure the energy with --telemetry gpu")
    if config is None:
        from harness.run.demo import demo_configs

        configs = demo_configs()
    else:
        configs = [config]
    with _stop_signals_noted() as noted:
        worst = _run_all(configs, sheet, output_dir, repeat, as_json, noted)
    sys.exit(max(worst, EXIT_INCOMPLETE) if noted else worst)


def _run_all(configs: list[Any], sheet: Any, output_dir: Path, repeat: int, as_json: bool, noted: list[str]) -> int:
    """Each config's run (or repeats), priced and rendered; the worst exit code of them."""
    from harness.analysis.cost import cost_for_run, parse_sheet, write_cost
    from harness.report.terminal import render
    from harness.results.summary import harness_rejected
    from harness.run import runner

    worst = 0
    for config in configs:
        config_sheet = sheet or (parse_sheet(config.cost, "cost section of the config") if config.cost else None)

        def priced(outcome: runner.RunOutcome, price_sheet: Any = config_sheet) -> None:
            if price_sheet is not None:
                write_cost(outcome.run_dir, cost_for_run(outcome.run_dir, outcome.summary, price_sheet))

        repeated = None
        if repeat > 1:
            from harness.run.repeat import run_repeated

            repeated = run_repeated(config, output_dir, repeat, after_each=priced)  # priced before aggregating
        else:
            priced(single := runner.run(config, output_dir))
        for outcome in repeated.outcomes if repeated else [single]:
            if as_json:
                console.print_json(json.dumps(outcome.summary))
            else:
                render(outcome.summary, console, str(outcome.run_dir))
            if outcome.summary["status"] != "complete":
                worst = max(worst, EXIT_INCOMPLETE)
            elif harness_rejected(outcome.summary):
                # The harness's verdict (docs/reproducibility.md): the run finished and the
                # answer is "no", as a fired gate; a crash (3) still outranks it.
                worst = max(worst, EXIT_NEGATIVE)
        if repeated and not as_json:
            from harness.report.compare_view import render_aggregate

            render_aggregate(repeated.aggregate, console, repeated.repeat_dir)
        if noted or any(o.stopped_by for o in (repeated.outcomes if repeated else [single])):
            break  # a stop signal ends the command, not only the run it came in
    return worst


@click.command(short_help="Report a finished run from its results folder alone.")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(["terminal", "md", "html", "json", "csv", "jsonl"]), default="terminal",
    show_default=True, help="csv/jsonl: the per-request records with stage times",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="write here (html default: RUN_DIR/report.html)")
@click.option("--details", is_flag=True, help="terminal: every figure of the tokens section, not only the main ones")
@handle_errors
def report(run_dir: Path, fmt: str, output: Path | None, details: bool) -> None:
    """Report a finished run from its results folder alone (or a sweep from its folder)."""
    from harness.analysis.points import is_sweep, load_sweep
    from harness.report import write_report
    from harness.report.terminal import render
    from harness.results.summary import read_summary

    sweep = is_sweep(run_dir)
    if fmt == "terminal":
        if sweep:
            from harness.report.sweep_view import render_sweep

            render_sweep(load_sweep(run_dir), console, run_dir)
        else:
            render(read_summary(run_dir), console, str(run_dir), details=details)
        return
    if output is None and fmt == "html":
        output = run_dir / REPORT_HTML
    if sweep:
        from harness.report.sweep_report import write_sweep_report as write_report
    text = write_report(run_dir, fmt, output)
    if output is None:
        click.echo(text, nl=False)
    else:
        err_console.print(f"wrote {output}", highlight=False)


@click.command(short_help="Price a finished run with a price sheet (writes cost.json).")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--cost", "cost_file", type=click.Path(path_type=Path), required=True, help="price sheet YAML")
@click.option("--json", "as_json", is_flag=True, help="print cost.json instead of the tables")
@handle_errors
def cost(run_dir: Path, cost_file: Path, as_json: bool) -> None:
    """Price a finished run with a price sheet; writes RUN_DIR/cost.json."""
    from harness.analysis.cost import cost_for_run, load_sheet, write_cost
    from harness.analysis.run_data import load_run
    from harness.report import figures
    from harness.report.terminal import rich_table

    sheet = load_sheet(cost_file)
    data = load_run(run_dir)
    result = cost_for_run(run_dir, data.summary, sheet)
    path = write_cost(run_dir, result)
    if as_json:
        console.print_json(path.read_text())
        return
    console.print(rich_table(f"cost ({result['currency']})", figures.cost_table(result)))
    console.print(rich_table("cost per unit", figures.cost_unit_table(result)))
    console.print(f"  [dim]{path}[/]")


@click.command(short_help="Installed backends, whether they run here, and their options.")
@click.argument("name", required=False)
@handle_errors
def backends(name: str | None) -> None:
    """Installed backends, whether they can run here, and each one's options (`--set KEY=VALUE`)
    with its default, or "required", and what it does. NAME shows one backend."""
    from rich.padding import Padding

    from harness.config import registry

    for backend in [name] if name else registry.names():
        bi = registry.info(backend)  # an unknown NAME: the registry's error, listing the known ones
        if bi.available and bi.cls is not None:
            avail = "[green]yes[/]"
        elif bi.cls is not None and bi.missing:
            hint = bi.cls.install_hint or "pip install " + " ".join(bi.missing)
            avail = f"[red]no[/]: needs {', '.join(bi.missing)} — {escape(hint)}"
        else:
            avail = f"[red]no[/]: {escape(bi.error)}"
        console.print(f"[bold]{backend}[/] · available: {avail} · [dim]{escape(bi.target)}[/]", soft_wrap=True)
        if bi.cls is None:
            continue
        options = bi.cls.Options
        console.print(_options_table(options.model_fields))
        # the option sets one option picks between (the http backend's protocols): each one's own
        for value, variant in options.variants().items():
            own = {k: f for k, f in variant.model_fields.items() if k not in options.model_fields}
            heading = f"[bold]{escape(value)}[/]: {escape(variant.model_fields[options.variant_key].description or '')}"
            console.print(Padding(heading, (0, 0, 0, 2)))  # wrapped lines keep the indent
            if own:
                console.print(_options_table(own, indent=4))
        console.print()


def _options_table(fields: dict[str, Any], indent: int = 2) -> Any:
    from rich.table import Table

    table = Table("option", "default", "", box=None, padding=(0, 1, 0, indent), header_style="dim", show_header=False)
    for key, field in fields.items():
        table.add_row(key, _default_text(field), escape(_description(field)))
    return table


def _description(field: Any) -> str:
    """The option's description, and its choices when it takes a fixed few the text does not name."""
    from typing import Literal, get_args, get_origin

    text = field.description or ""
    choices = [str(c) for c in get_args(field.annotation)] if get_origin(field.annotation) is Literal else []
    if choices and not all(c in text for c in choices):
        text = (text + "; " if text else "") + "one of " + ", ".join(choices)
    return text


def _default_text(field: Any) -> str:
    """An option's default as `--set` would write it, or "required" (never pydantic's sentinel)."""
    if field.is_required():
        return "[bold]required[/]"
    value = field.default_factory() if field.default_factory is not None else field.default
    return escape(value if isinstance(value, str) else json.dumps(value) if value is not None else "none")
