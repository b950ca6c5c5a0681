"""The terminal view of a run: the verdict first, then why, then the sections' tables.

The sections and their order are harness.report.sections'; here only how they look. With
the results folder at hand it also shows where the time went (the dominant stage),
achieved vs target rate, and cost; from a bare summary only the summary's figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import table as rich
from rich.console import Console
from rich.markup import escape

from harness.report import figures as fig
from harness.report.sections import TERMINAL, Note, Table, View, shown
from harness.results.schedule_lag import degraded_line

_COLORS = {"VALID": "green", "INVALID": "red", "ACCURACY": "cyan"}


def rich_table(title: str, spec: fig.Table, keep: int = 1) -> rich.Table:
    """`keep`: the leading columns that name a row (its label, a sweep's axis values) are never
    wrapped nor cut; rich takes the width a narrow terminal lacks from the others."""
    header, rows = spec
    table = rich.Table(title=title, title_justify="left", title_style="bold", header_style="dim", box=None, pad_edge=False)
    for i, (h, right) in enumerate(zip(header, fig.numeric_columns(spec))):
        # a column wraps between words, never inside one ("INVALID" is not cut to "INVALI…"):
        # its narrowest is its longest word, up to 16 (a path may still wrap or be cut)
        words = [w for cell in (h, *(r[i] for r in rows if i < len(r))) for w in str(cell).split()]
        table.add_column(h, justify="right" if right else "left", no_wrap=i < keep,
                         min_width=min(16, max((len(w) for w in words), default=1)))
    for row in rows:
        table.add_row(*row)
    return table


def note(block: Note) -> str:
    """A note indented under its table, its label coloured."""
    if block.label is None:
        return f"  {escape(block.text)}"
    return f"  [{'red' if block.alarm else 'yellow'}]{escape(block.label)}:[/] {escape(block.text)}"


def render(summary: dict[str, Any], console: Console, run_dir: str | None = None, details: bool = False) -> None:
    from harness.analysis.run_data import load_run

    data = load_run(Path(run_dir), summary) if run_dir and Path(run_dir).is_dir() else None
    val, ours = summary["validity"], summary["harness"]
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
        first = sizing.get("first_try")  # a timed try that ran out, and sized the run again
        by = "try" if isinstance(first, dict) else "pilot"
        console.print(f"  {key} {sizing[key]:,g} = {by} {measured} {sizing['margin']:g} (none given)", highlight=False)
        if isinstance(first, dict) and isinstance(first.get(key), (int, float)):
            console.print(f"  (a first try at {first[key]:,g}, from a pilot, ran out before min_duration)",
                          highlight=False)
    for reason in val["reasons"]:
        console.print(f"  [red]why:[/] {reason}")
    for fix in val["fixes"]:
        console.print(f"  [cyan]fix:[/] {fix}")

    view = View(summary, data, details)
    for section, blocks in shown(view, TERMINAL):
        for block in blocks:
            if isinstance(block, Table):
                console.print(rich_table(block.title or section.heading(view), block.spec))
            elif isinstance(block, Note):
                console.print(note(block), highlight=False)
            # plots and preformatted text are the page's (sections.Figures, sections.Pre)
    if run_dir:
        console.print(f"  [dim]{run_dir}[/]")
