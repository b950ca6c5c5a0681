"""Checks of a drawn matplotlib Axes that need no eyes: nothing drawn on the top or right
frame, and a rate or share axis from zero unless the plot says from where (tests/report,
tests/run's telemetry plots)."""

from __future__ import annotations

import re

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection

#: the least gap (points) between the data and the frame: a default 6-pt marker's radius; a
#: line closer than that reads as lying on the 0.8-pt frame
CLEAR_PT = 3.0
RATE_OR_SHARE = re.compile(r"/s\b|%|\bQPS\b|\bshare\b|\bfraction\b")
SAYS_WHERE = re.compile(r"\bfrom \d")


def marker_pt(ax: Axes) -> float:
    """The largest marker's radius in points: a line's markersize is its diameter, a
    scatter's size its area (pt²) of a square it fits in."""
    radii = [0.0]
    for line in ax.get_lines():
        if line.get_marker() not in (None, "None", "", " "):
            radii.append((line.get_markersize() + line.get_markeredgewidth()) / 2)
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and len(coll.get_sizes()):
            radii.append(float(np.sqrt(np.max(coll.get_sizes()))) / 2 + float(np.max(coll.get_linewidths(), initial=0)) / 2)
    return max(radii)


def gaps_pt(ax: Axes) -> tuple[float, float]:
    """Points from the highest value drawn to the top frame, and from the rightmost to the right."""
    fig = ax.figure
    fig.canvas.draw()
    x, y = ax.transData.transform((ax.dataLim.x1, ax.dataLim.y1))
    to_pt = 72.0 / fig.dpi
    return (ax.bbox.y1 - y) * to_pt, (ax.bbox.x1 - x) * to_pt


def check_frames(axes: list[tuple[str, Axes]]) -> list[str]:
    bad = []
    for cap, ax in axes:
        if not np.isfinite(ax.dataLim.y1):
            continue  # nothing drawn on it
        need = max(CLEAR_PT, marker_pt(ax))
        top, right = gaps_pt(ax)
        if top < need:
            bad.append(f"{cap} / {ax.get_title()}: {top:.1f} pt above the data, {need:.1f} needed")
        if right < need:
            bad.append(f"{cap} / {ax.get_title()}: {right:.1f} pt right of the data, {need:.1f} needed")
    return bad


def check_zero(axes: list[tuple[str, Axes]]) -> list[str]:
    bad = []
    for cap, ax in axes:
        title = ax.get_title() + " " + (ax.figure.get_suptitle() or "")
        for name, label, lim, scale in (("y", ax.get_ylabel(), ax.get_ylim(), ax.get_yscale()),
                                        ("x", ax.get_xlabel(), ax.get_xlim(), ax.get_xscale())):
            if RATE_OR_SHARE.search(label) and scale == "linear" and not SAYS_WHERE.search(title + " " + label):
                if lim[0] != 0:
                    bad.append(f"{cap}: {name} axis '{label}' starts at {lim[0]:.4g}, not 0")
    return bad
