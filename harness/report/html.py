"""One self-contained HTML page: verdict, tables, plots, config, system and versions.

The sections and their order are harness.report.sections'; here only how they look.

No scripts, fonts, stylesheets or images are fetched: CSS is inline and plots are base64
PNGs, so the file opens offline and can be attached to a procurement memo as is.
"""

from __future__ import annotations

import html
from typing import Any

from harness.analysis.run_data import RunData
from harness.report import figures as fig
from harness.report.sections import HTML, Block, Figures, Note, Table, View, shown

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1em;margin:1em 0 .2em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}th{color:#666;font-weight:normal}
.verdict{font-weight:bold;padding:.1em .5em;border-radius:3px;color:#fff}
.VALID{background:#2a7}.INVALID{background:#c33}.ACCURACY{background:#28a}.other{background:#c80}
.why{color:#a22}.fix{color:#167}.note{color:#a60}
figure{display:inline-block;margin:.5em}
pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:.85em}
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def _table(spec: fig.Table) -> str:
    header, rows = spec
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _section(title: str, body: str) -> str:
    return f"<h2>{_e(title)}</h2>\n{body}\n"


def _block(block: Block) -> str:
    if isinstance(block, Table):
        return (f"<h3>{_e(block.title)}</h3>" if block.title else "") + _table(block.spec)
    if isinstance(block, Note):
        label = f"{block.label}: " if block.label else ""
        return f'<p class="{"why" if block.alarm else "note"}">{_e(label + block.text)}</p>'
    if isinstance(block, Figures):
        figures, notes = block.draw()
        return ("".join(f'<figure><img alt="{_e(cap)}" src="{uri}"></figure>' for cap, uri in figures)
                + "".join(f'<p class="note">{_e(n)}</p>' for n in notes))
    return f"<pre>{_e(block.text)}</pre>"


def render_html(data: RunData) -> str:
    s = data.summary
    verdict = fig.verdict(s)
    css_class = verdict if verdict in ("VALID", "INVALID", "ACCURACY") else "other"
    lines = fig.unwrapped(fig.headline(s, data.cost))
    parts: list[str] = [
        f'<h1><span class="verdict {css_class}">{_e(verdict)}</span>{_e(lines[0][len(verdict):])}</h1>',
        "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines[1:]) + "</ul>",
    ]
    val = s["validity"]
    parts += [f'<p class="why">why: {_e(r)}</p>' for r in val.get("reasons") or []]
    parts += [f'<p class="fix">fix: {_e(f)}</p>' for f in val.get("fixes") or []]
    view = View(s, data, details=True)
    parts += [_section(section.heading(view), "".join(_block(b) for b in blocks))
              for section, blocks in shown(view, HTML)]
    parts.append(f'<p style="color:#888">results folder: {_e(data.run_dir)}</p>')
    title = f"{verdict} {s['run']['scenario']} {s['run']['backend']} {s['run']['name']}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
