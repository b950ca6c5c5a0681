"""What every command shares: the consoles and the mapping of errors to one line and an exit code.

The exit codes are the table in harness.errors: a HarnessError exits with its own code; any
other exception is a bug of the tool, never a verdict, and exits EXIT_INTERNAL with one line
(its traceback under --debug), so "a gate fired" (1) and "the tool crashed" stay apart.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from harness.data import benchmarks
from harness.errors import EXIT_INTERNAL, HarnessError

console = Console()
err_console = Console(stderr=True)


def _say(message: str) -> None:
    # escape: messages hold text like "pip install 'loadgen-harness[pytorch]'" that rich
    # would otherwise read as markup and silently drop.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def debug_enabled() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("debug", False))


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = debug_enabled()
        try:
            return fn(*args, **kwargs)
        except HarnessError as e:
            if debug:
                child_tb = getattr(e, "child_traceback", None)
                if child_tb:
                    err_console.print("traceback in the child process:", highlight=False)
                    err_console.print(escape(child_tb), highlight=False, soft_wrap=True)
                traceback.print_exc()
            _say(str(e))
            sys.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as e:  # noqa: BLE001 - a bug of the tool: one line and its own code
            if debug:
                traceback.print_exc()
            _say(f"internal error: {type(e).__name__}: {e} (a bug in the harness; --debug shows the traceback)")
            sys.exit(EXIT_INTERNAL)

    return wrapper


def config_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options that build a RunConfig, shared by `run`, `sweep` and `capacity`."""
    for option in reversed(_CONFIG_OPTIONS):
        fn = option(fn)
    return fn


_CONFIG_OPTIONS = [
    click.option("-c", "--config", "config_file", type=click.Path(path_type=Path), help="scenario YAML"),
    click.option("--scenario", type=click.Choice(["SingleStream", "MultiStream", "Server", "Offline", "Interactive"]),
                  help="LoadGen scenario, or Interactive (an LLM benchmark's Server with mlperf.conf's "
                  "interactive TTFT/TPOT bounds) [default: the config's, else Offline]"),
    click.option("--mode", type=click.Choice(["PerformanceOnly", "AccuracyOnly", "FindPeakPerformance", "SubmissionRun"]),
                  help="LoadGen test mode [default: PerformanceOnly]"),
    click.option("--backend", help="onnxruntime (the default), pytorch, pytorch-llm, http, synthetic "
                  "(`harness backends`: them and their options)"),
    click.option("--model", help="what the backend loads: model.onnx, module:function, a TorchScript/.pt2 file, "
                  "a Hugging Face id or folder (the http backend needs none)"),
    click.option("--weights", type=click.Path(path_type=Path), help="state_dict file for a module:function model (the backend's `weights` option)"),
    click.option("--dataset", help="tensors: synthetic[:n=N,seed=S] | digits | DIR of .npy/.npz; "
                  "prompts: prompts.jsonl | sharegpt:FILE | synthetic:isl=..,osl=.. | mlperf:SET:FILE (with references: "
                  f"{', '.join(benchmarks.DATASETS)}) (docs/llm.md)"),
    click.option("--name", help="run name, part of the results folder's name"),
    click.option("--mlperf-conf", type=click.Path(path_type=Path),
                  help="an mlperf.conf whose values override the one LoadGen has compiled in (rarely needed)"),
    click.option("--user-conf", type=click.Path(path_type=Path),
                  help="user.conf: your settings per benchmark and scenario (LoadGen applies its own mlperf.conf first)"),
    click.option("--benchmark", help=f"MLPerf model name (e.g. {benchmarks.RECORDS[0].name}): LoadGen then applies "
                  "its compiled-in mlperf.conf for it (official seeds, durations, counts); --set overrides"),
    click.option("--no-mlperf-conf", "no_mlperf_conf", is_flag=True,
                  help="do not load LoadGen's compiled-in mlperf.conf (on by default with --benchmark)"),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="any run or backend setting"),
    click.option("--telemetry", "telemetry", multiple=True, metavar="SOURCE",
                  help="sample beside the test: server=URL (a Prometheus /metrics endpoint; repeatable), host "
                  "(CPU, memory), gpu (NVML) (docs/telemetry.md)"),
    click.option("--telemetry-optional", "telemetry_optional", is_flag=True,
                  help="an endpoint that does not answer before the test is a warning, not an error"),
]


def telemetry_overrides(sources: tuple[str, ...], optional: bool) -> list[str]:
    """`--telemetry` flags as the `--set telemetry.*` settings they stand for."""
    servers: list[str] = []
    out: list[str] = []
    for source in sources:
        kind, eq, url = source.partition("=")
        if kind == "server" and eq and url:
            servers.append(url)
        elif kind in ("host", "gpu") and not eq:
            out.append(f"telemetry.{kind}=true")
        else:
            raise click.BadParameter(f"{source!r}: expected server=URL, host or gpu", param_hint="--telemetry")
    if servers:
        out.append("telemetry.server=" + json.dumps(servers))
    if optional:
        out.append("telemetry.optional=true")
    return out


def build_run_config(
    config_file: Path | None, overrides: tuple[str, ...], weights: Path | None, mlperf_conf: Path | None,
    user_conf: Path | None, **cli_values: Any,
) -> Any:
    """The RunConfig the options describe (None when none was given: the embedded demo)."""
    from harness.analysis.cost import parse_sheet
    from harness.config import registry
    from harness.config.run_config import build_config

    if weights is not None:
        overrides = (*overrides, f"weights={weights.resolve()}")
    overrides = (*telemetry_overrides(cli_values.pop("telemetry", ()) or (), cli_values.pop("telemetry_optional", False)),
                 *overrides)
    cli_values.update(mlperf_conf=str(mlperf_conf) if mlperf_conf else None, user_conf=str(user_conf) if user_conf else None)
    if cli_values.pop("no_mlperf_conf", False):
        cli_values["official_conf"] = False
    if config_file is None and not overrides and all(v is None for v in cli_values.values()):
        return None
    return build_config(config_file, overrides, cli_values, registry.option_names, registry.options_class,
                        sections={"cost": parse_sheet})
