"""A sweep's curves for its HTML report, from sweep.json alone, as inlined PNGs.

One figure per question a sweep answers (throughput vs latency, achieved vs target rate,
TTFT vs input length, TPOT and E2E vs output length and vs concurrency, per-user vs total
output tokens/s, success and goodput vs load, queue share vs load, cost vs load), each drawn
only when at least two complete points carry its figures. The capacity (a dotted vertical
line at capacity_qps) is marked where the x axis is a target rate, the knee (a ringed
point) wherever its point is plotted. Same Agg canvas and PNG encoder as the run plots
(harness.report.plots), so the page stays self-contained.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from harness.analysis.diagnosis import axis_value, complete_points, concurrency_axis, fit, load_order
from harness.report.figures import ms_text
from harness.report.plots import _png as png
from harness.report.plots import HEADROOM, room

Plot = tuple[str, str]  # (caption, data URI)
Point = dict[str, Any]


def _m(key: str) -> Callable[[Point], float | None]:
    return lambda p: (p.get("metrics") or {}).get(key)


def _xy(pairs: list[tuple[float, Point]], get: Callable[[Point], float | None]) -> tuple[list[float], list[float], list[Point]]:
    kept = [(x, y, p) for x, p in pairs if x is not None and (y := get(p)) is not None]
    kept.sort(key=lambda t: t[0])
    return [t[0] for t in kept], [float(t[1]) for t in kept], [t[2] for t in kept]


#: two figures side by side fit the report's 1100 px column
SIZE = (5.0, 3.3)


def _ls(data: dict[str, Any]) -> str:
    """Points joined by a line along a sweep; a search's tries stand alone (several at one
    rate, in the order bisection chose them: a line through them would draw a zigzag)."""
    return "-" if data.get("kind") == "sweep" else ""


def _axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=SIZE, layout="constrained")
    ax = fig.add_subplot()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _mark_knee(ax: Axes, data: dict[str, Any], xs: list[float], ys: list[float], pts: list[Point]) -> None:
    k = data.get("knee")
    for x, y, p in zip(xs, ys, pts):
        if p.get("index") == k:
            ax.scatter([x], [y], s=160, facecolors="none", edgecolors="#d62728", lw=1.5, zorder=5, label=f"knee (point {k})")


def _mark_capacity(ax: Axes, data: dict[str, Any]) -> None:
    c = (data.get("capacity") or {}).get("capacity_qps")
    if c:
        ax.axvline(c, color="#2ca02c", ls=":", lw=1.5, label=f"capacity {ms_text(c)} QPS")


def _finish(fig: Figure, ax: Axes) -> str:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return png(fig)


def throughput_latency(data: dict[str, Any]) -> Plot | None:
    pairs = [(p.get("completed_per_s"), p) for p in complete_points(data)]
    xs, p50, pts = _xy(pairs, _m("latency_p50"))
    xs99, p99, pts99 = _xy(pairs, _m("latency_p99"))
    if len(xs) < 2:
        return None
    fig, ax = _axes("throughput vs latency", "completed (samples/s)", "latency (ms)")
    ax.plot(xs, p50, "o" + _ls(data), label="p50")
    ax.plot(xs99, p99, "s" + _ls(data), label="p99")
    bounds = {p.get("latency_bound_ms") for p in pts} - {None}
    if len(bounds) == 1:
        ax.axhline(bounds.pop(), color="gray", ls="--", lw=1, label="latency bound")
    _mark_knee(ax, data, xs99, p99, pts99)
    _mark_capacity(ax, data)  # a target rate, close to the completed one below saturation
    _latency_scale(ax, p50 + p99)
    room(ax, "x")  # a rate: from zero
    return "throughput vs latency (p50, p99)", _finish(fig, ax)


def _latency_scale(ax: Axes, ys: list[float]) -> None:
    """Log when latencies span over 30x (a few ms below the knee, hundreds past it: on a
    linear axis every point before the knee lies on zero); else from zero."""
    lo = min((y for y in ys if y > 0), default=0.0)
    if lo > 0 and max(ys) > 30 * lo:
        ax.set_yscale("log")
    room(ax, "y")  # headroom above the highest point either way


def achieved_vs_target(data: dict[str, Any]) -> Plot | None:
    pairs = [(p.get("target_qps"), p) for p in complete_points(data)]
    xs, done, pts = _xy(pairs, lambda p: p.get("completed_per_s"))
    if len(xs) < 2:
        return None
    fig, ax = _axes("achieved vs target rate", "target (QPS)", "samples/s")
    ax.plot([0, max(xs)], [0, max(xs)], color="gray", ls="--", lw=1, label="achieved = target")
    ax.plot(xs, done, "o" + _ls(data), label="completed")
    _mark_knee(ax, data, xs, done, pts)
    _mark_capacity(ax, data)
    room(ax, "x")  # both rates: from zero
    room(ax, "y")
    return "achieved vs target rate", _finish(fig, ax)


def _fit_line(ax: Axes, xs: list[float], ys: list[float], per: str) -> None:
    """The least-squares line the diagnosis fits (harness.analysis.diagnosis.fit), drawn
    only where a law is expected, so its a and b can be read off the legend."""
    if len(set(xs)) < 2:
        return
    a, b, _ = fit(xs, ys)
    lo, hi = min(xs), max(xs)
    sign = "+" if b >= 0 else "−"
    ax.plot([lo, hi], [a + b * lo, a + b * hi], color="gray", ls=":", lw=1,
            label=f"p50 fit {ms_text(a)} {sign} {ms_text(abs(b))} ms × {per}")


def ttft_vs_input(data: dict[str, Any]) -> Plot | None:
    pairs = [(p.get("input_tokens_mean"), p) for p in complete_points(data)]
    xs, p50, _ = _xy(pairs, _m("ttft_p50"))
    if len(set(xs)) < 2:
        return None
    xs99, p99, _ = _xy(pairs, _m("ttft_p99"))
    fig, ax = _axes("time to first token vs input length", "input tokens (mean)", "TTFT (ms)")
    ax.plot(xs, p50, "o" + _ls(data), label="p50")
    ax.plot(xs99, p99, "s" + _ls(data), label="p99")
    _fit_line(ax, xs, p50, "input tokens")
    room(ax, "y")
    return "TTFT vs input length", _finish(fig, ax)


def _tpot_e2e(pairs: list[tuple[float, Point]], xlabel: str, title: str, law: str, per: str) -> Plot | None:
    """TPOT (left) and E2E (right) against one axis; `law` ("tpot" or "e2e") gets the fit."""
    xt, tpot, _ = _xy(pairs, _m("tpot_p50"))
    xe, e2e, _ = _xy(pairs, _m("latency_p50"))
    if len(set(xt)) < 2 and len(set(xe)) < 2:
        return None
    fig = Figure(figsize=(2 * SIZE[0], SIZE[1]), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    for ax, xs, ys, key, ylabel, name in (
        (ax1, xt, tpot, "tpot_p99", "TPOT (ms/token)", "tpot"),
        (ax2, xe, e2e, "latency_p99", "E2E latency (ms)", "e2e"),
    ):
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        if len(set(xs)) >= 2:
            x99, y99, _ = _xy(pairs, _m(key))
            ax.plot(xs, ys, "o-", label="p50")
            ax.plot(x99, y99, "s-", label="p99")
            if name == law:
                _fit_line(ax, xs, ys, per)
            room(ax, "y")
            ax.legend(fontsize=8)
    fig.suptitle(title)
    return title, png(fig)


def by_output_length(data: dict[str, Any]) -> Plot | None:
    pairs = [(p.get("output_tokens_mean"), p) for p in complete_points(data)]
    return _tpot_e2e(pairs, "output tokens (mean)", "TPOT and E2E vs output length", "e2e", "output tokens")


def by_concurrency(data: dict[str, Any]) -> Plot | None:
    axis = concurrency_axis(data)
    if axis is None:
        return None
    pairs = [(x, p) for p in complete_points(data) if (x := axis_value(p, axis)) is not None]
    return _tpot_e2e(pairs, axis, f"TPOT and E2E vs {axis}", "tpot", axis)


def per_user_vs_total(data: dict[str, Any]) -> Plot | None:
    """The Pareto front users size a deployment by: each user's decode speed (1000 / TPOT
    p50) against the whole system's output tokens/s."""
    pairs = [(_m("output_tokens_per_s")(p), p) for p in complete_points(data)]
    xs, per_user, pts = _xy(pairs, lambda p: 1000.0 / t if (t := _m("tpot_p50")(p)) else None)
    if len(xs) < 2:
        return None
    fig, ax = _axes("per-user vs total output tokens/s", "total output tokens/s", "per-user tokens/s (1000 / TPOT p50)")
    ax.plot(xs, per_user, "o" + _ls(data))
    for x, y, p in zip(xs, per_user, pts):
        ax.annotate(str(p["index"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    _mark_knee(ax, data, xs, per_user, pts)
    # both rates from zero: 99.45 and 99.63 tokens/s on a 99.4-99.7 axis read as a collapse
    room(ax, "x")
    room(ax, "y")
    return "per-user vs total output tokens/s (labels: point index)", _finish(fig, ax)


def _vs_load(data: dict[str, Any], get: Callable[[Point], float | None], title: str, ylabel: str,
             label: str, extra: tuple[Callable[[Point], float | None], str] | None = None,
             percent: bool = False, interval: Callable[[Point], list[float] | None] | None = None) -> Plot | None:
    name, pairs = load_order(data)
    xs, ys, pts = _xy(pairs, get)
    if len(xs) < 2:
        return None
    fig, ax = _axes(title, name, ylabel)
    line = ax.plot(xs, ys, "o" + _ls(data), label=label)[0]
    lowest = min(ys)
    if interval is not None:  # each point's 95 % interval, as a bar: a drop inside it is noise
        bars = [(x, y, ci) for x, y, p in zip(xs, ys, pts, strict=True) if (ci := interval(p))]
        if bars:
            lo = [max(0.0, ci[0]) for _, _, ci in bars]
            hi = [min(100.0, ci[1]) if percent else ci[1] for _, _, ci in bars]
            ax.errorbar([b[0] for b in bars], [b[1] for b in bars], capsize=3, fmt="none", color=line.get_color(),
                        yerr=[[y - low for (_, y, _), low in zip(bars, lo, strict=True)],
                              [high - y for (_, y, _), high in zip(bars, hi, strict=True)]], label="95% CI")
            lowest = min(lowest, *lo)
    if extra is not None:
        xe, ye, _ = _xy(pairs, extra[0])
        if len(xe) >= 2:
            ax.plot(xe, ye, "s" + _ls(data), label=extra[1])
            lowest = min(lowest, *ye)
    _mark_knee(ax, data, xs, ys, pts)
    if name == "target_qps":
        _mark_capacity(ax, data)
    room(ax, "x", zero=name == "target_qps")  # a target rate from zero
    room(ax, "y")
    if percent and lowest > 5.0:
        # a share near 100 % is read closer up (99.5 against 100), and the label says so;
        # 5 points below the lowest: a flat 100 % is not drawn as a band from 96 to 104 %
        bottom, top = lowest - 5.0, ax.dataLim.y1
        ax.set_ylim(bottom, top + HEADROOM * (top - bottom))
        ax.set_ylabel(f"{ylabel} (axis from {bottom:.4g})")
    return title, _finish(fig, ax)


def success_vs_load(data: dict[str, Any]) -> Plot | None:
    goodput = lambda p: None if p.get("goodput_rate") is None else 100.0 * p["goodput_rate"]  # noqa: E731
    return _vs_load(data, _m("success_rate"), "success rate and goodput vs load", "% of requests", "succeeded",
                    (goodput, "met every SLO (goodput)"), percent=True)


def accuracy_vs_load(data: dict[str, Any]) -> Plot | None:
    """The answers' score at each point (ROUGE-1, else exact match): the curve that shows a
    server degrading its answers when it is busy."""
    figures = {(p.get("text_accuracy") or {}).get("figure") for p in data.get("points") or []} - {None}
    if len(figures) != 1:
        return None
    figure = figures.pop()
    label = {"rouge1": "ROUGE-1", "accuracy": "exact match (%)"}.get(figure, figure)
    return _vs_load(data, lambda p: (p.get("text_accuracy") or {}).get("value"), "answers' accuracy vs load",
                    label, label, percent=True, interval=lambda p: (p.get("text_accuracy") or {}).get("ci95"))


def queue_vs_load(data: dict[str, Any]) -> Plot | None:
    share = lambda p: None if p.get("queue_share") is None else 100.0 * p["queue_share"]  # noqa: E731
    if any(p.get("backlog") for p in data["points"]):  # a closed loop's: the harness's own backlog
        return _vs_load(data, share, "backlog share of latency vs load", "% of mean latency in the backlog",
                        "backlog (harness-held)")
    return _vs_load(data, share, "queue share of latency vs load", "% of mean latency spent queued", "queue share")


def cost_vs_load(data: dict[str, Any]) -> Plot | None:
    return _vs_load(data, lambda p: p.get("cost_per_success"), "cost per successful task vs load",
                    "cost (the price sheet's currency)", "per success")


PLOTS = (throughput_latency, achieved_vs_target, ttft_vs_input, by_output_length, by_concurrency,
         per_user_vs_total, success_vs_load, accuracy_vs_load, queue_vs_load, cost_vs_load)


def sweep_plots(data: dict[str, Any]) -> list[Plot]:
    """Every figure the sweep's points support, in PLOTS' order."""
    return [plot for draw in PLOTS if (plot := draw(data)) is not None]
