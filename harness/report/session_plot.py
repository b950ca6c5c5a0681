"""A multi-turn run's figure for the HTML report: TTFT and prompt length by turn index, from
summary.json's `sessions.by_turn` (TTFT from dispatch). A working prefix cache shows as a
prompt that grows turn by turn while its cached part grows with it and TTFT stays flat."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.report.plots import Png, _png, room


def _column(rows: list[dict[str, Any]], get: Any) -> np.ndarray:
    """One figure per turn; a turn without it (no success, no cached count) is a gap."""
    return np.array([np.nan if (v := get(r)) is None else float(v) for r in rows], dtype=np.float64)


def turns_plot(section: dict[str, Any]) -> Png:
    """Top: TTFT p50 and p99 by turn. Bottom: the mean input tokens of a turn and, where
    the server reported them, the mean cached tokens."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    rows = section["by_turn"]
    turn = np.array([r["turn"] for r in rows], dtype=np.float64)
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    top.plot(turn, _column(rows, lambda r: r["ttft_ms"]["p50"]), marker="o", ms=4, lw=1.5, color="#1f77b4", label="p50")
    top.plot(turn, _column(rows, lambda r: r["ttft_ms"]["p99"]), marker="s", ms=4, lw=1, ls="--", color="#d62728",
             label="p99")
    top.set(title="TTFT by turn (from dispatch)", ylabel="TTFT (ms)")
    top.grid(alpha=0.3)
    room(top, "y")
    bottom.plot(turn, _column(rows, lambda r: r["input_tokens_mean"]), marker="o", ms=4, lw=1.5, color="#2ca02c",
                label="input tokens")
    cached = _column(rows, lambda r: r["cached_tokens_mean"])
    if np.isfinite(cached).any():
        bottom.plot(turn, cached, marker="^", ms=4, lw=1, color="#9467bd", label="of which cached")
    bottom.set(xlabel="turn", ylabel="tokens (mean a turn)")
    # one legend under the figure: inside either panel it would sit over the data (the
    # highest TTFT and the longest prompt are both at the top right)
    handles = top.get_lines() + bottom.get_lines()
    fig.legend(handles=handles, labels=[f"TTFT {h.get_label()}" if h in top.get_lines() else h.get_label()
                                        for h in handles], fontsize=8, frameon=False, loc="outside lower center",
               ncols=len(handles))
    bottom.grid(alpha=0.3)
    room(bottom, "y")
    # half a turn either side: the first and last turns' markers off the frame
    bottom.set_xlim(-0.5, float(turn.max()) + 0.5)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _png(fig)
