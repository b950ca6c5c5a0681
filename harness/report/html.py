"""One self-contained HTML page: verdict, tables, plots, config, system and versions.

No scripts, fonts, stylesheets or images are fetched: CSS is inline and plots are base64
PNGs, so the file opens offline and can be attached to a procurement memo as is.
"""

from __future__ import annotations

import html
import json
from typing import Any

import yaml

from harness.analysis.run_data import RunData
from harness.report import figures as fig
from harness.report.plots import all_plots
from harness.report.schedule_view import FROM_ISSUE_NOTE, schedule_plot, schedule_table, timed
from harness.report.session_plot import turns_plot
from harness.report.telemetry_plots import telemetry_plots
from harness.results.token_metrics import itl_samples, read_token_entries
from harness.results.schedule import timed_from_dispatch

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


def _itl(data: RunData) -> tuple[Any, Any] | None:
    """Per-token inter-token latencies of the successful streamed requests (the summary's
    ITL, same rule), or None when the run kept no chunk times."""
    entries = [e for e in read_token_entries(data.run_dir) if e.get("status") == "ok"]
    return itl_samples(entries) if entries else None


def _telemetry(data: RunData, tel: dict[str, Any]) -> str:
    """Tables of what the server, the host and the GPUs said over the window, then the same
    over time beside the client's own in-flight count."""
    body = "".join(f'<p class="note">telemetry: {_e(n)}</p>' for n in tel.get("notes") or [])
    body += "".join(f"<h3>{_e(title)}</h3>{_table(spec)}" for title, spec in fig.telemetry_tables(tel))
    plots = telemetry_plots(data.telemetry_entries, data.columns, data.child.get("threads") or {},
                            data.child.get("loop_lag_ms"))
    body += "".join(f'<figure><img alt="{_e(cap)}" src="{uri}"></figure>' for cap, uri in plots.figures)
    return body + "".join(f'<p class="note">{_e(n)}</p>' for n in plots.notes)


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
    parts.append(_section("throughput", _table(fig.throughput_table(s))))
    # right after speed: a faster run that answers worse is not better
    text_acc = s.get("text_accuracy")
    if isinstance(text_acc, dict) and not text_acc.get("error"):
        note = f'<p class="note">{_e("; ".join(fig.text_accuracy_source(text_acc)))}; 95% CI: {_e(text_acc["ci_method"])}</p>'
        parts.append(_section("answers' accuracy", _table(fig.text_accuracy_table(text_acc)) + note))
    if s["harness"].get("samples") and s["run"]["scenario"] != "Offline":
        parts.append(_section("latency", _table(fig.latency_table(s))))
    parts.append(_section("validity", _table(fig.validity_table(s))))
    parts.append(_section("reliability", _table(fig.reliability_table(s))))
    bd = data.breakdown
    if bd:
        dom = bd["dominant"]
        title = f"where the time went: {fig.stage_name(bd, dom)} dominates" if dom else "where the time went"
        parts.append(_section(title, _table(fig.breakdown_table(bd))))
    r = data.rates
    if r["target_per_s"] is not None:
        notes = "".join(f'<p class="note">{_e(n)}</p>' for n in r["notes"])
        parts.append(_section("achieved vs target rate", _table(fig.rate_table(r)) + notes))
    sched = s.get("schedule")
    if timed(sched):  # a timed harness-owned schedule: was it kept? (docs/traffic.md)
        figure = f'<figure><img alt="offered vs dispatched load" src="{schedule_plot(sched)}"></figure>'
        note = f'<p class="note">{_e(FROM_ISSUE_NOTE)}</p>'
        parts.append(_section("arrival schedule", _table(schedule_table(sched)) + note + figure))
    tokens = s.get("tokens")
    if isinstance(tokens, dict) and (specs := fig.tokens_tables(tokens, timed_from_dispatch(s))):
        parts.append(_section("tokens", "".join(_table(spec) for spec in specs)))
    if sessions := fig.session_tables(s):
        notes = "".join(f'<p class="note">{_e(line)}</p>' for line in fig.session_lines(s))
        figure = f'<figure><img alt="TTFT and input tokens by turn" src="{turns_plot(s["sessions"])}"></figure>'
        parts.append(_section("sessions", "".join(f"<h3>{_e(title)}</h3>{_table(spec)}" for title, spec in sessions)
                              + notes + figure))
    tel = s.get("telemetry")
    if isinstance(tel, dict):
        parts.append(_section("system under test (telemetry)", _telemetry(data, tel)))
    if dist := fig.distribute_tables(s):
        parts.append(_section("scale-out", "".join(f"<h3>{_e(title)}</h3>{_table(spec)}" for title, spec in dist)))
    acc = s.get("accuracy")
    if acc and acc.get("metric"):
        parts.append(_section("accuracy", f"<p>{_e(acc['metric'])}: {acc['value'] * 100:.2f}% of {acc['scored_samples']:,} samples</p>"))
    if data.cost:
        c = data.cost
        parts.append(_section(f"cost ({c['currency']})", _table(fig.cost_unit_table(c)) + _table(fig.cost_table(c))))
    if data.columns is not None and len(data.columns["issue_ns"]):
        plots = all_plots(data.columns, bd, r["target_per_s"], _itl(data))
        body = "".join(f'<figure><img alt="{_e(cap)}" src="{uri}"></figure>' for cap, uri in plots.figures)
        body += "".join(f'<p class="note">{_e(n)}</p>' for n in plots.notes)
        parts.append(_section("plots", body))
    else:
        parts.append(_section("plots", "<p>no records.parquet in the results folder: no per-request plots</p>"))
    parts.append(_section("config (run.yaml)", f"<pre>{_e(yaml.safe_dump(data.config, sort_keys=False))}</pre>"))
    parts.append(_section("system", _table((["item", "value"], fig.system_rows(data)))))
    parts.append(_section("versions", _table((["component", "version"], fig.versions(data)))))
    settings = s["loadgen"].get("effective_settings") or {}
    parts.append(_section("LoadGen effective settings", f"<pre>{_e(json.dumps(settings, indent=1))}</pre>"))
    parts.append(f'<p style="color:#888">results folder: {_e(data.run_dir)}</p>')
    title = f"{verdict} {s['run']['scenario']} {s['run']['backend']} {s['run']['name']}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
