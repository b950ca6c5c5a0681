"""The telemetry figures of the HTML report, on the records' time axis (seconds since the
first issue), so a server's queue can be read against the client's own in-flight count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from harness.report.plots import Plots, _axes, _png, room
from harness.results.telemetry import host_cpu, server_levels, server_rates

_LABELS = {"queue_depth": "server: waiting", "running": "server: running"}


def _in_flight(columns: Mapping[str, Any], t_ns: np.ndarray) -> np.ndarray:
    """The client's requests in flight at each instant: issued at or before it, not yet complete."""
    issue = np.sort(columns["issue_ns"])
    complete = np.sort(columns["complete_ns"])
    return np.searchsorted(issue, t_ns, side="right") - np.searchsorted(complete, t_ns, side="right")


def _shade_window(ax: Any, columns: Mapping[str, Any], t0: int) -> None:
    ax.axvspan(0, (int(columns["complete_ns"].max()) - t0) / 1e9, color="#eee", zorder=0, label="timed window")


def telemetry_plots(entries: list[dict[str, Any]], columns: Mapping[str, Any] | None, threads: dict[str, str],
                    loop_lag: dict[str, Any] | None = None) -> Plots:
    figures: list[tuple[str, str]] = []
    notes: list[str] = []
    if columns is None or not len(columns["issue_ns"]):
        return Plots([], ["no records: no telemetry plots on the request timeline"] if entries else [])
    t0 = int(columns["issue_ns"].min())
    for url, levels in server_levels(entries).items():
        queue = {k: v for k, v in levels.items() if k in _LABELS}
        if queue:
            fig, ax = _axes("requests at the server and at the client", "time since first issue (s)", "requests")
            _shade_window(ax, columns, t0)
            for concept, (t, v) in queue.items():
                ax.step((np.asarray(t) - t0) / 1e9, v, where="post", lw=1.5, label=_LABELS[concept])
            t = np.asarray(next(iter(queue.values()))[0])
            ax.step((t - t0) / 1e9, _in_flight(columns, t), where="post", lw=1, color="black", ls="--",
                    label="client: in flight")
            room(ax, "y")  # from zero, the highest step off the frame
            fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)
            figures.append((f"server queue vs client in flight ({url})", _png(fig)))
        if "kv_cache_usage" in levels:
            t, v = levels["kv_cache_usage"]
            fig, ax = _axes("KV-cache usage at the server", "time since first issue (s)", "share of KV-cache blocks (%)")
            _shade_window(ax, columns, t0)
            ax.step((np.asarray(t) - t0) / 1e9, np.asarray(v) * 100, where="post", lw=1.5)
            room(ax, "y")  # from zero, the highest step off the frame
            figures.append((f"KV-cache usage ({url})", _png(fig)))
    for url, (t, per_s) in server_rates(entries, "generation_tokens").items():
        if "n_tokens" not in columns or not columns["n_tokens"].any():
            continue
        # the client's tokens, counted at each request's completion, over the same intervals
        edges = np.asarray(t, dtype=np.int64)
        order = np.argsort(columns["complete_ns"])
        done, tokens = columns["complete_ns"][order], np.cumsum(columns["n_tokens"][order])
        at = np.searchsorted(done, edges, side="right")
        counted = np.where(at > 0, tokens[np.maximum(at - 1, 0)], 0)
        client = np.diff(counted) / (np.diff(edges) / 1e9)
        x = (edges - t0) / 1e9
        fig, ax = _axes("generated tokens per second", "time since first issue (s)", "tokens/s")
        _shade_window(ax, columns, t0)
        ax.stairs(per_s, x, lw=1.5, label="server: generation tokens")
        ax.stairs(client, x, lw=1, color="black", ls="--", label="client: tokens of completed requests")
        room(ax, "y")  # from zero, the highest step off the frame
        fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
        figures.append((f"tokens/s, server and client ({url})", _png(fig)))
    cpu = host_cpu(entries, threads)
    if cpu:
        fig, ax = _axes("the load generator's CPU", "time since first issue (s)", "cores")
        _shade_window(ax, columns, t0)
        for name, (t, v) in cpu.items():
            ax.plot((np.asarray(t) - t0) / 1e9, v, lw=1.5 if name == "test process" else 1, label=name)
        ax.axhline(1.0, color="#d62728", ls=":", lw=1, label="one core")
        room(ax, "y")  # from zero, the highest step off the frame
        lag = (loop_lag or {}).get("per_second_max")
        if lag:
            # the event loop's lateness on its own axis: a busy or starved loop runs late
            right = ax.twinx()
            right.step([(t - t0) / 1e9 for t, _ in lag], [v for _, v in lag], where="post", color="#9467bd",
                       lw=1, ls="--", label="event loop lag, worst per second")
            right.set_ylabel("event loop lag (ms)")
            room(right, "y")
        fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
        figures.append(("harness CPU over time", _png(fig)))
    gpus = [e for e in entries if e.get("source") == "gpu" and e.get("ok")]
    if gpus:
        fig, ax = _axes("GPU utilisation and power", "time since first issue (s)", "utilisation (%)")
        _shade_window(ax, columns, t0)
        t = (np.asarray([e["t_ns"] for e in gpus]) - t0) / 1e9
        power = ax.twinx()
        power.set_ylabel("power (W)")
        for i in range(len(gpus[0]["devices"])):
            ax.plot(t, [e["devices"][i].get("util_pct") or 0 for e in gpus], lw=1.5, label=f"GPU {i} util")
            power.plot(t, [e["devices"][i].get("power_w") or 0 for e in gpus], lw=1, ls="--", label=f"GPU {i} power")
        room(ax, "y")  # utilisation is a share, power a rate: both from zero
        room(power, "y")
        figures.append(("GPU over time", _png(fig)))
    return Plots(figures, notes)
