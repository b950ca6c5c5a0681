"""The `harness` command group. Commands live in one module per group and import only
harness.cli._common, so this module is the only one that knows them all (no import cycle)."""

from __future__ import annotations

import click

from harness.cli.llm import kv_cache
from harness.cli.pytorch import export_onnx, parity
from harness.cli.repro import audit, check, compare, rerun, submission
from harness.cli.run import backends, cost, report, run


@click.group()
@click.option("--debug", is_flag=True, help="show tracebacks (the child's too, when a run failed in it)")
@click.version_option(package_name="loadgen-harness")
def main(debug: bool) -> None:
    """MLPerf LoadGen benchmarks over ONNX Runtime, PyTorch and HTTP backends."""


for command in (run, report, cost, backends, check, compare, rerun, submission, audit, parity, export_onnx, kv_cache):
    main.add_command(command)
