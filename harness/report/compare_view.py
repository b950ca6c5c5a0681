"""Views of comparisons and repeat aggregates (harness.analysis.compare) for the terminal and text."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.analysis.compare import LETTERS, markdown, side_lines, table
from harness.report.figures import cut_middle
from harness.results.metrics import METRICS


def render_aggregate(data: dict[str, Any], out: Console, repeat_dir: Path) -> None:
    """The repeat aggregate: median, range and 95 % interval per headline figure."""
    table = Table(title=f"{data['n']} runs, each in its own process", title_justify="left", box=None, header_style="dim")
    for h in ("figure", "median", "min", "max", "95% CI of mean", "spread"):
        table.add_column(h, justify="left" if h == "figure" else "right")
    for m in METRICS:
        s = data["metrics"].get(m.name)
        if not s:
            continue
        ci = f"{s['ci95'][0]:,.4g} – {s['ci95'][1]:,.4g}" if s["ci95"] else _no_interval(s)
        spread = f"{s['relative_spread']:.1%}" if s["relative_spread"] is not None else "—"
        table.add_row(m.heading, f"{s['median']:,.4g}", f"{s['min']:,.4g}",
                      f"{s['max']:,.4g}", ci, spread)
    out.print(table)
    for w in data["warnings"]:
        out.print(f"  [yellow]warning:[/] {w}", highlight=False)
    out.print(f"  [dim]{repeat_dir}[/]")


def _no_interval(s: dict[str, Any]) -> str:
    """The CI cell when over_runs withheld the interval: "too few runs" rather than a bound
    below zero for a figure that cannot be negative."""
    return "too few runs" if s["n"] > 1 else "—"


def comparison_text(comparison: Any, fmt: str) -> str:
    """A comparison as JSON or Markdown text, for files and pipes."""
    if fmt == "json":
        return json.dumps(comparison.to_dict(), indent=2, default=str) + "\n"
    return markdown(comparison)


def render_comparison(comparison: Any, console: Console) -> None:
    """A comparison in the terminal: the gate's outcome first, then the headline table,
    "comparable?", differences and rules. Every cell is escaped: a value such as
    `[null, 64]` is text here, not Rich markup (which swallowed it)."""
    style = "red" if comparison.failed else "green" if comparison.rules else "dim"
    console.print(f"[bold {style}]{escape(comparison.outcome)}[/]", highlight=False)
    width = max(console.width - 1, 40)
    for line in side_lines(comparison):
        console.print(f"[dim]{escape(textwrap.fill(line, width=width, subsequent_indent='    '))}[/]", highlight=False)
    header, rows = table(comparison)
    t = Table(title="headline figures (B/A: B over A)", title_justify="left", box=None, header_style="dim")
    for i, h in enumerate(header):
        t.add_column(escape(h), justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*map(escape, r))
    console.print(t)
    style = "green" if comparison.verdict.startswith("comparable") else "yellow"
    console.print(f"[{style}]{escape(comparison.verdict)}[/]", highlight=False)
    if comparison.diffs:
        rows, one_sided = diff_rows(comparison.diffs)
        if rows:
            two = len(comparison.sides) == 2
            d = Table(*(("category", "setting", "A", "B") if two else ("category", "setting", "A", "side", "value")),
                      box=None, header_style="dim")
            d.columns[1].overflow = "fold"  # a setting's name whole, over two lines if need be
            cut = max((width - 44) // 2, 12)  # category 9, a name ~30, two values
            for category, key, base, side, other in ((c, k, cut_middle(b, cut), sd, cut_middle(o, cut)) for c, k, b, sd, o in rows):
                d.add_row(*map(escape, (category, key, base, other) if two else (category, key, base, side, other)))
            console.print(d)
        for line in one_sided:
            console.print(escape(textwrap.fill(line, width=width, initial_indent="  ", subsequent_indent="    ")),
                          highlight=False)
    for r in comparison.rules:
        change = "n/a" if r.change is None else f"{r.change:+.2f}{'%' if r.rule.relative else ''}"
        mark = "[red]FAIL[/]" if r.fired else "[green]ok[/]"
        text = textwrap.fill(f"{'FAIL' if r.fired else 'ok'} {r.rule.text} · {LETTERS[r.index]}: {change} · {r.note}",
                             width=width, initial_indent="  ", subsequent_indent="    ")
        console.print("  " + mark + escape(text[len("  FAIL" if r.fired else "  ok"):]), highlight=False)
    if comparison.unexpected:
        console.print(f"  [red]FAIL[/] differences outside --expect: {', '.join(comparison.unexpected)}")


def diff_rows(diffs: list[Any]) -> tuple[list[tuple[str, str, str, str, str]], list[str]]:
    """(rows of the settings both sides have, with their values; one line per category for
    the settings only one side has). onnxruntime beside synthetic differs in ~30 settings
    only one of them has: as table rows they were ~30 `null vs value` lines."""
    rows: list[tuple[str, str, str, str, str]] = []
    one_sided: dict[tuple[str, str, bool], list[str]] = {}
    for diff in diffs:
        side = LETTERS[diff.side]
        if (diff.base is None) != (diff.other is None):
            value = diff.other if diff.base is None else diff.base
            one_sided.setdefault((diff.category, side, diff.base is None), []).append(f"{diff.key}={_short(value)}")
        else:
            rows.append((diff.category, diff.key, _short(diff.base), side, _short(diff.other)))
    lines = [f"{category}: only {side if base_missing else 'A'} has {', '.join(keys)}"
             for (category, side, base_missing), keys in one_sided.items()]
    return rows, lines


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "…"

