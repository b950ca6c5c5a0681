"""The terminal view of a run: the verdict first, then why, then tables.

With the results folder at hand it also shows where the time went (the dominant stage),
achieved vs target rate, and cost; from a bare summary only the summary's figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.report import figures as fig
from harness.results.schedule import timed_from_dispatch
from harness.report.schedule_view import FROM_ISSUE_NOTE, schedule_table, timed
from harness.results.schedule_lag import degraded_line

_COLORS = {"VALID": "green", "INVALID": "red", "ACCURACY": "cyan"}


def rich_table(title: str, spec: fig.Table, keep: int = 1) -> Table:
    """`keep`: the leading columns that name a row (its label, a sweep's axis values) are never
    wrapped nor cut; rich takes the width a narrow terminal lacks from the others."""
    header, rows = spec
    table = Table(title=title, title_justify="left", title_style="bold", header_style="dim", box=None, pad_edge=False)
    for i, (h, right) in enumerate(zip(header, fig.numeric_columns(spec))):
        # a column wraps between words, never inside one ("INVALID" is not cut to "INVALI…"):
        # its narrowest is its longest word, up to 16 (a path may still wrap or be cut)
        words = [w for cell in (h, *(r[i] for r in rows if i < len(r))) for w in str(cell).split()]
        table.add_column(h, justify="right" if right else "left", no_wrap=i < keep,
                         min_width=min(16, max((len(w) for w in words), default=1)))
    for row in rows:
        table.add_row(*row)
    return table


def render(summary: dict[str, Any], console: Console, run_dir: str | None = None, details: bool = False) -> None:
    from harness.analysis.run_data import load_run

    data = load_run(Path(run_dir), summary) if run_dir and Path(run_dir).is_dir() else None
    run, val, ours = summary["run"], summary["validity"], summary["harness"]
    verdict = fig.verdict(summary)
    color = _COLORS.get(verdict, "yellow")
    lines = fig.headline(summary, data.cost if data else None)
    console.print(f"[bold {color}]{verdict}[/]" + lines[0][len(verdict):], highlight=False)
    for line in lines[1:]:
        style = "bold yellow" if line.startswith(("INCOMPLETE", "CLIENT SATURATED")) else ""
        if line.startswith("success"):
            style = "green" if ours.get("success_rate") == 1 else "red"
        console.print(f"  [{style}]{line}[/]" if style else f"  {line}", highlight=False)
    schedule = summary.get("schedule")
    if isinstance(schedule, dict) and schedule.get("degraded"):  # before any latency is read as the server's
        console.print(f"  [bold yellow]{degraded_line(schedule)}[/]", highlight=False)
    sizing = (data.manifest or {}).get("sizing") if data is not None else None
    key = next((k for k in sizing or {} if k.endswith(("_qps", "_latency_ms"))), None)
    if isinstance(sizing, dict) and key and isinstance(sizing.get("measured"), (int, float)):
        measured = (f"{sizing['measured']:,.0f}/s x" if key.endswith("_qps") else f"p50 {sizing['measured']:.3g} ms /")
        console.print(f"  {key} {sizing[key]:,g} = pilot {measured} {sizing['margin']:g} (none given)", highlight=False)
    for reason in val["reasons"]:
        console.print(f"  [red]why:[/] {reason}")
    for fix in val["fixes"]:
        console.print(f"  [cyan]fix:[/] {fix}")

    console.print(rich_table("throughput", fig.throughput_table(summary)))
    if run["scenario"] != "Offline" and ours.get("samples"):
        console.print(rich_table("latency", fig.latency_table(summary, fig.LATENCY_KEYS if details else fig.BRIEF_LATENCY_KEYS)))
    if data is not None and data.breakdown:
        bd = data.breakdown
        dominant = bd["dominant"]
        share = bd["stages"][dominant]["share"] if dominant else None
        title = (f"where the time went: {fig.stage_name(bd, dominant)} dominates ({fig.pct(share)} of mean latency)"
                 if dominant else "breakdown")
        console.print(rich_table(title, fig.breakdown_table(bd)))
        r = data.rates
        if r["target_per_s"] is not None:
            console.print(rich_table("achieved vs target rate", fig.rate_table(r)))
            for note in r["notes"]:
                console.print(f"  [yellow]note:[/] {note}")
    elif ours.get("samples"):
        # No folder: the summary's own queue/service percentiles.
        queue = "backlog" if timed_from_dispatch(summary) else "queue"  # a closed loop's is its own
        rows = [[f"{queue if k == 'queue' else k} {p} (ms)", fig.ms(ours[f"{k}_ms"][p])]
                for k in ("queue", "service") for p in ("p50", "p99")]
        console.print(rich_table("breakdown", (["stage", "harness"], rows)))
    if timed(schedule):
        console.print(rich_table("arrival schedule", schedule_table(schedule)))
        console.print(f"  [yellow]note:[/] {FROM_ISSUE_NOTE}")
    tokens = summary.get("tokens")
    if isinstance(tokens, dict):
        # the figures a token run is about; --details: every key of the section
        for spec in fig.llm_tables(tokens, details=details, from_dispatch=timed_from_dispatch(summary)):
            console.print(rich_table("tokens", spec))
    for title, spec in fig.session_tables(summary):
        console.print(rich_table(title, spec))
    for line in fig.session_lines(summary):
        console.print(f"  {line}", highlight=False)
    tel = summary.get("telemetry")
    if isinstance(tel, dict):
        for note in tel.get("notes") or []:
            console.print(f"  [yellow]telemetry:[/] {note}")
        for title, spec in fig.telemetry_tables(tel):
            console.print(rich_table(title, spec))
    for title, spec in fig.distribute_tables(summary):
        console.print(rich_table(title, spec))
    acc = summary.get("accuracy")
    if acc and acc.get("metric"):
        console.print(f"  accuracy {acc['metric']}: {acc['value'] * 100:.2f}% of {acc['scored_samples']:,}")
    text_acc = summary.get("text_accuracy")
    if isinstance(text_acc, dict) and not text_acc.get("error"):
        console.print(rich_table("answers' accuracy", fig.text_accuracy_table(text_acc)))
        for line in fig.text_accuracy_source(text_acc):
            console.print(f"  {line}", highlight=False)
    if data is not None and data.cost:
        console.print(rich_table(f"cost ({data.cost['currency']})", fig.cost_table(data.cost)))
        console.print(rich_table("cost per unit", fig.cost_unit_table(data.cost)))
    if summary["loadgen"].get("errors"):
        console.print(f"  [red]LoadGen errors:[/] {'; '.join(summary['loadgen']['errors'])}")
    if run_dir:
        console.print(f"  [dim]{run_dir}[/]")
