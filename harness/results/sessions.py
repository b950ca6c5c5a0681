"""summary.json's `sessions`: a multi-turn run's figures by turn index and by session.

Each turn is one record (records.parquet) and one tokens.jsonl entry, which names its
session and turn (harness.child.sessions). Per-turn figures count from dispatch: LoadGen's
latencies count from its one Offline issue and so include the time a turn was held for
its predecessor and the think time. A session fails when one of its turns fails; its
later turns are not sent (reason `session_failed`), and the first failed turn is named.
A turn whose answer's tool calls the mocked tool ran carries `tool_delay_ms`: the gap to
the next turn's dispatch is a tool step (its delay, and the gap measured), not a think gap.
A user-centric run's turns carry the tick they were paced for (`paced_ns`): `pacing` says
how late turns left against it, how many waited for their previous answer, and the
shortest start-to-start gap of a user's turns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.results.records import Records
from harness.results.stats import distribution

NS_PER_MS = 1e6
#: said beside LoadGen's figures for a session run
LOADGEN_NOTE = ("LoadGen's latencies count from its Offline issue of every turn and include the time a turn was "
                "held (its previous turn and the think time); the per-turn figures count from dispatch")


def _p(values: np.ndarray) -> dict[str, float | None]:
    d = distribution(values / NS_PER_MS, percentiles=(50, 99))
    return {"p50": d["p50"], "p99": d["p99"]}


def session_summary(records: Records | None, entries: list[dict[str, Any]],
                    settings: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """None for a run without session turns. `settings`: run.yaml's `sessions`."""
    tagged = {int(e["query_id"]): e for e in entries if "session" in e and "turn" in e}
    if records is None or not len(records) or not tagged:
        return None
    c = records.columns
    rows = [i for i, q in enumerate(c["query_id"]) if int(q) in tagged]
    qid = c["query_id"]
    sess = [tagged[int(qid[i])]["session"] for i in rows]
    turn = np.array([int(tagged[int(qid[i])]["turn"]) for i in rows])
    cached = np.array([float(tagged[int(qid[i])].get("cached_tokens") or 0) if tagged[int(qid[i])].get("cached_tokens")
                       is not None else np.nan for i in rows])
    idx = np.array(rows)
    ok = c["status"][idx] == "ok"
    dispatch, first, done = c["dispatch_ns"][idx], c["first_token_ns"][idx], c["complete_ns"][idx]
    n, inp = c["n_tokens"][idx], c["input_tokens"][idx]
    errors = c["error"][idx]
    tool_delay = np.array([float(tagged[int(qid[i])].get("tool_delay_ms", np.nan)) for i in rows])
    tool_calls = np.array([len(tagged[int(qid[i])].get("tool_calls") or ()) for i in rows])
    paced = np.array([int(tagged[int(qid[i])].get("paced_ns", -1)) for i in rows], dtype=np.int64)
    waited = np.array([bool(tagged[int(qid[i])].get("paced_waited")) for i in rows])

    by_turn = []
    for k in range(int(turn.max()) + 1):
        at = turn == k
        good = at & ok & (first > 0)
        multi = good & (n > 1)
        with_cache = at & ok & ~np.isnan(cached)
        by_turn.append({
            "turn": k, "requests": int(at.sum()), "succeeded": int((at & ok).sum()),
            "ttft_ms": _p((first - dispatch)[good]),
            "tpot_ms": _p(((done - first)[multi] / (n[multi] - 1)).astype(float)),
            "input_tokens_mean": float(inp[at & ok].mean()) if (at & ok).any() else None,
            "cached_tokens_mean": float(cached[with_cache].mean()) if with_cache.any() else None,
        })

    order: dict[str, list[int]] = {}
    for j, s in enumerate(sess):
        order.setdefault(s, []).append(j)
    durations, think_gaps, tool_gaps, failed = [], [], [], []
    starts = []  # user-centric: a user's start-to-start gaps
    spans: list[tuple[int, int]] = []
    for s, js in order.items():
        js.sort(key=lambda j: turn[j])
        sent = [j for j in js if dispatch[j] > 0 and not str(errors[j]).startswith("session_failed")]
        if sent:
            spans.append((int(min(dispatch[j] for j in sent)), int(max(done[j] for j in sent))))
        bad = [j for j in js if not ok[j]]
        if bad:
            first_bad = bad[0]
            failed.append({"session": s, "turn": int(turn[first_bad]), "reason": str(errors[first_bad])})
        else:
            durations.append(done[js[-1]] - dispatch[js[0]])
        for a, b in zip(js, js[1:], strict=False):
            if ok[a] and b in sent:
                (think_gaps if np.isnan(tool_delay[a]) else tool_gaps).append(dispatch[b] - done[a])
                if paced[b] >= 0:
                    starts.append(dispatch[b] - dispatch[a])
    # the most sessions open at once, from their first dispatch to their last answer
    edges = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans], key=lambda e: (e[0], e[1]))
    open_now = open_max = 0
    for _, step in edges:
        open_now += step
        open_max = max(open_max, open_now)
    return {
        "count": len(order),
        "completed": len(order) - len(failed),
        "failed": failed,
        "turns": len(rows),
        "turns_completed": int(ok.sum()),
        "turns_not_sent": int(sum(str(e).startswith("session_failed") for e in errors)),
        "duration_ms": _p(np.array(durations, dtype=float)),
        "think_gap_ms": {"min": float(min(think_gaps)) / NS_PER_MS if think_gaps else None,
                         **_p(np.array(think_gaps, dtype=float))},
        "open_max": open_max,
        "tool_steps": _tool_steps(tool_delay, tool_calls, tool_gaps),
        "pacing": _pacing(settings or {}, paced, dispatch, starts, waited),
        "by_turn": by_turn,
        "loadgen_note": LOADGEN_NOTE,
    }


def _pacing(settings: dict[str, Any], paced: np.ndarray, dispatch: np.ndarray, starts: list[int],
            waited: np.ndarray) -> dict[str, Any] | None:
    """User-centric pacing, kept or not: the offered rate and each user's gap, the turns
    sent against a tick, how late they left after it (the harness's own lag: a tick is
    moved to the previous answer when that came later), how many ticks were so moved (the
    server's time, not the harness's), the shortest start-to-start gap of a user's turns,
    and the rate achieved."""
    rate = settings.get("user_centric_rate")
    sent = (paced >= 0) & (dispatch > 0)
    if not rate or not sent.any():
        return None
    late = distribution(((dispatch - paced)[sent]).astype(float) / NS_PER_MS, percentiles=(50, 99))
    t = np.sort(dispatch[sent])
    return {"mode": "user_centric", "rate_per_s": float(rate), "gap_s": settings.get("users", 1) / float(rate),
            "turns": int(sent.sum()), "waited_for_answer": int((waited & sent).sum()),
            "late_ms": {"p50": late["p50"], "p99": late["p99"], "max": late["max"]},
            "start_gap_min_ms": float(min(starts)) / NS_PER_MS if starts else None,
            "achieved_per_s": (len(t) - 1) / ((t[-1] - t[0]) / 1e9) if len(t) > 1 and t[-1] > t[0] else None}


def _tool_steps(delay_ms: np.ndarray, calls: np.ndarray, gaps: list[int]) -> dict[str, Any]:
    """The mocked tool's steps: how many answers' tool calls it ran (and how many calls),
    the delays it drew, and the gaps measured from those answers to the next turn's
    dispatch (each at least its delay: the hold re-checks the clock)."""
    ran = ~np.isnan(delay_ms)
    d = distribution(delay_ms[ran], percentiles=(50, 99))
    return {"count": int(ran.sum()), "calls": int(calls[ran].sum()),
            "delay_ms": {"p50": d["p50"], "p99": d["p99"]},
            "gap_ms": {"min": float(min(gaps)) / NS_PER_MS if gaps else None, **_p(np.array(gaps, dtype=float))}}
