"""A Markdown report for pull requests: the headline, then the sections' tables; no images.

The sections and their order are harness.report.sections'; here only how they look.
"""

from __future__ import annotations

from harness.analysis.run_data import RunData
from harness.report import figures as fig
from harness.report.sections import MARKDOWN, Note, Table, View, shown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(spec: fig.Table) -> str:
    header, rows = spec
    out = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join("---:" if right else "---" for right in fig.numeric_columns(spec)) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def render_markdown(data: RunData) -> str:
    s = data.summary
    lines = fig.unwrapped(fig.headline(s, data.cost))
    parts = [f"## **{lines[0]}**", "\n".join(f"- {line}" for line in lines[1:])]
    val = s["validity"]
    if val.get("reasons") or val.get("fixes"):
        parts.append("\n".join([f"- **why:** {r}" for r in val.get("reasons") or []] + [f"- **fix:** {f}" for f in val.get("fixes") or []]))
    view = View(s, data, details=True)
    for section, blocks in shown(view, MARKDOWN):
        title = section.heading(view)
        parts.append(f"### {title[:1].upper()}{title[1:]}")
        for block in blocks:
            if isinstance(block, Table):
                parts += [f"**{_cell(block.title)}**", _table(block.spec)] if block.title else [_table(block.spec)]
            elif isinstance(block, Note):
                parts.append(f"- {block.label}: {_cell(block.text)}" if block.label else f"- {_cell(block.text)}")
            # no images in a PR comment, and no room for preformatted text (sections.Figures, sections.Pre)
    parts.append(f"<sub>results folder: `{data.run_dir}` · regenerate with `harness report {data.run_dir} --format md`</sub>")
    return "\n\n".join(parts) + "\n"
