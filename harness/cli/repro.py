"""Commands for reproducible, comparable results: check, compare, rerun, submission, audit.

Thin, like harness.cli: parse, call one library function, print, exit with its code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from harness.cli._common import build_run_config, config_options, console, err_console, handle_errors
from harness.errors import EXIT_INCOMPLETE, EXIT_NEGATIVE
from harness.report.check_view import render_check
from harness.report.compare_view import comparison_text, render_comparison


def _print_comparison(comparison: Any, fmt: str) -> None:
    if fmt == "terminal":
        render_comparison(comparison, console)
    else:
        click.echo(comparison_text(comparison, fmt), nl=False)


@click.command(short_help="Is a results folder complete, untouched, valid, re-runnable?")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the findings as JSON")
@click.option("--no-dataset", is_flag=True, help="skip rebuilding the dataset to verify its sha256 (it loads the model)")
@handle_errors
def check(run_dir: Path, as_json: bool, no_dataset: bool) -> None:
    """Is a results folder (or each run of a --repeat folder) complete, untouched, valid and re-runnable?

    Exit 0 valid, 4 invalid (LoadGen INVALID or errors), 5 incomplete (missing files or
    records), 6 tampered (a recorded sha256 no longer matches), 2 not a results folder.
    """
    from harness.analysis.check import check_path

    results = check_path(run_dir, rebuild_dataset=not no_dataset)
    if as_json:
        data = [r.to_dict() for r in results]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    for result in results if not as_json else []:
        render_check(result, console)
    # The codes grow with severity (0 < 4 < 5 < 6): the worst run decides.
    sys.exit(max(r.exit_code for r in results))


@click.command(short_help="Runs side by side: ratios to the first and a noise-aware gate.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--fail-if", "rules", multiple=True, metavar="RULE",
              help='e.g. "throughput < -5%", "latency_p99 > +10%", "success_rate < -0.5pt" (capacity folders: '
                   '"capacity < -5%"); exit 1 when one fires')
@click.option("--expect", multiple=True, metavar="CATEGORY",
              help="categories allowed to differ (scenario, backend, dataset, model, harness, system; sweeps: "
                   "also axes); others exit 1")
@click.option("--format", "fmt", type=click.Choice(["terminal", "md", "json", "html"]), default="terminal",
              show_default=True, help="html: sweep folders only, both sides' curves overlaid")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="sweep folders: write the md, html or json here")
@handle_errors
def compare(paths: tuple[Path, ...], rules: tuple[str, ...], expect: tuple[str, ...], fmt: str,
            output: Path | None) -> None:
    """Runs (or repeat folders) side by side, ratios to the first, "comparable?", a gate.

    Two sweep (or two capacity) folders: the capacity ratio with both brackets, or the
    points with the same axis values side by side, and the same "comparable?" check.
    """
    from harness.analysis.compare import compare as do_compare
    from harness.analysis.compare_sweeps import is_sweep_folder
    from harness.errors import ConfigError

    if any(is_sweep_folder(p) for p in paths):
        _compare_sweeps(list(paths), list(rules), list(expect) if expect else None, fmt, output)
    if fmt == "html" or output is not None:
        raise ConfigError("--format html and -o are for comparing sweep folders; runs compare as terminal, md or json")
    comparison = do_compare(list(paths), list(rules), list(expect) if expect else None)
    _print_comparison(comparison, fmt)
    sys.exit(1 if comparison.failed else 0)


def _compare_sweeps(paths: list[Path], rules: list[str], expect: list[str] | None, fmt: str, output: Path | None) -> None:
    """`compare` on sweep folders (harness.analysis.compare_sweeps); a sweep beside a run is
    one line, exit 2."""
    from harness.analysis.compare_sweeps import compare_sweeps
    from harness.errors import ConfigError, OutputError
    from harness.report.sweep_compare_view import render_sweep_comparison, sweep_comparison_text

    comparison = compare_sweeps(paths, rules, expect)
    if fmt == "terminal":
        if output is not None:
            raise ConfigError("-o writes md, html or json: add --format")
        render_sweep_comparison(comparison, console)
    else:
        text = sweep_comparison_text(comparison, fmt)
        if output is None:
            click.echo(text, nl=False)
        else:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as e:
                raise OutputError(f"cannot write {output}: {e.strerror or e}") from e
            err_console.print(f"wrote {output}", highlight=False)
    sys.exit(1 if comparison.failed else 0)


@click.command(short_help="Run a folder's config again and compare the two runs.")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--output-dir", type=click.Path(path_type=Path), help="default: beside RUN_DIR")
@click.option("--fail-if", "rules", multiple=True, metavar="RULE", help="as for compare")
@click.option("--format", "fmt", type=click.Choice(["terminal", "md", "json"]), default="terminal", show_default=True)
@click.option("--any-cluster", is_flag=True, help="a distributed run: run on whatever cluster this is, not only an "
              "equivalent one")
@handle_errors
def rerun(run_dir: Path, output_dir: Path | None, rules: tuple[str, ...], fmt: str, any_cluster: bool) -> None:
    """Run RUN_DIR's resolved config again into a new folder, then compare the two. A run
    with replicas or client shards runs again only on an equivalent cluster (same nodes and
    resources, spread the same way), unless --any-cluster."""
    from harness.analysis.compare import compare as do_compare
    from harness.config.run_config import RunConfig
    from harness.errors import ConfigError
    from harness.results import folder
    from harness.results.cluster import shape
    from harness.run import runner

    folder.require_folder(run_dir)
    try:
        config = RunConfig(**(folder.read_run_config(run_dir) or {}))
    except ValueError as e:
        raise ConfigError(f"{run_dir / folder.RUN_CONFIG}: no longer a valid config here: {str(e).splitlines()[0]}") from e
    expected = None if any_cluster else shape(folder.read_json(run_dir, folder.CLUSTER))
    outcome = runner.run(config, output_dir or run_dir.parent, expect_cluster=expected)
    err_console.print(f"re-ran into {outcome.run_dir}", highlight=False)
    comparison = do_compare([run_dir, outcome.run_dir], list(rules))
    _print_comparison(comparison, fmt)
    sys.exit(1 if comparison.failed else 0)


@click.command(short_help="Results folders -> MLPerf submission layout, rules checked.")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--org", required=True, help="submitting organisation")
@click.option("--division", required=True, type=click.Choice(["closed", "open", "network"]))
@click.option("--system-desc", type=click.Path(path_type=Path), required=True,
              help="YAML: system_name, system_type, status, host_processors_per_node, host_storage_*, ...")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
@click.option("--force", is_flag=True, help="write even when rules are broken; the folder is marked NOT_FOR_SUBMISSION")
@click.option("--version", "checker_version", type=click.Choice(["v6.1"]), default="v6.1", show_default=True,
              help="the MLCommons submission checker version whose rules apply")
@handle_errors
def submission(run_dirs: tuple[Path, ...], org: str, division: str, system_desc: Path, output: Path, force: bool,
               checker_version: str) -> None:
    """Results folders (runs, and `harness audit` folders for the closed division) -> the
    MLPerf Inference submission layout; refuses (exit 1) when a rule of the checker is broken."""
    from harness.analysis.submission import write_submission

    result = write_submission(list(run_dirs), org, division, system_desc, output, force, checker_version)
    for note in result.skipped:
        err_console.print(f"[dim]skipped:[/] {note}", highlight=False, soft_wrap=True)
    for rule in result.broken:
        err_console.print(f"[yellow]rule broken:[/] {rule}", highlight=False, soft_wrap=True)
    for rule in result.loopholes:
        err_console.print(f"[yellow]loophole refused:[/] {rule}", highlight=False, soft_wrap=True)
    state = ("[red]marked NOT_FOR_SUBMISSION[/]" if result.broken or result.loopholes
             else "[green]all checked rules met[/]")
    console.print(f"wrote {len(result.files)} files under {result.root} · {state}", highlight=False)


@click.command(name="system-desc", short_help="A system description template for `harness submission`.")
@click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="the YAML file to write")
@handle_errors
def system_desc(run_dirs: tuple[Path, ...], output: Path) -> None:
    """Write a YAML of every field the submission checker wants in systems/<system>.json:
    what the runs' system.json measured, filled; the rest empty, each with what goes there."""
    from harness.analysis.run_data import load_run
    from harness.analysis.submission import system_template
    from harness.errors import OutputError

    if output.exists():
        raise OutputError(f"{output} exists: pass a new file name (nothing was overwritten)")
    output.write_text(system_template([load_run(d) for d in run_dirs]))
    console.print(f"wrote {output}: fill the fields marked required, then pass it to --system-desc", highlight=False)


@click.command(short_help="LoadGen's compliance audit TEST01, TEST04 or TEST06 of a run config.")
@click.argument("test", type=click.Choice(["TEST01", "TEST04", "TEST06"]))
@config_options
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--sampling-target", type=click.IntRange(min=1), default=64, show_default=True,
              help="TEST01: outputs LoadGen logs in the performance run")
@click.option("--eos-token-id", type=click.IntRange(min=0), default=None,
              help="TEST06: the tokenizer's EOS id [default: the benchmark's, else 2 as run_verification.py]")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="TEST04: reference and audit runs, back to back, this many times; the median round is judged "
                   "(1: the official script's single comparison)")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def audit(test: str, config_file: Path | None, overrides: tuple[str, ...], weights: Path | None,
          mlperf_conf: Path | None, user_conf: Path | None, output_dir: Path, sampling_target: int,
          eos_token_id: int | None, rounds: int, as_json: bool, **cli_values: Any) -> None:
    """Run LoadGen's compliance audit TEST01, TEST04 or TEST06 on a run config (the options of `harness
    run`); exit 0 pass, 1 fail, 3 not judged. Its folder goes to `harness submission` for the
    closed division's compliance folders."""
    from harness.config.run_config import RunConfig
    from harness.run.audit import run_audit

    config = build_run_config(config_file, overrides, weights, mlperf_conf, user_conf, **cli_values) or RunConfig()
    result = run_audit(test, config, output_dir, sampling_target, eos_token_id, rounds)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        color = "green" if result.passed else "red" if result.conclusive else "yellow"
        console.print(f"[{color}]{escape(result.message)}[/]", highlight=False)
        console.print(f"  [dim]{result.audit_dir}[/]")
    # a refusal to judge is not a verdict: it exits as an incomplete run does
    sys.exit(0 if result.passed else EXIT_NEGATIVE if result.conclusive else EXIT_INCOMPLETE)
