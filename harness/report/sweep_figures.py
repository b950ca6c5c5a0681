"""A sweep's or capacity search's figures as rows of text (terminal, Markdown and HTML agree),
from sweep.json alone (harness.run.sweep)."""

from __future__ import annotations

import math
from typing import Any

from harness.analysis.points import bound_of_invalid, verdict
from harness.report.figures import Table, rate


def ms(v: float | None) -> str:
    """A latency in 4 significant figures at most (3,468, 52.4, 5.02): a sweep's table holds
    up to five of them a row, and must fit 80 columns without cutting one."""
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{max(0, 2 - int(math.floor(math.log10(abs(v)))))}f}" if v else "0"

ROLE_LABEL = {"pilot": "pilot", "try": "", "point": ""}  # a search's rows are all tries but one


def value_columns(data: dict[str, Any]) -> list[str]:
    """The axes' names: each point's values under them (a capacity search varies target_qps)."""
    return [a["name"] for a in data.get("axes") or []] or ["target_qps"]


def has_tokens(data: dict[str, Any]) -> bool:
    return any((p.get("metrics") or {}).get("ttft_p99") is not None for p in data["points"])


def points_table(data: dict[str, Any], attainment: float | None = None) -> Table:
    """One row per run: axis values, target and completed rates, latency, success, queue
    share, and the verdict (VALID/INVALID, or pass/fail for a capacity try)."""
    names = value_columns(data)
    tokens = has_tokens(data)
    # a token sweep trades p50 for TTFT and TPOT p99: the row must still fit 80 columns
    header = ["#", *names, "done/s", *([] if tokens else ["p50 ms"]), "p99 ms"]
    header += ["TTFT p99", "TPOT p99"] if tokens else []
    # the client-side queue share says something only where requests waited in the client
    queued = any((p.get("queue_share") or 0) >= 0.005 for p in data["points"] if p.get("role") != "pilot")
    accuracy = shows_accuracy(data)
    header += ["ok %", *([accuracy_header(data)] if accuracy else []), *([queue_header(data)] if queued else []), "verdict"]
    rows = []
    for p in data["points"]:
        m = p.get("metrics") or {}
        label = f"{p['index']}" + (f" {ROLE_LABEL[p['role']]}" if ROLE_LABEL.get(p.get("role")) else "")
        values = p.get("values") or {}
        cells = [label, *[str(values.get(n, "")) if p.get("role") != "pilot" else "" for n in names]]
        if p.get("status") == "crashed":
            rows.append([*cells, *["—"] * (len(header) - len(cells) - 1), "crashed"])
            continue
        pilot = p.get("role") == "pilot"  # its latency is an Offline query's, not a request's
        lat = [] if tokens else [m.get("latency_p50")]
        cells += [rate(p.get("completed_per_s")), *(["—"] * (len(lat) + 1) if pilot else [ms(v) for v in (*lat, m.get("latency_p99"))])]
        if tokens:
            cells += ["—", "—"] if pilot else [ms(m.get("ttft_p99")), ms(m.get("tpot_p99"))]
        ok = m.get("success_rate")
        cells.append("—" if ok is None else "100" if ok == 100 else f"{ok:.1f}")
        if accuracy:
            cells.append("—" if pilot else accuracy_cell(p, data))
        if queued:
            cells.append("—" if p.get("queue_share") is None else f"{p['queue_share']:.0%}")
        cells.append(_verdict_cell(p, data, attainment))
        rows.append(cells)
    return header, rows


def queue_header(data: dict[str, Any]) -> str:
    """The share of latency before dispatch: a closed loop's is the backlog the harness holds
    (LoadGen issued every sample at once), not a queue of the system under test."""
    return "backlog" if any(p.get("backlog") for p in data["points"]) else "queue"


def timing_notes(data: dict[str, Any]) -> list[str]:
    """Where the latencies are timed from, when the points ran on the harness's own schedule."""
    if not any(p.get("latency_from") == "dispatch" for p in data["points"]):
        return []
    return ["latency, TTFT and TPOT are timed from dispatch, as on every schedule the harness owns; "
            "backlog: the share of the latency from LoadGen's issue spent in the harness's backlog"]


def shows_accuracy(data: dict[str, Any]) -> bool:
    """The accuracy column: asked for (`sweep --accuracy`), or some point's answers were scored
    or should have been (a dataset with references is scored whether asked or not)."""
    return bool(data.get("accuracy")) or any(
        p.get("text_accuracy") or p.get("text_accuracy_not_scored") for p in data["points"]
    )


def accuracy_header(data: dict[str, Any]) -> str:
    """The points' headline figure, with the answers' count when every scored point has the
    same (else each cell gives its own); the ± is explained under the table (`accuracy_notes`)."""
    n = _answer_counts(data)
    return f"{_figure_name(data)} n={n.pop()}" if len(n) == 1 else f"{_figure_name(data)} (n)"


def _figure_name(data: dict[str, Any]) -> str:
    """rouge1 or exact match (in %), as points.py names the headline; "accuracy" when the points differ."""
    figures = {(p.get("text_accuracy") or {}).get("figure") for p in data["points"]} - {None}
    return {"rouge1": "rouge1", "accuracy": "exact %"}.get(figures.pop(), "accuracy") if len(figures) == 1 else "accuracy"


def _answer_counts(data: dict[str, Any]) -> set[Any]:
    return {p["text_accuracy"].get("answers") for p in data["points"] if (p.get("text_accuracy") or {}).get("value") is not None}


def accuracy_cell(p: dict[str, Any], data: dict[str, Any]) -> str:
    """"93.3 ±5.1": the score and the half-width of its 95 % CI, then "(n)" answers unless the
    header gives n; "not scored" when the answers could not be (the reason is a line under
    the table: `accuracy_notes`)."""
    if p.get("status") != "complete":
        return "—"
    acc = p.get("text_accuracy") or {}
    value = acc.get("value")
    if value is None:
        return "not scored"
    ci = acc.get("ci95")
    half = "" if not ci else f"±{_tight((ci[1] - ci[0]) / 2)}"
    n = "" if len(_answer_counts(data)) == 1 else f" ({acc.get('answers')})"
    return f"{_tight(value)} {half}{n}" if half else f"{_tight(value)}{n}"


def _tight(v: float) -> str:
    """A percentage in at most 4 characters (100, 87.5, 5.1, 0): the column shares 80 with
    the latency columns."""
    return f"{v:.0f}" if abs(v) >= 99.95 else f"{v:.1f}".removesuffix(".0")


def accuracy_notes(data: dict[str, Any]) -> list[str]:
    """What the accuracy column holds, and why each point that shows "not scored" was not:
    the scorer's error, no answer, or a dataset without references (which `sweep --accuracy`
    refuses before a run)."""
    if not shows_accuracy(data):
        return []
    out = []
    if _answer_counts(data):
        out.append(f"{_figure_name(data)}: the answers given at each point scored against the dataset's references "
                   "(summary.json text_accuracy), ± the half-width of the 95% CI, over n answers")
    for p in data["points"]:
        if p.get("role") == "pilot" or p.get("status") != "complete" or (p.get("text_accuracy") or {}).get("value") is not None:
            continue
        why = p.get("text_accuracy_not_scored") or "the run's dataset has no reference answers"
        out.append(f"point {p['index']}: answers not scored: {why}")
    return out


def _verdict_cell(p: dict[str, Any], data: dict[str, Any], attainment: float | None) -> str:
    if p.get("status") != "complete":
        return "incomplete"
    if p.get("role") == "pilot":
        return "pilot"
    if data.get("kind") == "capacity":
        ok, bound = verdict(p, attainment)
        return "pass" if ok else f"fail: {_short(bound)}"
    if p.get("validity") == "INVALID":
        return f"INVALID: {_short(bound_of_invalid(p))}"
    return p.get("validity") or "—"


#: a bound's name in a table cell, where 80 columns leave a dozen characters for it
_SHORT = {"early stopping": "early stop", "latency bound": "latency", "success rate": "success",
          "TTFT p99": "TTFT", "TPOT p99": "TPOT"}


def _short(bound: str | None) -> str:
    text = bound or ""
    if text.startswith("SLO "):  # "SLO ttft_ms" -> "ttft SLO"
        return f"{text[4:].removesuffix('_ms')} SLO"
    if text.endswith(" latency") and text.startswith("p"):  # "p90 latency" -> "p90"
        return text.removesuffix(" latency")
    return _SHORT.get(text, text)


def capacity_lines(data: dict[str, Any]) -> list[str]:
    """The capacity, its bracket and rule, what bound it, and what was seen near it."""
    c = data.get("capacity")
    if not c:
        return []
    lo, hi = c["bracket_qps"]
    lines = []
    if c["capacity_qps"] is not None:
        width = f", {c['bracket_width']:.1%} wide" if c.get("bracket_width") is not None else ""
        above = f"fails at {rate(hi)}" if hi is not None else "no failing rate found above it"
        lines.append(f"capacity: {rate(c['capacity_qps'])} QPS ({above}{width}; precision {c['precision']:.0%})")
    else:
        lines.append(f"capacity: none found ({c['stop_reason']})")
    if c.get("bound_by"):
        lines.append(f"bound by: {c['bound_by']} (at {rate(hi)} QPS)")
    lines.append(f"rule: {c['rule']}")
    start = c.get("start_qps")
    lines.append(
        f"search: {c['tries']} tries in {c['time_s']:.0f} s from {rate(start)} QPS ({c.get('start_from')}); "
        f"stopped: {c['stop_reason']}"
    )
    if c.get("mixed_rates"):
        lines.append("noise: tries disagreed at " + ", ".join(rate(r) for r in c["mixed_rates"]) + " QPS")
    at = c.get("at_capacity") or {}
    if at.get("latency_p99_ms") and at.get("tries", 0) > 1:
        lo99, hi99 = at["latency_p99_ms"]
        lines.append(f"at capacity: p99 {lo99:.3g}–{hi99:.3g} ms over {at['tries']} tries")
    return lines


def knee_line(data: dict[str, Any]) -> str | None:
    k = data.get("knee")
    if k is None:
        return None
    p = next(p for p in data["points"] if p["index"] == k)
    mean = p.get("latency_mean_ms")
    return (f"knee: point {k} ({rate(p.get('completed_per_s'))}/s, mean {'—' if mean is None else f'{mean:.3g}'} ms); "
            "past it latency rises faster than throughput")
