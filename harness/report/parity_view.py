"""`harness parity` in the terminal: AGREE/DISAGREE, then per-output errors against the tolerances
(tensor backends), the first divergence and the text figures (generative backends), or the
cosine of the vectors (embeddings)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
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


def render_text_parity(result: Any, console: Console) -> None:
    """A text parity result (harness.analysis.text_parity.TextParityResult): the verdict and the
    first divergence first, then the figures and the run folders."""
    verdict = "[bold green]AGREE[/]" if result.agree else "[bold red]DISAGREE[/]"
    console.print(f"{verdict} · texts equal in {result.text_matches} of {result.samples} samples "
                  f"({result.text_match_rate:.2%}; needed {result.min_text_match:.2%})")
    first = result.first_divergence
    if first is not None:
        where = f"token {first.token}" if first.token is not None else (
            f"character {first.char}" if first.char is not None else first.reason)
        console.print(f"  first divergence: sample {first.sample}, {where} ({first.reason})", highlight=False)
        console.print(f"    A: {escape(first.excerpt_a)}", highlight=False)
        console.print(f"    B: {escape(first.excerpt_b)}", highlight=False)
    console.print(f"  A: {escape(result.label_a)}  {result.run_a}", highlight=False)
    console.print(f"  B: {escape(result.label_b)}  {result.run_b}", highlight=False)
    table = Table("figure", "value", title=None)
    table.add_row("texts exact match", f"{result.text_match_rate:.2%}")
    if result.ids_compared:
        table.add_row(f"first {result.first_ids} ids exact match", f"{result.ids_match_rate:.2%}")
    else:
        table.add_row(f"first {result.first_ids} ids exact match", "not compared")
    for k, v in result.rouge.items():
        table.add_row(f"{k} (B against A)", f"{v:.2f}")
    table.add_row("failed answers", f"A {result.failed_a}, B {result.failed_b}")
    console.print(table)
    if result.ids_note:
        console.print(f"  note: {escape(result.ids_note)}", highlight=False)
    if len(result.divergences) > 1:
        rest = ", ".join(str(d.sample) for d in result.divergences[1:11])
        more = f" and {len(result.divergences) - 11} more" if len(result.divergences) > 11 else ""
        console.print(f"  other disagreeing samples: {rest}{more}", highlight=False)


def render_vector_parity(result: Any, console: Console) -> None:
    """A vector parity result (harness.analysis.vector_parity.VectorParityResult): the verdict,
    then the cosine figures and the run folders."""
    verdict = "[bold green]AGREE[/]" if result.agree else "[bold red]DISAGREE[/]"
    least = "—" if result.cosine_min is None else f"{result.cosine_min:.9f} (sample {result.least_sample})"
    console.print(f"{verdict} · vectors of {result.compared} of {result.samples} samples compared by cosine "
                  f"(needed ≥ {result.min_cosine:g})")
    console.print(f"  A: {escape(result.label_a)}  {result.run_a}", highlight=False)
    console.print(f"  B: {escape(result.label_b)}  {result.run_b}", highlight=False)
    table = Table("figure", "value")
    table.add_row("cosine min", least)
    table.add_row("cosine mean", "—" if result.cosine_mean is None else f"{result.cosine_mean:.9f}")
    table.add_row("dimension", f"A {result.dimension_a or '—'}, B {result.dimension_b or '—'}")
    console.print(table)
    for failure in result.failures:
        console.print(f"  [red]why:[/] {escape(failure)}", highlight=False)
