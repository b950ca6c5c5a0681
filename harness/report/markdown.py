"""A Markdown report for pull requests: the headline, then tables; no images."""

from __future__ import annotations

from harness.analysis.run_data import RunData
from harness.report import figures as fig
from harness.results.schedule import timed_from_dispatch


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
    parts += ["### Throughput", _table(fig.throughput_table(s))]
    if s["harness"].get("samples") and s["run"]["scenario"] != "Offline":
        parts += ["### Latency", _table(fig.latency_table(s))]
    parts += ["### Validity", _table(fig.validity_table(s)), "### Reliability", _table(fig.reliability_table(s))]
    bd = data.breakdown
    if bd:
        parts += [f"### Where the time went: {fig.stage_name(bd, bd['dominant'])} dominates", _table(fig.breakdown_table(bd))]
    r = data.rates
    if r["target_per_s"] is not None:
        parts += ["### Achieved vs target rate", _table(fig.rate_table(r))]
        parts += [f"- note: {n}" for n in r["notes"]]
    tokens = s.get("tokens")
    if isinstance(tokens, dict) and (specs := fig.tokens_tables(tokens, timed_from_dispatch(s))):
        parts += ["### Tokens"] + [_table(spec) for spec in specs]
    if sessions := fig.session_tables(s):
        parts.append("### Sessions")
        for title, spec in sessions:
            parts += [f"**{title}**", _table(spec)]
        parts += [f"- {_cell(line)}" for line in fig.session_lines(s)]
    tel = s.get("telemetry")
    if isinstance(tel, dict):
        parts += ["### System under test (telemetry)"] + [f"- telemetry: {n}" for n in tel.get("notes") or []]
        for title, spec in fig.telemetry_tables(tel):
            parts += [f"**{title}**", _table(spec)]
    if dist := fig.distribute_tables(s):
        parts.append("### Scale-out")
        for title, spec in dist:
            parts += [f"**{title}**", _table(spec)]
    acc = s.get("accuracy")
    if acc and acc.get("metric"):
        parts.append(f"**Accuracy** {acc['metric']}: {acc['value'] * 100:.2f}% of {acc['scored_samples']:,} samples")
    if isinstance(s.get("text_accuracy"), dict):
        from harness.results.text_accuracy import lines

        parts.append("**Text accuracy** " + "  \n".join(lines(s["text_accuracy"])))
    if data.cost:
        parts += [f"### Cost ({data.cost['currency']})", _table(fig.cost_unit_table(data.cost)), _table(fig.cost_table(data.cost))]
    parts += ["### System and versions", _table((["item", "value"], fig.system_rows(data) + fig.versions(data)))]
    parts.append(f"<sub>results folder: `{data.run_dir}` · regenerate with `harness report {data.run_dir} --format md`</sub>")
    return "\n\n".join(parts) + "\n"
