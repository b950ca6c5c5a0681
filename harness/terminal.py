"""The terminal view of a summary: the verdict first, then a compact table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _rate(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}"


def render(summary: dict[str, Any], console: Console, run_dir: str | None = None) -> None:
    run = summary["run"]
    val = summary["validity"]
    ours = summary["harness"]
    lg = summary["loadgen"]
    verdict = val["result"] or ("ACCURACY" if run["mode"] == "AccuracyOnly" else "NO RESULT")
    color = {"VALID": "green", "INVALID": "red", "ACCURACY": "cyan"}.get(verdict, "yellow")
    head = f"[bold {color}]{verdict}[/] {run['scenario']} {run['mode']} · {run['backend']} · {run['name']}"
    if summary["status"] != "complete":
        head += f"  [bold yellow]INCOMPLETE[/]: {summary.get('incomplete_reason')}"
    console.print(head)
    if ours.get("samples"):
        rate = ours["success_rate"]
        style = "green" if rate == 1 else "red"
        console.print(
            f"  success [{style}]{rate * 100:.2f}%[/] ({ours['succeeded']:,}/{ours['samples']:,})"
            + (f" · failures: {ours['failures_by_reason']}" if ours["failed"] else "")
        )
    for reason in val["reasons"]:
        console.print(f"  [red]why:[/] {reason}")
    for fix in val["fixes"]:
        console.print(f"  [cyan]fix:[/] {fix}")

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("figure")
    table.add_column("LoadGen", justify="right")
    table.add_column("harness", justify="right")
    table.add_row("throughput (samples/s)", _rate(lg["throughput_per_s"]), _rate(ours.get("throughput_per_s")))
    per_query = run["scenario"] == "MultiStream"
    our_lat = ours.get("query_latency_ms" if per_query else "latency_ms", {})
    label = "query latency" if per_query else "latency"
    if run["scenario"] != "Offline":
        for k in ("p50", "p90", "p99", "p99_9", "mean", "max"):
            table.add_row(f"{label} {k} (ms)", _ms(lg["latency_ms"].get(k)), _ms(our_lat.get(k)))
    if ours.get("samples"):
        for k in ("p50", "p99"):
            table.add_row(f"queue {k} (ms)", "", _ms(ours["queue_ms"][k]))
            table.add_row(f"service {k} (ms)", "", _ms(ours["service_ms"][k]))
        table.add_row("mean batch size", "", f"{ours['mean_batch_size']:.2f}")
    es = lg.get("early_stopping_latency_ms", {})
    if es.get("single_stream") is not None:
        table.add_row("early-stopping p90 estimate (ms)", _ms(es["single_stream"]), "")
    if es.get("multi_stream") is not None and per_query:
        table.add_row("early-stopping p99 estimate (ms)", _ms(es["multi_stream"]), "")
    acc = summary.get("accuracy")
    if acc and acc.get("metric"):
        table.add_row(f"accuracy {acc['metric']}", "", f"{acc['value'] * 100:.2f}% of {acc['scored_samples']:,}")
    console.print(table)
    if lg.get("errors"):
        console.print(f"  [red]LoadGen errors:[/] {'; '.join(lg['errors'])}")
    if run_dir:
        console.print(f"  [dim]{run_dir}[/]")
