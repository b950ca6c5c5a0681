"""The `harness` command group. Commands live in one module per group and import only
harness.cli._common, so this module is the only one that knows them all (no import cycle)."""

from __future__ import annotations

import click

from harness.cli.llm import accuracy, kv_cache
from harness.cli.pytorch import export_onnx, parity
from harness.cli.repro import audit, check, compare, rerun, submission, system_desc
from harness.cli.run import backends, cost, report, run
from harness.cli.sweep import capacity, sweep

EXAMPLES = """\b
Examples:
  harness run                       the embedded demo (digits, ONNX Runtime)
  harness run --backend onnxruntime --model model.onnx --scenario Offline
  harness run -c scenarios/server.yaml --backend onnxruntime \\
      --model model.onnx --set target_qps=500
  harness run --backend http --set protocol=openai-chat \\
      --set url=http://127.0.0.1:8000/v1 --set model_name=MODEL \\
      --dataset synthetic:isl=128,osl=64 --scenario Server \\
      --set target_qps=2
  harness sweep -c scenarios/server.yaml --backend synthetic \\
      --set service_time_ms=2 --vary target_qps=100,200,400
  harness capacity -c scenarios/server.yaml --backend synthetic \\
      --set service_time_ms=2
  harness backends                  backends, their options and defaults
  harness report results/RUN        a finished run again, from its folder
  harness compare base/ cand/ --fail-if "latency_p99 > +10%"
  harness accuracy results/RUN      score an LLM run's answers from its folder

Each command's --help lists its options; docs/configuration.md, every setting.
"""


@click.group(epilog=EXAMPLES)
@click.option("--debug", is_flag=True, help="show tracebacks (the child's too, when a run failed in it)")
@click.version_option(package_name="loadgen-harness")
def main(debug: bool) -> None:
    """MLPerf LoadGen benchmarks over ONNX Runtime, PyTorch and HTTP backends."""


for command in (run, sweep, capacity, report, cost, backends, check, compare, rerun, submission, system_desc, audit, parity,
                export_onnx, kv_cache, accuracy):
    main.add_command(command)
