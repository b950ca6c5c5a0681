"""A sweep or capacity folder as Markdown, one self-contained HTML page, or JSON.

    write_sweep_report(SWEEP_DIR, fmt, out) -> the text, also written to `out` when given

Everything comes from sweep.json (and sweep.yaml for the plan shown in HTML), so the report
can be made again from the folder at any time. The tables and lines are the terminal's
(harness.report.sweep_figures); the diagnosis is harness.analysis.diagnosis; the HTML page
adds the curves (harness.report.sweep_plots) and uses the run report's CSS and table
markup, so both kinds of page look alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.analysis.diagnosis import diagnose
from harness.analysis.points import load_sweep
from harness.errors import OutputError
from harness.report import sweep_figures as sf
from harness.report import write_out
from harness.report.figures import Table
from harness.report.html import _CSS, _e, _section, _table
from harness.report.markdown import _table as md_table
from harness.results import folder

FORMATS = ("md", "html", "json")


def _title(data: dict[str, Any]) -> str:
    return f"{data['kind']} · {data['backend']} · {data['scenario']} · {data['state']}"


def _attainment(data: dict[str, Any]) -> float | None:
    return ((data.get("capacity") or {}).get("settings") or {}).get("attainment")


def _lines(data: dict[str, Any]) -> list[str]:
    """Why points went unscored, the capacity lines and the knee, as the terminal prints them."""
    knee = sf.knee_line(data)
    return sf.timing_notes(data) + sf.accuracy_notes(data) + sf.capacity_lines(data) + ([knee] if knee else [])


def _runs(data: dict[str, Any]) -> Table:
    """Each point's run folder (or why it has none), so a reader can open its own report."""
    rows = [[str(p["index"]), p.get("run") or f"crashed: {p.get('error') or p.get('status')}"] for p in data["points"]]
    return ["#", "run folder"], rows


def render_markdown(data: dict[str, Any], sweep_dir: Path) -> str:
    parts = [f"## {_title(data)}", md_table(sf.points_table(data, _attainment(data)))]
    if lines := _lines(data):
        parts.append("\n".join(f"- {line}" for line in lines))
    findings = diagnose(data)
    parts.append("### Diagnosis")
    parts.append("\n".join(f"- {f['finding']}" for f in findings) if findings else "- the points show no finding")
    parts += ["### Runs", md_table(_runs(data))]
    parts.append(f"<sub>sweep folder: `{sweep_dir}` · regenerate with `harness report {sweep_dir} --format md`</sub>")
    return "\n\n".join(parts) + "\n"


def _finding_html(f: dict[str, Any]) -> str:
    # the figures stay one click away: the line is the message, the numbers its evidence
    figures = json.dumps(f["figures"], ensure_ascii=False, indent=1)
    return f"<li>{_e(f['finding'])}<details><summary>figures</summary><pre>{_e(figures)}</pre></details></li>"


def render_html(data: dict[str, Any], sweep_dir: Path) -> str:
    from harness.report.sweep_plots import sweep_plots  # matplotlib only for this format

    title = _title(data)
    parts = [f"<h1>{_e(title)}</h1>", _table(sf.points_table(data, _attainment(data)))]
    if lines := _lines(data):
        parts.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>")
    findings = diagnose(data)
    body = "<ul>" + "".join(_finding_html(f) for f in findings) + "</ul>" if findings else "<p>the points show no finding</p>"
    parts.append(_section("diagnosis", body))
    plots = sweep_plots(data)
    figs = "".join(f'<figure><img alt="{_e(cap)}" src="{uri}"></figure>' for cap, uri in plots)
    parts.append(_section("curves", figs or "<p>fewer than two complete points: no curves</p>"))
    parts.append(_section("runs", _table(_runs(data))))
    plan = sweep_dir / folder.SWEEP_PLAN
    if plan.is_file():
        text = plan.read_text(encoding="utf-8", errors="replace")
        # the whole base config is long; the axes are in the table already
        parts.append(_section(f"plan ({folder.SWEEP_PLAN})", f"<details><summary>axes and base config</summary><pre>{_e(text)}</pre></details>"))
    parts.append(f'<p style="color:#888">sweep folder: {_e(sweep_dir)}</p>')
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def render_json(data: dict[str, Any]) -> str:
    return json.dumps({**data, "diagnosis": diagnose(data)}, indent=2) + "\n"


def write_sweep_report(sweep_dir: Path, fmt: str, out: Path | None = None) -> str:
    """Render one format of a sweep folder; write it to `out` when given."""
    data = load_sweep(sweep_dir)
    if fmt == "md":
        text = render_markdown(data, sweep_dir)
    elif fmt == "html":
        text = render_html(data, sweep_dir)
    elif fmt == "json":
        text = render_json(data)
    else:
        raise OutputError(f"a sweep folder reports as {', '.join(FORMATS)} or terminal, not {fmt!r}")
    return write_out(text, out)
