"""A harness-owned schedule (arrivals, a trace) in the reports: its table and its figure,
offered vs achieved load over time with the lag, from summary.json's `schedule` section."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.report.figures import ms_text

Table = tuple[list[str], list[list[str]]]

#: how to read LoadGen's figures (and ours from issue) beside a schedule: one Offline issue
#: started the whole replay (docs/traffic.md)
FROM_ISSUE_NOTE = "from issue (LoadGen's figures, TTFT, queue) includes the scheduled wait"


def timed(section: Any) -> bool:
    """summary.json's `schedule` holds a timed schedule's figures (arrivals, a trace): a
    closed loop's or sessions' section says only whose schedule it was."""
    return isinstance(section, dict) and isinstance(section.get("lag_ms"), dict)


def schedule_table(section: dict[str, Any]) -> Table:
    """Rows of figure and value: what was offered, what left when, and how late."""
    lag = section["lag_ms"]

    def rate(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f}/s"

    rows = [
        ["kind", str(section.get("source") or section.get("kind"))],
        ["requests", f"{section['requests']:,}"],
        ["span (s)", f"{section['span_s']:,.3f}"],
        ["offered", rate(section["offered_per_s"])],
        ["dispatched", rate(section["achieved_per_s"])],
        ["lag p50 / p99 (ms)", f"{ms_text(lag['p50'])} / {ms_text(lag['p99'])}"],
        ["lag max (ms)", ms_text(lag["max"])],
        ["lag limit (ms)", f"{section['lag_limit_ms']:g}" + (" DEGRADED" if section["degraded"] else "")],
    ]
    return ["schedule", "value"], rows


def schedule_plot(section: dict[str, Any]) -> str:
    """Top: requests scheduled and dispatched in each second. Bottom: each second's worst
    lag, against the limit. A late client shows as dispatches trailing the offered load."""
    # here, not at the top: the terminal view imports this module, and matplotlib costs
    # every `harness` command a second on 2 cores
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from harness.report.plots import _png

    per = np.array([[row[0], row[1], row[2], np.nan if row[3] is None else row[3]] for row in section["per_second"]],
                   dtype=np.float64)
    # counts a second as rates; the last second is cut by the span's end: its count over its width
    width = np.ones(len(per))
    tail = section["span_s"] - np.floor(section["span_s"])
    last = int(np.floor(section["span_s"]))
    if 0 < tail and last < len(per):
        width[last] = tail
    edges = np.concatenate([per[:, 0], [per[-1, 0] + width[-1]]])
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    top.stairs(per[:, 1] / width, edges, fill=True, color="#bdbdbd")
    sent = top.stairs(per[:, 2] / width, edges, color="#1f77b4", lw=1.5, label="dispatched")
    top.set(title=f"offered vs dispatched load ({section['kind']})", ylabel="requests/s")
    top.set_ylim(0, max(float((per[:, 1:3] / width[:, None]).max()), 1.0) * 1.15)
    top.grid(alpha=0.3)
    # a filled stairs has no legend patch of its own; above the axes, never over the fill
    fig.legend(handles=[Patch(color="#bdbdbd", label="offered (scheduled)"), sent], fontsize=8, frameon=False,
               loc="outside upper right", ncols=2)
    bottom.plot(per[:, 0] + width / 2, per[:, 3], marker="o", ms=3, lw=1, color="#d62728", label="worst lag that second")
    bottom.axhline(section["lag_limit_ms"], color="black", ls="--", lw=1, label=f"limit {section['lag_limit_ms']:g} ms")
    bottom.set(xlabel="time since the first scheduled request (s)", ylabel="lag (ms)")
    worst = np.nanmax(per[:, 3]) if np.isfinite(per[:, 3]).any() else 0.0
    bottom.set_ylim(0, max(worst, section["lag_limit_ms"]) * 1.15)
    bottom.set_xlim(0, float(edges[-1]))
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=8, frameon=False, loc="upper right")
    return _png(fig)
