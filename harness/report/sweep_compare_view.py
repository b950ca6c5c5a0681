"""Views of a sweep comparison (harness.analysis.compare_sweeps): terminal, Markdown, JSON,
and one self-contained HTML page with both sides' curves overlaid.

The tables are the same rows in every format (terminal, Markdown and HTML agree): the
capacity of each side with its bracket, or the points side by side (one row per figure
under each point, so the table fits 80 columns whatever the figures), then "comparable?",
its differences, the axes check and the gate. The sides are called A and B, their folders
named once at the top. The curves are drawn from `charts()`, plain data, so a test can
read what each figure plots.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from harness.analysis.compare_sweeps import SweepComparison, figure, point_state
from harness.analysis.diagnosis import complete_points, load_order
from harness.analysis.points import verdict
from harness.report.figures import Table, cut_middle, ms, rate
from harness.report.terminal import rich_table

FORMATS = ("md", "html", "json")
HEADINGS = {"throughput": "done/s", "latency_p99": "p99 ms", "ttft_p99": "TTFT p99 ms", "tpot_p99": "TPOT p99 ms"}
COLORS = {"A": "#1f77b4", "B": "#ff7f0e"}


def _fmt(name: str, v: float | None) -> str:
    return rate(v) if name == "throughput" else ms(v)


def _ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def sides_lines(c: SweepComparison) -> list[str]:
    return [f"{k} = {s.path} ({s.kind}, {s.data.get('state')}, {len(s.points())} points)" for k, s in zip("AB", c.sides)]


# --- tables -----------------------------------------------------------------------------------


def capacity_table(c: SweepComparison) -> Table:
    cap = c.capacity
    assert cap is not None

    def bracket(d: dict[str, Any]) -> str:
        lo, hi = (list(d.get("bracket_qps") or [None, None]) + [None, None])[:2]
        return f"{rate(lo) if lo is not None else '0'}–{rate(hi) if hi is not None else '∞'}"

    lo, hi = cap.ratio_range
    rows = [
        ["capacity (QPS)", rate(cap.a.get("capacity_qps")), rate(cap.b.get("capacity_qps")), _ratio(cap.ratio)],
        ["bracket (QPS)", bracket(cap.a), bracket(cap.b), f"{lo:.3f}–{'∞' if hi is None else f'{hi:.3f}'}"],
        ["converged", *("yes" if d.get("converged") else f"no: {d.get('stop_reason')}" for d in (cap.a, cap.b)), ""],
        ["bound by", *(str(d.get("bound_by") or "—") for d in (cap.a, cap.b)), ""],
        ["tries", *(str(d.get("tries", "—")) for d in (cap.a, cap.b)), ""],
        ["criterion", *(str(d.get("criterion") or "—") for d in (cap.a, cap.b)), ""],
    ]
    return ["capacity search", "A", "B", "B/A"], rows


def _point_heading(c: SweepComparison) -> str:
    a = c.sides[0]
    names = [str(x.get("name")) for x in a.axes]
    return names[0] if len(names) == 1 and not a.auto else "point"


def _point_cell(c: SweepComparison, key: tuple[tuple[str, str], ...]) -> str:
    if c.sides[0].auto:
        return f"#{key[0][1]}"
    return key[0][1] if len(key) == 1 else " ".join(f"{k}={v}" for k, v in key)


def points_table(c: SweepComparison) -> Table:
    """Each point of either side: its figures on A and B and B/A, then each side's verdict."""
    rows = []
    for pair in c.pairs:
        first = True
        for name in c.names:
            a, b = figure(pair.a, name), figure(pair.b, name)
            ratio = b / a if a is not None and b is not None and a else None
            rows.append([_point_cell(c, pair.key) if first else "", HEADINGS[name], _fmt(name, a), _fmt(name, b), _ratio(ratio)])
            first = False
        rows.append(["", "verdict", point_state(pair.a), point_state(pair.b), ""])
    return [_point_heading(c), "figure", "A", "B", "B/A"], rows


def differences_table(c: SweepComparison, width: int | None = None) -> Table:
    rows = [[d.category, d.key, _short(d.base, width), _short(d.other, width)] for d in c.diffs]
    return ["category", "setting", "A", "B"], rows


def _short(value: Any, width: int | None) -> str:
    """A value cut to `width` in the middle: two URLs or paths differ at their ends as often
    as at their starts (a port, a file name)."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return cut_middle(text, max(width or 60, 5))


def rule_lines(c: SweepComparison) -> list[tuple[bool, str]]:
    out = []
    for r in c.rules:
        change = "n/a" if r.change is None else f"{r.change:+.2f}{'%' if r.rule.relative else ''}"
        out.append((r.fired, f"{r.rule.text}: {change} · {r.note}"))
    return out


def summary_lines(c: SweepComparison) -> list[str]:
    """The lines under the tables: the capacity ratio, matching, the verdict and axes."""
    lines = []
    if (cap := c.capacity_line()) is not None:
        lines.append(cap)
    if c.kind == "sweep":
        only_a = [p.label for p in c.pairs if p.b is None]
        only_b = [p.label for p in c.pairs if p.a is None]
        lines.append(f"{len(c.matched)} of {len(c.pairs)} points matched by their axis values"
                     + (f"; only in A: {', '.join(only_a)}" if only_a else "")
                     + (f"; only in B: {', '.join(only_b)}" if only_b else ""))
    lines += c.axes.notes
    lines.append(f"comparable? {c.verdict}")
    if c.not_compared:
        lines.append(c.not_compared)
    return lines


# --- terminal ---------------------------------------------------------------------------------


def render_sweep_comparison(c: SweepComparison, out: Console) -> None:
    width = max(out.width - 1, 40)

    def say(text: str, style: str = "", indent: str = "  ") -> None:
        wrapped = textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                                break_on_hyphens=False)
        out.print(f"[{style}]{escape(wrapped)}[/]" if style else escape(wrapped), highlight=False)

    style = "red" if c.failed else "green" if c.rules else "dim"
    say(c.outcome, f"bold {style}", "")
    for line in sides_lines(c):
        say(line, "dim", "")
    if c.capacity is not None:
        out.print(rich_table("capacity, A and B", capacity_table(c)))
    else:
        out.print(rich_table("points side by side (B/A: B over A)", points_table(c)))
    for line in summary_lines(c):
        say(line, "green" if line.startswith("comparable? comparable") else "")
    if c.diffs:
        # a setting's value in 80 columns: category 9, name ~30, two values of ~16
        out.print(rich_table("", differences_table(c, max((width - 44) // 2, 12))))
    for fired, text in rule_lines(c):
        mark = "FAIL" if fired else "ok"
        wrapped = textwrap.fill(f"{mark} {text}", width=width, initial_indent="  ", subsequent_indent="    ")
        out.print(f"  [{'red' if fired else 'green'}]{mark}[/]" + escape(wrapped[2 + len(mark):]), highlight=False)
    if c.unexpected:
        out.print(f"  [red]FAIL[/] differences outside --expect: {', '.join(c.unexpected)}")


# --- Markdown, JSON ---------------------------------------------------------------------------


def render_markdown(c: SweepComparison) -> str:
    from harness.report.markdown import _table

    parts = [f"**harness compare ({c.kind}s): {c.outcome}**", "\n".join(f"- {line}" for line in sides_lines(c))]
    parts.append(_table(capacity_table(c) if c.capacity is not None else points_table(c)))
    parts.append("\n".join(f"- {line}" for line in summary_lines(c)))
    if c.diffs:
        parts.append(_table(differences_table(c)))
    if c.rules:
        parts.append("\n".join(f"- {'❌' if fired else '✅'} {text}" for fired, text in rule_lines(c)))
    if c.unexpected:
        parts.append(f"❌ differences outside --expect: {', '.join(c.unexpected)}")
    return "\n\n".join(parts) + "\n"


def render_json(c: SweepComparison) -> str:
    return json.dumps(c.to_dict(), indent=2, default=str) + "\n"


# --- curves -----------------------------------------------------------------------------------


@dataclass
class Series:
    side: str  # "A" or "B"
    label: str
    xs: list[float]
    ys: list[float]
    style: str = "o-"  # matplotlib's format: "o-" line, "s--" dashed, "o" / "x" markers only


@dataclass
class Chart:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    lines: list[tuple[str, float, str]] = field(default_factory=list)  # (side, x, label): a vertical line
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # (side, lo, hi): a shaded band
    bounds: list[tuple[str, float, str]] = field(default_factory=list)  # (side, y, label): a horizontal line
    ratio: bool = False  # series are figures of B/A (matplotlib's colours), not sides, with a line at 1


def _xy(pairs: list[tuple[Any, dict[str, Any]]], name: str) -> tuple[list[float], list[float]]:
    kept = sorted((float(x), float(y)) for x, p in pairs if x is not None and (y := figure(p, name)) is not None)
    return [x for x, _ in kept], [y for _, y in kept]


def _sweep_charts(c: SweepComparison) -> list[Chart]:
    sides = list(zip("AB", (s.data for s in c.sides)))
    charts = []
    tl = Chart("throughput vs latency", "completed (samples/s)", "latency (ms)")
    for k, data in sides:
        pairs = [(p.get("completed_per_s"), p) for p in complete_points(data)]
        tl.series.append(Series(k, f"{k} p99", *_xy(pairs, "latency_p99")))
        tl.series.append(Series(k, f"{k} p50", *_xy(pairs, "latency_p50"), "s--"))
    charts.append(tl)
    loads = [(k, *load_order(data)) for k, data in sides]
    load_name = loads[0][1]
    if load_name != "completed/s" and all(name == load_name for _, name, _ in loads):
        for name, heading in (("latency_p99", "p99 latency (ms)"), ("ttft_p99", "TTFT p99 (ms)"), ("tpot_p99", "TPOT p99 (ms)")):
            if name not in c.names:
                continue
            chart = Chart(f"{heading.split(' (')[0]} vs {load_name}", load_name, heading)
            chart.series = [Series(k, k, *_xy(pairs, name)) for k, _, pairs in loads]
            if name == "latency_p99":
                chart.bounds = [(k, b, f"{k} latency bound {b:g} ms") for k, _, pairs in loads
                                if (b := _bound([p for _, p in pairs])) is not None]
            charts.append(chart)
    if load_name == "target_qps":
        av = Chart("achieved vs target rate", "target (QPS)", "completed (samples/s)")
        av.series = [Series(k, k, *_xy(pairs, "throughput")) for k, _, pairs in loads]
        charts.append(av)
    # B over A at each matched point, against the point's load on A (or its order)
    ratio = Chart("B/A at the matched points", load_name if load_name != "completed/s" else "point (A's order)", "B / A",
                  ratio=True)
    matched = c.matched
    for name in c.names:
        xs, ys = [], []
        for i, pair in enumerate(matched):
            a, b = figure(pair.a, name), figure(pair.b, name)
            x = _load_of(pair.a, load_name, i)
            if a and b is not None and x is not None:
                xs.append(x)
                ys.append(b / a)
        if xs:
            order = sorted(range(len(xs)), key=xs.__getitem__)
            ratio.series.append(Series("B", HEADINGS[name], [xs[i] for i in order], [ys[i] for i in order]))
    charts.append(ratio)
    return charts


def _load_of(point: dict[str, Any] | None, load_name: str, i: int) -> float | None:
    if point is None:
        return None
    if load_name == "target_qps":
        return point.get("target_qps")
    if load_name == "completed/s":
        return float(i)
    try:
        return float((point.get("values") or {}).get(load_name))
    except (TypeError, ValueError):
        return float(i)


def _bound(points: list[dict[str, Any]]) -> float | None:
    """The latency bound of a side's points, when they share one."""
    bounds = {p.get("latency_bound_ms") for p in points} - {None}
    return bounds.pop() if len(bounds) == 1 else None


def _capacity_charts(c: SweepComparison) -> list[Chart]:
    lat = Chart("capacity tries: p99 latency vs target rate (x: failed)", "target (QPS)", "p99 latency (ms)")
    done = Chart("capacity tries: achieved vs target rate (x: failed)", "target (QPS)", "completed (samples/s)")
    for k, side in zip("AB", c.sides):
        cap = side.data.get("capacity") or {}
        attainment = (cap.get("settings") or {}).get("attainment")
        tries = [p for p in side.points() if p.get("role") == "try" and p.get("status") == "complete"]
        for passed, style in ((True, "o"), (False, "x")):
            pairs = [(p.get("target_qps"), p) for p in tries if verdict(p, attainment)[0] == passed]
            what = "pass" if passed else "fail"
            lat.series.append(Series(k, f"{k} {what}", *_xy(pairs, "latency_p99"), style))
            done.series.append(Series(k, f"{k} {what}", *_xy(pairs, "throughput"), style))
        if (bound := _bound(tries)) is not None:
            lat.bounds.append((k, bound, f"{k} latency bound {bound:g} ms"))
        lo, hi = (list(cap.get("bracket_qps") or [None, None]) + [None, None])[:2]
        for chart in (lat, done):
            if cap.get("capacity_qps"):
                chart.lines.append((k, float(cap["capacity_qps"]), f"{k} capacity {rate(cap['capacity_qps'])} QPS"))
            if lo is not None and hi is not None:
                chart.spans.append((k, float(lo), float(hi)))
    return [lat, done]


def charts(c: SweepComparison) -> list[Chart]:
    """Every overlay the comparison supports (a chart with no series of two points is left out)."""
    drawn = _capacity_charts(c) if c.capacity is not None else _sweep_charts(c)
    return [ch for ch in drawn if any(len(s.xs) >= (1 if s.style in ("o", "x") else 2) for s in ch.series)]


def draw(chart: Chart) -> str:
    """One chart as a PNG data URI (the run plots' canvas and encoder)."""
    from matplotlib.figure import Figure

    from harness.report.plots import _png as png
    from harness.report.plots import room

    fig = Figure(figsize=(5.0, 3.3))
    ax = fig.add_subplot()
    ax.set(title=chart.title, xlabel=chart.xlabel, ylabel=chart.ylabel)
    ax.grid(alpha=0.3)
    for s in chart.series:
        if s.xs:
            color = None if chart.ratio else COLORS[s.side]
            ax.plot(s.xs, s.ys, s.style, color=color, label=s.label)
    if chart.ratio:
        ax.axhline(1.0, color="gray", ls="--", lw=1)
    for side, lo, hi in chart.spans:
        ax.axvspan(lo, hi, color=COLORS[side], alpha=0.15)
    for side, x, label in chart.lines:
        ax.axvline(x, color=COLORS[side], ls=":", lw=1.5, label=label)
    for side, y, label in chart.bounds:
        ax.axhline(y, color=COLORS[side], ls="--", lw=1, label=label)
    # the run plots' limits: latencies and rates from zero, a ratio around its own range,
    # and room above (and right of) the last point
    room(ax, "y", zero=not chart.ratio)
    rate_axis = "/s" in chart.xlabel or "QPS" in chart.xlabel or chart.xlabel == "target_qps"
    room(ax, "x", zero=rate_axis)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return png(fig)


# --- HTML -------------------------------------------------------------------------------------


def render_html(c: SweepComparison) -> str:
    from harness.report.html import _CSS, _e, _section, _table

    title = f"compare {c.kind}s: {c.sides[0].label} (A) vs {c.sides[1].label} (B)"
    parts = [f"<h1>{_e(title)}</h1>", f"<p><b>{_e(c.outcome)}</b></p>",
             "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in sides_lines(c)) + "</ul>"]
    parts.append(_table(capacity_table(c) if c.capacity is not None else points_table(c)))
    parts.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in summary_lines(c)) + "</ul>")
    if c.diffs:
        parts.append(_section("settings that differ", _table(differences_table(c))))
    if c.rules or c.unexpected:
        items = [f"<li>{'FAIL' if fired else 'ok'}: {_e(text)}</li>" for fired, text in rule_lines(c)]
        items += [f"<li>FAIL: differences outside --expect: {_e(', '.join(c.unexpected))}</li>"] if c.unexpected else []
        parts.append(_section("gate", "<ul>" + "".join(items) + "</ul>"))
    figs = "".join(f'<figure><img alt="{_e(ch.title)}" src="{draw(ch)}"></figure>'
                   for ch in charts(c))
    parts.append(_section("curves, A and B overlaid", figs or "<p>too few complete points: no curves</p>"))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def sweep_comparison_text(c: SweepComparison, fmt: str) -> str:
    if fmt == "md":
        return render_markdown(c)
    if fmt == "html":
        return render_html(c)
    if fmt == "json":
        return render_json(c)
    raise ValueError(f"a sweep comparison renders as terminal, {', '.join(FORMATS)}, not {fmt!r}")
