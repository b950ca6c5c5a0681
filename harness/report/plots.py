"""Figures for the HTML report, drawn offline as PNG and inlined as base64 data URIs.

Figures are built with `matplotlib.figure.Figure` and the Agg canvas directly, never
pyplot: pyplot keeps global figure state, and a report must not depend on a display.
Scatter plots are thinned to `MAX_POINTS` evenly spaced requests so a million-record run
still yields a page of a few hundred kB.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.results.breakdown import STAGES, stage_times_ns, time_series
from harness.results.stats import percentile

MAX_POINTS = 20_000
_STAGE_COLORS = {"queue": "#d62728", "service": "#1f77b4", "generation": "#2ca02c"}


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    # No "Software" tag: it holds a URL, and the page must carry no outside reference.
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _thin(n: int) -> np.ndarray:
    return np.arange(n) if n <= MAX_POINTS else np.linspace(0, n - 1, MAX_POINTS).astype(np.int64)


def ms_text(v: float) -> str:
    """3,493 or 1.05 or 0.0123: plain digits, never 3.49e+03."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def latency_cdf(e2e_ms: np.ndarray) -> str:
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    s = np.sort(e2e_ms)
    idx = _thin(len(s))
    ax.plot(s[idx], (idx + 1) / len(s), lw=1.5)
    for p, style in ((50, ":"), (99, "--")):
        v = percentile(s, p)
        ax.axvline(v, color="gray", ls=style, lw=1)
        ax.annotate(f"p{p:g} {ms_text(v)} ms", (v, p / 100), textcoords="offset points", xytext=(4, -12), fontsize=8)
    if s[0] > 0 and s[-1] / s[0] > 20:
        ax.set_xscale("log")  # long tails: a linear axis would squash the body of the curve
    ax.set(xlabel="latency (ms)", ylabel="fraction of successful requests", title="latency CDF")
    ax.grid(alpha=0.3)
    return _png(fig)


def latency_histogram(e2e_ms: np.ndarray) -> str:
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    hi = percentile(np.sort(e2e_ms), 99.9)  # the report's p99.9 (LoadGen's rule), not numpy's interpolation
    lo = float(np.min(e2e_ms))
    bins: Any = 60
    if lo > 0 and hi / lo > 20:
        # a long tail: log-spaced bins, or ~95 % of requests land in the first bar
        bins = np.geomspace(lo, max(hi, lo * 1.001), 61)
        ax.set_xscale("log")
    ax.hist(np.minimum(e2e_ms, hi), bins=bins, color="#1f77b4")
    ax.set(xlabel="latency (ms), tail above p99.9 folded into the last bin", ylabel="requests", title="latency histogram")
    ax.grid(alpha=0.3)
    return _png(fig)


def latency_over_time(columns: dict[str, Any]) -> str:
    t0 = columns["issue_ns"].min()
    ok = columns["status"] == "ok"
    t = (columns["complete_ns"] - t0) / 1e9
    e2e = (columns["complete_ns"] - columns["issue_ns"]) / 1e6
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    ok_idx = np.flatnonzero(ok)[_thin(int(ok.sum()))]
    ax.scatter(t[ok_idx], e2e[ok_idx], s=2, alpha=0.5, label="ok")
    if (~ok).any():
        bad = np.flatnonzero(~ok)[_thin(int((~ok).sum()))]
        ax.scatter(t[bad], e2e[bad], s=12, marker="x", color="#d62728", label="failed")
    ax.set(xlabel="time since first issue (s)", ylabel="latency (ms)", title="latency over time")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def throughput_over_time(columns: dict[str, Any], target_per_s: float | None) -> str:
    ts = time_series(columns)
    mid = (ts["edges_s"][:-1] + ts["edges_s"][1:]) / 2
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    issued = ts["issued_per_s"]
    # Offline issues every sample at t=0: that one spike (850k/s beside 14k/s served) would
    # scale the axis so the served line lies on zero; it is said in the title instead
    at_once = len(issued) > 1 and issued[0] >= 0.9 * issued.sum()
    if not at_once:
        ax.plot(mid, issued, color="gray", lw=1, label="issued")
    ax.plot(mid, ts["ok_per_s"], lw=1.5, label="succeeded")
    if ts["failed_per_s"].any():
        ax.plot(mid, ts["failed_per_s"], color="#d62728", lw=1, label="failed")
    if target_per_s:
        ax.axhline(target_per_s, color="black", ls="--", lw=1, label=f"target {target_per_s:g}/s")
    title = "throughput over time" + (" (every sample issued at t=0)" if at_once else "")
    ax.set(xlabel="time since first issue (s)", ylabel="samples/s", title=title)
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def breakdown(columns: dict[str, Any], bd: dict[str, Any]) -> str:
    """Left: the mean request split into stages. Right: the same split over the run."""
    stages = [s for s in STAGES if not (s == "generation" and bd["service_ends_at"] == "completion")]
    fig = Figure(figsize=(9.6, 3.6))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2]})
    left = 0.0
    for name in stages:
        mean = bd["stages"][name]["mean_ms"] or 0.0
        ax1.barh([0], [mean], height=0.5, left=left, color=_STAGE_COLORS[name], label=f"{name} {mean:.3g} ms")
        left += mean
    ax1.set(yticks=[], xlabel="mean latency (ms)", title=f"mean request: {bd['dominant']} dominates")
    ax1.set_ylim(-0.5, 1.2)
    ax1.legend(loc="upper left", fontsize=8)
    ts = time_series(columns)
    mid = (ts["edges_s"][:-1] + ts["edges_s"][1:]) / 2
    have = ts["ok_count"] > 0  # a bin without completions has no mean, not a zero one
    ax2.stackplot(
        mid[have], *[ts[f"{s}_mean_ms"][have] for s in stages], labels=stages, colors=[_STAGE_COLORS[s] for s in stages]
    )
    ax2.set(xlabel="completion time (s)", ylabel="mean latency (ms)", title="queue vs service over time")
    ax2.legend(loc="upper left", fontsize=8)
    ax2.grid(alpha=0.3)
    return _png(fig)


def token_scatter(columns: dict[str, Any]) -> list[tuple[str, str]]:
    """TTFT vs input length and TPOT vs output length, for requests that streamed tokens."""
    ok = (columns["status"] == "ok") & (columns["first_token_ns"] > 0)
    if not ok.any():
        return []
    out: list[tuple[str, str]] = []
    ttft = (columns["first_token_ns"] - columns["issue_ns"])[ok] / 1e6
    n_in = columns["input_tokens"][ok]
    idx = _thin(len(ttft))
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    ax.scatter(n_in[idx], ttft[idx], s=4, alpha=0.5)
    ax.set(xlabel="input tokens", ylabel="TTFT (ms)", title="time to first token vs input length")
    ax.grid(alpha=0.3)
    out.append(("TTFT vs input length", _png(fig)))
    n_out = columns["n_tokens"][ok]
    multi = n_out > 1  # TPOT needs a second token: (latency - TTFT) / (n - 1)
    if multi.any():
        gen = (columns["complete_ns"] - columns["first_token_ns"])[ok][multi] / 1e6
        tpot = gen / (n_out[multi] - 1)
        idx = _thin(len(tpot))
        fig = Figure(figsize=(6.4, 3.6))
        ax = fig.add_subplot()
        ax.scatter(n_out[multi][idx], tpot[idx], s=4, alpha=0.5, color="#2ca02c")
        ax.set(xlabel="output tokens", ylabel="TPOT (ms/token)", title="time per output token vs output length")
        ax.grid(alpha=0.3)
        out.append(("TPOT vs output length", _png(fig)))
    return out


def all_plots(columns: dict[str, Any], bd: dict[str, Any] | None, target_per_s: float | None) -> list[tuple[str, str]]:
    """(caption, data URI) for every figure the records support."""
    ok = columns["status"] == "ok"
    plots: list[tuple[str, str]] = []
    if ok.any():
        e2e = stage_times_ns(columns)["e2e"][ok] / 1e6
        plots += [("latency CDF", latency_cdf(e2e)), ("latency histogram", latency_histogram(e2e))]
    if len(ok):
        plots += [
            ("latency over time", latency_over_time(columns)),
            ("throughput over time", throughput_over_time(columns, target_per_s)),
        ]
    if bd is not None and bd["requests"]:
        plots.append(("queue vs service breakdown", breakdown(columns, bd)))
    plots += token_scatter(columns)
    return plots
