"""Figures for the HTML report, drawn offline as PNG and inlined as base64 data URIs.

Figures are built with `matplotlib.figure.Figure` and the Agg canvas directly, never
pyplot: pyplot keeps global figure state, and a report must not depend on a display.
Every figure uses the constrained layout (no label over a neighbour's ticks) and plain
tick labels (1,000 and 0.5, never 1e3 or an offset). Scatter plots are thinned to
`MAX_POINTS` evenly spaced requests so a million-record run still yields a page of a few
hundred kB.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

from harness.report.figures import ms_text
from harness.results.breakdown import STAGES, stage_ns, time_series
from harness.results.records import ok_mask
from harness.results.stats import distribution as plain_distribution
from harness.results.stats import is_sorted
from harness.results.stats import weighted_distribution

MAX_POINTS = 20_000
SIZE = (6.4, 3.6)
_STAGE_COLORS = {"queue": "#d62728", "service": "#1f77b4", "generation": "#2ca02c"}
#: a histogram whose fullest even bin holds more than this share is drawn on log bins
_CROWDED = 0.2


#: room beyond the highest value drawn, as a share of the axis: a marker (the knee's ring,
#: 13 pt across), a point's label or a line is never on the frame (5 % margins from the
#: data's own range shrink to 0.5 % once the axis is stretched down to zero)
HEADROOM = 0.08


class Png(str):
    """A figure's PNG data URI that keeps its Figure: the report embeds the text, and a test
    reads the limits off the very axes that were drawn."""

    figure: Figure


class Plots(NamedTuple):
    figures: list[tuple[str, str]]  # (caption, data URI)
    notes: list[str]  # why a figure the run might have had is not drawn


class _PlainFormatter(ScalarFormatter):
    """Linear ticks as plain digits with thousands separators: no 1e4, no offset."""

    def __init__(self) -> None:
        super().__init__(useOffset=False, useMathText=False)
        self.set_scientific(False)

    def __call__(self, x: float, pos: int | None = None) -> str:
        if abs(x) >= 1000 and float(x).is_integer():
            return f"{x:,.0f}"
        return super().__call__(x, pos)


def _plain_axis(axis: Axis, scale: str, lim: tuple[float, float]) -> None:
    if scale == "log":
        lo, hi = sorted(lim)
        decades = np.log10(hi / lo) if lo > 0 else 9.0
        # 2, 5, 10, 20, 50 on a short log axis: a single labelled tick would not tell the scale
        subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0) if decades <= 1 else (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
        axis.set_major_locator(LogLocator(base=10, subs=subs))
        axis.set_major_formatter(FuncFormatter(lambda v, _: ms_text(v)))
        axis.set_minor_formatter(NullFormatter())
    elif scale == "linear":
        axis.set_major_formatter(_PlainFormatter())


def room(ax: Axes, axis: str = "y", zero: bool = True) -> None:
    """Set one axis's limits from everything drawn on it (ax.dataLim): from zero (a rate, a
    share, a count: a 0.2 % difference must not look like a collapse) unless `zero` is
    False or the data go below it, and HEADROOM of the axis beyond the highest value. On a
    log axis the same share of its decades. Call it after drawing."""
    lo, hi = (ax.dataLim.y0, ax.dataLim.y1) if axis == "y" else (ax.dataLim.x0, ax.dataLim.x1)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return  # nothing drawn
    log = (ax.get_yscale() if axis == "y" else ax.get_xscale()) == "log"
    if log:
        if lo <= 0:
            return  # a log axis has no zero to start from
        factor = (hi / lo) ** HEADROOM if hi > lo else 1.5
        lim = (lo / factor, hi * factor)
    else:
        bottom = min(0.0, lo) if zero else lo
        span = hi - bottom or abs(hi) or 1.0
        lim = (bottom if zero else bottom - HEADROOM * span, hi + HEADROOM * span)
    (ax.set_ylim if axis == "y" else ax.set_xlim)(*lim)


def _png(fig: Figure) -> Png:
    FigureCanvasAgg(fig)
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")
    for ax in fig.axes:
        _plain_axis(ax.xaxis, ax.get_xscale(), ax.get_xlim())
        _plain_axis(ax.yaxis, ax.get_yscale(), ax.get_ylim())
    buf = io.BytesIO()
    # No "Software" tag: it holds a URL, and the page must carry no outside reference.
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    uri = Png("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii"))
    uri.figure = fig
    return uri


def _thin(n: int) -> np.ndarray:
    return np.arange(n) if n <= MAX_POINTS else np.linspace(0, n - 1, MAX_POINTS).astype(np.int64)


def _dots(n: int) -> dict[str, float]:
    """Scatter dots that stay visible for 50 requests and do not blot out 20,000."""
    return {"s": 8, "alpha": 0.7} if n <= 1000 else {"s": 4, "alpha": 0.5} if n <= 10_000 else {"s": 2, "alpha": 0.4}


def _axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=SIZE, layout="constrained")
    ax = fig.add_subplot()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _n_bins(n: int) -> int:
    """2·√n bars, 10 to 60: 50 requests in 60 bars would be a comb of ones."""
    return int(np.clip(2 * np.sqrt(n), 10, 60))


def _crowded(values: np.ndarray, weights: np.ndarray | None, lo: float, hi: float, bins: int = 60) -> bool:
    """Would even bins from lo to hi put most of the mass in a few bars (a long tail)?"""
    if not (lo > 0 and hi > 10 * lo):  # under a decade, log bins spread a spike no wider
        return False
    counts, _ = np.histogram(np.clip(values, lo, hi), bins=bins, range=(lo, hi), weights=weights)
    return float(counts.max()) > _CROWDED * float(counts.sum())


def histogram_bins(values: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """Bin edges from the smallest value to p99.9 (LoadGen's rule), and whether they are
    log-spaced: they are when even bins would crowd one bar (a long tail)."""
    q = _percentiles(values, weights)
    positive = values[values > 0]
    lo = float(positive.min()) if len(positive) else float(values.min())
    hi = q["p99_9"]
    n = _n_bins(len(values))
    if hi <= lo:  # one value: a bar around it
        return np.linspace(lo - 0.5, lo + 0.5, 2), False
    if _crowded(values, weights, lo, hi, n):
        return np.geomspace(lo, hi, n + 1), True
    return np.linspace(float(values.min()), hi, n + 1), False


def _percentiles(values: np.ndarray, weights: np.ndarray | None) -> dict[str, float]:
    if weights is None:  # the tables' rule without weights: a sort (none when sorted already)
        d = plain_distribution(values, percentiles=(50, 99, 99.9))
    else:
        d = weighted_distribution(values, weights, percentiles=(50, 99, 99.9))
    return {k: float(v) for k, v in d.items() if v is not None}


def distribution(values: np.ndarray, xlabel: str, title: str, color: str = "#1f77b4",
                 weights: np.ndarray | None = None, ylabel: str = "requests") -> str:
    """A histogram with p50 and p99 marked at the tables' values (LoadGen's rule, weighted
    when `weights` are given). The tail above p99.9 is folded into the last bin; a long
    tail gets log-spaced bins, or nearly every request would land in the first bar."""
    fig, ax = _axes(title, xlabel, ylabel)
    q = _percentiles(values, weights)
    edges, log = histogram_bins(values, weights)
    if log:
        ax.set_xscale("log")
    folded = bool((values > edges[-1]).any())
    # zeros (tokens that came with the one before) go in the first bin, the tail in the last
    ax.hist(np.clip(values, edges[0], edges[-1]), bins=edges, weights=weights, color=color)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # counts: no 1.5 requests
    room(ax, "y")
    for p, style in (("p50", ":"), ("p99", "--")):
        ax.axvline(q[p], color="black", ls=style, lw=1, label=f"{p} {ms_text(q[p])} ms")
    if folded:
        ax.set_xlabel(f"{xlabel}; above p99.9 in the last bin")
    # below the axes: a flat histogram (Offline's latency) leaves no room inside for it
    fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return _png(fig)


def latency_cdf(e2e_ms: np.ndarray) -> str:
    fig, ax = _axes("latency CDF", "latency (ms)", "fraction of successful requests")
    s = e2e_ms if is_sorted(e2e_ms) else np.sort(e2e_ms)
    idx = _thin(len(s))
    ax.plot(s[idx], (idx + 1) / len(s), lw=1.5)
    q = _percentiles(s, None)
    if histogram_bins(s)[1]:  # the histogram's rule
        ax.set_xscale("log")  # long tails: a linear axis would squash the body of the curve
    for p, style, y in (("p50", ":", 0.5), ("p99", "--", 0.99)):
        v = q[p]
        ax.axvline(v, color="gray", ls=style, lw=1)
        # p99 sits near the right edge: its label goes to the left of its line
        left = p == "p99"
        ax.annotate(f"{p} {ms_text(v)} ms", (v, y), textcoords="offset points", xytext=(-4 if left else 4, -12),
                    ha="right" if left else "left", fontsize=8)
    ax.set_ylim(0, 1 + HEADROOM)  # the curve ends at 1: not on the frame
    return _png(fig)


def latency_over_time(columns: Mapping[str, Any], ok: np.ndarray) -> str:
    issue, complete = columns["issue_ns"], columns["complete_ns"]
    t0 = issue.min()
    fig, ax = _axes("latency over time", "completion time since first issue (s)", "latency (ms)")
    # Only the thinned points become seconds and ms: no float copy of every record.
    ok_idx = np.flatnonzero(ok)[_thin(int(ok.sum()))]
    ax.scatter((complete[ok_idx] - t0) / 1e9, (complete[ok_idx] - issue[ok_idx]) / 1e6, **_dots(len(ok_idx)), label="ok")
    if (~ok).any():  # a legend only when there are two kinds of mark
        bad = np.flatnonzero(~ok)[_thin(int((~ok).sum()))]
        ax.scatter((complete[bad] - t0) / 1e9, (complete[bad] - issue[bad]) / 1e6, s=12, marker="x", color="#d62728",
                   label="failed")
        ax.legend(loc="upper left", fontsize=8)
    return _png(fig)


def time_bins(columns: Mapping[str, Any]) -> int:
    """Bins for the over-time plots: about 20 requests each (fewer and a rate is mostly
    Poisson noise), but at least 10, so a long run with few requests still shows its course
    (not 5 bars for 208 s), and at most 60."""
    n = len(columns["issue_ns"])
    return int(np.clip(n // 20, 10, 60)) if n >= 10 else max(n, 1)


def throughput_over_time(ts: dict[str, np.ndarray], target_per_s: float | None) -> str:
    mid = (ts["edges_s"][:-1] + ts["edges_s"][1:]) / 2
    issued = ts["issued_per_s"]
    # Offline issues every sample at t=0: that one spike (850k/s beside 14k/s served) would
    # scale the axis so the served line lies on zero; it is said in the title instead
    at_once = len(issued) > 1 and issued[0] >= 0.9 * issued.sum()
    title = "throughput over time" + (" (every sample issued at t=0)" if at_once else "")
    fig, ax = _axes(title, "time since first issue (s)", "samples/s")
    if not at_once:
        ax.plot(mid, issued, color="gray", lw=1, label="issued")
    ax.plot(mid, ts["ok_per_s"], lw=1.5, label="succeeded")
    if ts["failed_per_s"].any():
        ax.plot(mid, ts["failed_per_s"], color="#d62728", lw=1, label="failed")
    if target_per_s:
        ax.axhline(target_per_s, color="black", ls="--", lw=1, label=f"target {ms_text(target_per_s)}/s")
    ax.set_xlim(0, float(ts["edges_s"][-1]))
    top = max(float(ts["ok_per_s"].max()), float(ts["failed_per_s"].max()), target_per_s or 0.0,
              0.0 if at_once else float(issued.max()))
    ax.set_ylim(0, top * 1.15 or 1.0)  # from zero, with room above the highest line
    fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)  # off the lines, wherever they dip
    return _png(fig)


def breakdown(ts: dict[str, np.ndarray], bd: dict[str, Any]) -> str:
    """Left: the mean request split into stages. Right: the same split over the run."""
    stages = [s for s in STAGES if not (s == "generation" and bd["service_ends_at"] == "completion")]
    # a closed loop's queue is the backlog the harness holds; its short name fits the panel
    names = {s: "backlog" if (bd.get("labels") or {}).get(s, s) != s else s for s in STAGES}
    fig = Figure(figsize=(9.6, 3.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 2])
    left = 0.0
    for name in stages:
        mean = bd["stages"][name]["mean_ms"] or 0.0
        ax1.barh([0], [mean], height=0.5, left=left, color=_STAGE_COLORS[name], label=f"{names[name]} {ms_text(mean)} ms")
        left += mean
    ax1.set(yticks=[], xlabel="mean latency (ms)", title=f"mean request: {names.get(bd['dominant'], bd['dominant'])} dominates")
    ax1.set_ylim(-0.5, 1.2)
    ax1.legend(loc="upper left", fontsize=8)
    mid = (ts["edges_s"][:-1] + ts["edges_s"][1:]) / 2
    have = ts["ok_count"] > 0  # a bin without completions has no mean, not a zero one
    layers = [ts[f"{s}_mean_ms"][have] for s in stages]
    ax2.stackplot(mid[have], *layers, labels=[names[s] for s in stages], colors=[_STAGE_COLORS[s] for s in stages])
    room(ax2, "y")  # from what the stack drew: its top, whatever the bins held
    ax2.set_xlim(0, float(ts["edges_s"][-1]))  # the throughput plot's time axis
    ax2.set(xlabel="completion time since first issue (s)", ylabel="mean latency (ms)", title="stages over time")
    # below the axes, as the throughput plot's: a stack high at the left would run under it
    fig.legend(*ax2.get_legend_handles_labels(), loc="outside lower right", fontsize=8, ncols=len(stages), frameon=False)
    ax2.grid(alpha=0.3)
    return _png(fig)


def _varies(lengths: np.ndarray) -> bool:
    """Enough distinct lengths for a scatter against them to show a trend, not a strip."""
    return len(np.unique(lengths)) >= 3


def token_plots(columns: Mapping[str, Any], itl: tuple[np.ndarray, np.ndarray] | None, ok: np.ndarray) -> Plots:
    """TTFT and ITL distributions, TTFT vs input length and TPOT vs output length, for
    requests that streamed tokens. `itl` is (values ns, weights in tokens) from tokens.jsonl.

    A scatter against a length every request shared would be one vertical strip: TTFT's is
    left out (its distribution is drawn already), TPOT's becomes TPOT's distribution."""
    ok = ok & (columns["first_token_ns"] > 0)
    if not ok.any():
        return Plots([], [])
    figures: list[tuple[str, str]] = []
    notes: list[str] = []
    ttft = (columns["first_token_ns"] - columns["issue_ns"])[ok] / 1e6
    figures.append(("TTFT distribution", distribution(ttft, "TTFT (ms)", "time to first token (TTFT)", "#9467bd")))
    if itl is not None and len(itl[0]):
        figures.append(("ITL distribution", distribution(
            itl[0] / 1e6, "inter-token latency (ms)", "inter-token latency (ITL), per token", "#8c564b",
            weights=itl[1], ylabel="tokens")))
    else:
        notes.append("no chunk times (tokens.jsonl) in the results folder: no inter-token latency plot")
    n_in = columns["input_tokens"][ok]
    if _varies(n_in):
        idx = _thin(len(ttft))
        fig, ax = _axes("time to first token vs input length", "input tokens", "TTFT (ms)")
        ax.scatter(n_in[idx], ttft[idx], **_dots(len(idx)), color="#9467bd")
        room(ax, "x")  # lengths and times from zero, the longest off the frame
        room(ax, "y")
        figures.append(("TTFT vs input length", _png(fig)))
    else:
        notes.append(f"every request had {_lengths(n_in)} input tokens: no TTFT vs input length plot "
                     "(it would be one vertical strip; TTFT's distribution is above)")
    n_out = columns["n_tokens"][ok]
    multi = n_out > 1  # TPOT needs a second token: (latency - TTFT) / (n - 1)
    if multi.any():
        gen = (columns["complete_ns"] - columns["first_token_ns"])[ok][multi] / 1e6
        tpot = gen / (n_out[multi] - 1)
        if _varies(n_out[multi]):
            idx = _thin(len(tpot))
            fig, ax = _axes("time per output token vs output length", "output tokens", "TPOT (ms/token)")
            ax.scatter(n_out[multi][idx], tpot[idx], **_dots(len(idx)), color="#2ca02c")
            room(ax, "x")
            room(ax, "y")
            figures.append(("TPOT vs output length", _png(fig)))
        else:
            title = f"time per output token ({_lengths(n_out[multi])} output tokens each)"
            figures.append(("TPOT distribution", distribution(tpot, "TPOT (ms/token)", title, "#2ca02c")))
    return Plots(figures, notes)


def _lengths(values: np.ndarray) -> str:
    return " or ".join(f"{v:,}" for v in np.unique(values).tolist())


def all_plots(columns: Mapping[str, Any], bd: dict[str, Any] | None, target_per_s: float | None,
              itl: tuple[np.ndarray, np.ndarray] | None = None) -> Plots:
    """Every figure the records support, and a note for each one left out on purpose."""
    ok = ok_mask(columns)
    figures: list[tuple[str, str]] = []
    if ok.any():
        e2e = stage_ns(columns, "e2e", ok).astype(np.float64)
        e2e /= 1e6
        e2e.sort()  # in place, once: the CDF needs it sorted, the histogram does not mind
        figures += [("latency CDF", latency_cdf(e2e)),
                    ("latency histogram", distribution(e2e, "latency (ms)", "latency histogram"))]
        del e2e
    if len(ok):
        ts = time_series(columns, bins=time_bins(columns), ok=ok)  # one pass for both over-time figures
        figures += [
            ("latency over time", latency_over_time(columns, ok)),
            ("throughput over time", throughput_over_time(ts, target_per_s)),
        ]
        if bd is not None and bd["requests"]:
            queue = "backlog" if (bd.get("labels") or {}).get("queue", "queue") != "queue" else "queue"
            figures.append((f"{queue} vs service breakdown", breakdown(ts, bd)))
    tokens = token_plots(columns, itl, ok)
    return Plots(figures + tokens.figures, tokens.notes)
