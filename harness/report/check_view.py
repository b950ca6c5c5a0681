"""`harness check` in the terminal: every finding, then the verdict and its exit code."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

_KIND_STYLE = {"ok": "green", "note": "dim", "invalid": "yellow", "incomplete": "red", "tampered": "bold red"}


def render_check(result: Any, console: Console) -> None:
    """One harness.analysis.check.CheckResult."""
    table = Table("", "check", "detail", box=None, header_style="dim")
    for f in result.findings:
        table.add_row(f"[{_KIND_STYLE[f.kind]}]{f.kind}[/]", f.what, f.detail)
    console.print(table)
    style = _KIND_STYLE["ok" if result.verdict == "valid" else result.verdict]
    console.print(f"[{style}]{result.verdict.upper()}[/] (exit {result.exit_code}) · {result.run_dir}", highlight=False)
