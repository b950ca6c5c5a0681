"""`harness parity` in the terminal: AGREE/DISAGREE, then per-output errors against the tolerances."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def render_parity(result: Any, console: Console) -> None:
    """A parity result (harness.run.parity.ParityResult): the verdict first, then each output."""
    tol = result.tolerances
    verdict = "[bold green]AGREE[/]" if result.agree else "[bold red]DISAGREE[/]"
    console.print(f"{verdict} · {result.samples} samples of {result.dataset['spec']} in batches of {result.batch}")
    console.print(f"  A: {result.a.label()}", highlight=False)
    console.print(f"  B: {result.b.label()}", highlight=False)
    if result.input_map:
        console.print("  inputs matched by position: " + ", ".join(f"{a} -> {b}" for a, b in result.input_map.items()))
    table = Table("output", "shape", "max abs err", "max rel err", "beyond tolerance", "top-1 agreement")
    for c in result.outputs:
        bad = c.mismatched > 0
        top_bad = c.top1 is not None and c.top1 < tol.min_top1
        table.add_row(
            str(c.index),
            "×".join(str(d) for d in c.shape),
            f"{c.max_abs:.3g}",
            f"{c.max_rel:.3g}",
            f"[{'red' if bad else 'green'}]{c.mismatched:,} / {c.elements:,}[/]",
            "—" if c.top1 is None else f"[{'red' if top_bad else 'green'}]{c.top1:.2%}[/]",
        )
    console.print(table)
    console.print(f"  tolerances: atol {tol.atol:g}, rtol {tol.rtol:g}, min top-1 {tol.min_top1:.2%}")
    if result.accuracy_a is not None:
        console.print(f"  accuracy against labels: A {result.accuracy_a:.2%}, B {result.accuracy_b:.2%}")
    for failure in result.failures:
        console.print(f"  [red]why:[/] {failure}", highlight=False)
