"""Whose schedule a run follows, and so where its headline latencies are timed from.

LoadGen owns the schedule of SingleStream, MultiStream and Server: it issues each query at
the time it chose, and its latency from that issue is what a user sees. Where the harness
owns the schedule, LoadGen's issue is not a user's request: a closed loop (`concurrency`)
runs on Offline, where LoadGen issues every sample at t0 and the harness holds the backlog,
starting each request when a slot frees. LoadGen's latency there is mostly the wait in that
backlog (a closed loop of 4 against a 100 ms TTFT: LoadGen-issue TTFT p50 2.4 s). So on a
harness-owned schedule the headline TTFT, TPOT and E2E are timed from dispatch (the request
leaving the harness), and LoadGen's issue-based figures are kept and labelled apart.

`harness_schedule` is the one predicate; summary.json's `schedule` section records its
answer, and every reader (headline, compare, sweep points, breakdown) asks `timed_from_dispatch`.
"""

from __future__ import annotations

from typing import Any

from harness.data.sessions import is_session_spec

#: summary.json `schedule.timed_from`: where the headline latencies start
FROM_DISPATCH, FROM_ISSUE = "dispatch", "issue"

#: what the issue-to-dispatch stage is on a harness-owned schedule: not a server's queue but
#: the samples LoadGen issued at once, which the harness holds until their turn
BACKLOG = "backlog (harness-held)"


def harness_schedule(config: dict[str, Any]) -> str | None:
    """The harness's own schedule of this run (run.yaml's config), in words, or None when
    LoadGen's issue times are the schedule.

    A closed loop (`concurrency: N`), timed arrivals and trace replay (each sample held until
    its time, harness.child.schedule), and multi-turn sessions (each turn held until the
    previous one answered, harness.child.sessions). Other schedules the harness owns join
    here with a branch each, returning their words; every figure that depends on the
    answer follows."""
    dataset = config.get("dataset")
    arrivals = config.get("arrivals")
    if isinstance(arrivals, dict) and arrivals.get("kind"):
        rate = arrivals.get("rate")
        return f"{arrivals['kind']} arrivals" + (f" at {rate:g}/s" if isinstance(rate, (int, float)) else "")
    if isinstance(dataset, str) and dataset.startswith("trace:"):
        return "trace replay"
    if isinstance(dataset, str) and is_session_spec(dataset):
        ses = config.get("sessions") or {}
        users = ses.get("users", 1)
        rate = f", user-centric at {ses['user_centric_rate']:g} turns/s" if ses.get("user_centric_rate") else ""
        return f"sessions, {users} user{'s' if users != 1 else ''} at once{rate}"
    n = config.get("concurrency")
    if n:
        return f"closed loop of {n}"
    return None


def schedule_section(config: dict[str, Any]) -> dict[str, Any]:
    """summary.json's `schedule`: who owns it, in words, and where the headline is timed from
    (a timed schedule's lag joins it: harness.results.schedule_lag)."""
    kind = harness_schedule(config)
    if kind is None:
        return {"owner": "loadgen", "kind": None, "timed_from": FROM_ISSUE}
    return {"owner": "harness", "kind": kind, "timed_from": FROM_DISPATCH}


def timed_from_dispatch(summary: dict[str, Any]) -> bool:
    """The headline of this summary is timed from dispatch. A summary.json written before
    the `schedule` section existed keeps LoadGen's issue-based headline."""
    section = summary.get("schedule")
    return isinstance(section, dict) and section.get("timed_from") == FROM_DISPATCH


def schedule_words(summary: dict[str, Any]) -> str:
    """The harness's schedule in words ("closed loop of 4"); "" when LoadGen's."""
    section = summary.get("schedule")
    return str(section.get("kind") or "") if isinstance(section, dict) else ""
