"""A sweep or capacity folder in the terminal: the points, the knee, the capacity."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from harness.analysis.diagnosis import diagnose
from harness.report import sweep_figures as sf
from harness.report.terminal import rich_table


def render_sweep(data: dict[str, Any], out: Console, sweep_dir: Path) -> None:
    attainment = ((data.get("capacity") or {}).get("settings") or {}).get("attainment")
    title = f"{data['kind']} · {data['backend']} · {data['scenario']} · {data['state']}"
    # Short axis values (a concurrency, a rate) and their names are never cut: rich narrows the
    # figures' columns instead. Long ones (a model's path) may wrap, or the verdict is squeezed out.
    names = sf.value_columns(data)
    short = all(len(str(v)) <= 16 for p in data["points"] for v in [*names, *(p.get("values") or {}).values()])
    out.print(rich_table(title, sf.points_table(data, attainment), keep=1 + len(names) if short else 1))
    width = max(out.width - 1, 40)
    knee = sf.knee_line(data)
    for line in [*sf.timing_notes(data), *sf.accuracy_notes(data), *sf.capacity_lines(data), *([knee] if knee else [])]:
        out.print(escape(textwrap.fill(line, width=width, initial_indent="  ", subsequent_indent="    ")), highlight=False)
    # the diagnosis: one finding each, wrapped under its bullet so it reads in 80 columns
    for f in diagnose(data):
        text = textwrap.fill(f["finding"], width=width, initial_indent="  • ", subsequent_indent="    ")
        out.print(escape(text), highlight=False)
    out.print(f"  [dim]{escape(str(sweep_dir))}[/]")
