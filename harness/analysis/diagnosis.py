"""A sweep's diagnosis in words, from sweep.json's own numbers (harness.analysis.points).

    diagnose(data) -> [{"finding": "one line", "figures": {the numbers behind it, "rule"}}]

Each finding follows one stated rule over the sweep's complete points, and is said only
when the points show it; a sweep that shows nothing gets no finding. The rules are simple
on purpose (a least-squares line over the points and a threshold on its rise), so a reader
can redo them by hand from the points table; where a law is expected (TTFT = a + b x input
tokens, E2E = a + b x output tokens, TPOT = a + b x concurrency) the finding gives a and b.

"Load" orders the points: target_qps where every point has one (Server), else a
concurrency axis (`concurrency`, `max_in_flight`), else the completed rate.
"""

from __future__ import annotations

from typing import Any

from harness.analysis.points import saturated

#: axes that set how many requests are in flight (a closed loop)
CONCURRENCY_AXES = ("concurrency", "max_in_flight")
#: a figure "grows" when its fitted value at the far end is this many times the near end's
GROWS = 1.5
TPOT_GROWS = 1.2  # TPOT moves less than whole-request times; 20 % is already a real cost
QUEUE_RISE = 0.15  # queue share must rise this much (of latency) ...
QUEUE_HIGH = 0.25  # ... and reach this share at the highest load
SPAN = 2.0  # a length or concurrency axis must span this ratio to fit a law over it
DECODE_MATCH = 1.5  # an E2E slope within this factor of TPOT is decode time
OK_PCT = 99.0  # a success rate at or above it counts as "no failures to speak of"
ACCURACY_DROP = 1.0  # points of ROUGE-1 or exact match: a smaller fall is not called a drop
#: the words of a point's headline text score (points.py `text_accuracy.figure`)
ACCURACY_NAMES = {"rouge1": "ROUGE-1", "accuracy": "exact match"}


def _sig(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.4g}")


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float | None]:
    """Least-squares line y = a + b x: (a, b, R^2); R^2 is None with two points (exact)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    if n < 3:
        return a, b, None
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, (1.0 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def complete_points(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in data["points"] if p.get("role") != "pilot" and p.get("status") == "complete"]


def concurrency_axis(data: dict[str, Any]) -> str | None:
    names = [a.get("name") for a in data.get("axes") or []]
    return next((n for n in CONCURRENCY_AXES if n in names), None)


def axis_value(p: dict[str, Any], axis: str) -> float | None:
    """A point's value on an axis as a number (axis values are kept as --set text)."""
    try:
        return float((p.get("values") or {}).get(axis))
    except (TypeError, ValueError):
        return None


def load_order(data: dict[str, Any]) -> tuple[str, list[tuple[float, dict[str, Any]]]]:
    """(the load's name, [(load, point)] in rising load) over the complete points."""
    pts = complete_points(data)
    if pts and all(p.get("target_qps") for p in pts):
        pairs = [(float(p["target_qps"]), p) for p in pts]
        name = "target_qps"
    elif (axis := concurrency_axis(data)) is not None:
        pairs = [(x, p) for p in pts if (x := axis_value(p, axis)) is not None]
        name = axis
    else:
        pairs = [(float(p["completed_per_s"]), p) for p in pts if p.get("completed_per_s")]
        name = "completed/s"
    return name, sorted(pairs, key=lambda xp: xp[0])


def _metric(p: dict[str, Any], key: str) -> float | None:
    return (p.get("metrics") or {}).get(key)


def _series(points: list[tuple[float, dict[str, Any]]], get: Any) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for x, p in points:
        y = get(p)
        if y is not None:
            xs.append(x)
            ys.append(float(y))
    return xs, ys


def _spans(xs: list[float]) -> bool:
    """Enough spread to fit a line: two distinct values at least SPAN apart (ratio)."""
    return len(set(xs)) >= 2 and min(xs) > 0 and max(xs) / min(xs) >= SPAN


def _law(xs: list[float], ys: list[float], grows: float) -> dict[str, Any] | None:
    """The fitted line when its value at max(x) is at least `grows` x its value at min(x)."""
    if not _spans(xs):
        return None
    a, b, r2 = fit(xs, ys)
    lo, hi = a + b * min(xs), a + b * max(xs)
    if b <= 0 or lo <= 0 or hi < grows * lo:
        return None
    return {"a": _sig(a), "b": _sig(b), "r2": _sig(r2), "x": [_sig(x) for x in xs], "y": [_sig(y) for y in ys]}


def _r2(law: dict[str, Any]) -> str:
    return f"R² {law['r2']:.2f}; " if law.get("r2") is not None else ""


def _queue(data: dict[str, Any]) -> dict[str, Any] | None:
    name, pts = load_order(data)
    if any(p.get("backlog") for _, p in pts):
        # a closed loop's share before dispatch is the backlog LoadGen issued at once: its size
        # is the sample count over N, set by the config, so it says nothing of the system
        return None
    xs, shares = _series(pts, lambda p: p.get("queue_share"))
    if len(xs) < 3 or len(set(xs)) < 3:
        return None
    _, b, _ = fit(xs, shares)
    if b <= 0 or shares[-1] - shares[0] < QUEUE_RISE or shares[-1] < QUEUE_HIGH:
        return None
    _, queue_ms = _series(pts, lambda p: p.get("queue_ms"))
    q = f" ({queue_ms[0]:.3g} → {queue_ms[-1]:.3g} ms mean)" if len(queue_ms) == len(xs) else ""
    return {
        "finding": (
            f"queue time grows with load: {shares[0]:.0%} → {shares[-1]:.0%} of latency{q} from "
            f"{name} {xs[0]:.4g} to {xs[-1]:.4g} → requests wait before dispatch: arrivals outpace "
            "the workers, or requests wait for a free concurrency slot or a batch to fill"
        ),
        "figures": {
            "load": name, "x": [_sig(x) for x in xs], "queue_share": [_sig(s) for s in shares],
            "queue_ms": [_sig(v) for v in queue_ms], "slope": _sig(b),
            "rule": f"least-squares slope of queue share over load > 0, and it rises by ≥ {QUEUE_RISE:.0%} "
                    f"to ≥ {QUEUE_HIGH:.0%} at the highest load (≥ 3 loads)",
        },
    }


def _law_words(figure: str, tokens: str, law: dict[str, Any], xs: list[float]) -> str:
    """'TTFT p50 = a + b ms × input tokens (R², fitted values at the ends of the range)'."""
    lo, hi = min(xs), max(xs)
    return (f"{figure} = {law['a']:.3g} + {law['b']:.3g} ms × {tokens} tokens "
            f"({_r2(law)}{law['a'] + law['b'] * lo:.3g} → {law['a'] + law['b'] * hi:.3g} ms over "
            f"{lo:.0f}–{hi:.0f} tokens)")


def _ttft(data: dict[str, Any]) -> dict[str, Any] | None:
    pts = [(p["input_tokens_mean"], p) for p in complete_points(data) if p.get("input_tokens_mean")]
    xs, ys = _series(pts, lambda p: _metric(p, "ttft_p50"))
    law = _law(xs, ys, GROWS)
    if law is None:
        return None
    xs99, ys99 = _series(pts, lambda p: _metric(p, "ttft_p99"))
    if _spans(xs99):
        a99, b99, _ = fit(xs99, ys99)
        law["p99"] = {"a": _sig(a99), "b": _sig(b99), "y": [_sig(y) for y in ys99]}
    words = "the first token is slow for long inputs: " + _law_words("TTFT p50", "input", law, xs)
    # "only": the tokens after the first do not slow down with the input as well
    _, tpots = _series(sorted(pts, key=lambda xp: xp[0]), lambda p: _metric(p, "tpot_p50"))
    if len(tpots) >= 2 and tpots[-1] < TPOT_GROWS * tpots[0]:
        words += f", while TPOT p50 stays {tpots[0]:.3g} → {tpots[-1]:.3g} ms"
        law["tpot_p50"] = [_sig(t) for t in tpots]
    words += " → prefill / input processing"
    # (a closed loop's TTFT is timed from dispatch: its backlog is not in it)
    share = max(((p.get("queue_share") or 0.0) for _, p in pts if not p.get("backlog")), default=0.0)
    if share >= 0.2:
        # TTFT counts from LoadGen's issue, so a client-side queue is part of it
        words += f" (TTFT includes client queue time: up to {share:.0%} of latency)"
        law["max_queue_share"] = _sig(share)
    law["rule"] = f"TTFT p50 = a + b × input tokens, least squares; fitted TTFT at the longest input ≥ {GROWS}× the shortest's"
    return {"finding": words, "figures": law}


def _e2e_vs_output(data: dict[str, Any]) -> dict[str, Any] | None:
    pts = [(p["output_tokens_mean"], p) for p in complete_points(data) if p.get("output_tokens_mean")]
    xs, ys = _series(pts, lambda p: _metric(p, "latency_p50"))
    law = _law(xs, ys, GROWS)
    if law is None:
        return None
    law["rule"] = (f"E2E p50 = a + b × output tokens, least squares; fitted E2E at the longest output ≥ {GROWS}× "
                   f"the shortest's; decode when b is within {DECODE_MATCH}× of the median TPOT p50")
    words = "completion time grows with output length: " + _law_words("E2E p50", "output", law, xs)
    # Each extra output token costs one TPOT; a slope far from it means something else grew
    # along with the output length (another axis of the sweep, TTFT, the queue).
    _, tpots = _series(pts, lambda p: _metric(p, "tpot_p50"))
    tpot = sorted(tpots)[len(tpots) // 2] if tpots else None
    law["tpot_p50_median"] = _sig(tpot)
    if tpot is None or 1 / DECODE_MATCH <= law["b"] / tpot <= DECODE_MATCH:
        tail = f", as TPOT p50 ({tpot:.3g} ms)" if tpot is not None else ""
        words += f" → decode: {law['b']:.3g} ms per output token{tail}"
    else:
        words += (f", but at {law['b']:.3g} ms a token against a TPOT p50 of {tpot:.3g} ms: decode explains "
                  "only part; other time (TTFT, queue, another axis) grows with it")
    return {"finding": words, "figures": law}


def _tpot_vs_concurrency(data: dict[str, Any]) -> dict[str, Any] | None:
    axis = concurrency_axis(data)
    if axis is None:
        return None
    pts = [(x, p) for p in complete_points(data) if (x := axis_value(p, axis)) is not None]
    xs, ys = _series(pts, lambda p: _metric(p, "tpot_p50"))
    law = _law(xs, ys, TPOT_GROWS)
    if law is None:
        return None
    lo, hi = min(xs), max(xs)
    law["axis"] = axis
    law["rule"] = f"TPOT p50 = a + b × {axis}, least squares; fitted TPOT at the highest {axis} ≥ {TPOT_GROWS}× the lowest's"
    return {
        "finding": (
            f"TPOT grows with concurrency: TPOT p50 = {law['a']:.3g} + {law['b']:.3g} ms × {axis} "
            f"({_r2(law)}{law['a'] + law['b'] * lo:.3g} → {law['a'] + law['b'] * hi:.3g} ms from {lo:.0f} to "
            f"{hi:.0f}) → the server batches the sequences, which share its compute and memory bandwidth"
        ),
        "figures": law,
    }


def _failures(data: dict[str, Any]) -> dict[str, Any] | None:
    name, pts = load_order(data)
    xs, ok = _series(pts, lambda p: _metric(p, "success_rate"))
    if len(xs) < 2 or ok[0] < OK_PCT or ok[-1] >= min(OK_PCT, ok[0] - 1.0):
        return None
    first = next(i for i, v in enumerate(ok) if v < OK_PCT)
    return {
        "finding": (
            f"failures appear at high load: success {ok[0]:.1f} % at {name} {xs[0]:.4g}, "
            f"{ok[first]:.1f} % from {xs[first]:.4g}, {ok[-1]:.1f} % at {xs[-1]:.4g} → memory or server limits "
            "(refusals, timeouts); each failing point's report lists the reasons"
        ),
        "figures": {
            "load": name, "x": [_sig(x) for x in xs], "success_pct": [_sig(v) for v in ok],
            "rule": f"success ≥ {OK_PCT:g} % at the lowest load and below both {OK_PCT:g} % and 1 point less at the highest",
        },
    }


def _saturation(data: dict[str, Any]) -> dict[str, Any] | None:
    name, pts = load_order(data)
    sat = [(x, p) for x, p in pts if saturated(p)]
    if not sat:
        return None
    x, p = sat[0]
    offered, done = p["offered_per_s"], p["completed_per_s"]
    p99, bound = _metric(p, "latency_p99"), p.get("latency_bound_ms")
    broke = p99 is not None and bound is not None and p99 > bound
    tail = f"; p99 {p99:.3g} ms against the {bound:.3g} ms bound" if broke else ""
    cause = "the latency bound breaks because the queue grows for the whole run" if broke else "the queue grows for the whole run"
    return {
        "finding": (
            f"saturated from {name} {x:.4g}: {done:.4g}/s completed of {offered:.4g}/s offered "
            f"({done / offered:.0%}){tail} → the system under test cannot keep up; {cause}"
        ),
        "figures": {
            "load": name, "first_saturated_index": p["index"], "offered_per_s": _sig(offered),
            "completed_per_s": _sig(done), "latency_p99_ms": _sig(p99), "latency_bound_ms": bound,
            "saturated_indices": [q["index"] for _, q in sat],
            "rule": "completed rate below 95 % of the rate LoadGen offered (Server)",
        },
    }


def _accuracy_falls(data: dict[str, Any]) -> dict[str, Any] | None:
    """The answers got worse with load: the first point whose score is ACCURACY_DROP points
    or more below the lowest load's, with 95 % intervals that do not overlap (when both have
    one), named with the point before it and the answers' length at both."""
    name, pts = load_order(data)
    scored = [(x, p["text_accuracy"]) for x, p in pts if (p.get("text_accuracy") or {}).get("value") is not None]
    if len(scored) < 2:
        return None
    figure = scored[0][1]["figure"]
    scored = [(x, t) for x, t in scored if t["figure"] == figure]
    base = scored[0][1]
    for i, (x, t) in enumerate(scored[1:], 1):
        apart = not (base.get("ci95") and t.get("ci95")) or t["ci95"][1] < base["ci95"][0]
        if base["value"] - t["value"] >= ACCURACY_DROP and apart:
            before_x, before = scored[i - 1]
            words = ACCURACY_NAMES.get(figure, figure)
            tokens = ""
            tb, ta = before.get("tokens_per_sample"), t.get("tokens_per_sample")
            if tb is not None and ta is not None:
                trend = "shorter" if ta < tb else "longer" if ta > tb else "as long"
                tokens = f"; answers {trend}, {tb:.4g} → {ta:.4g} tokens per sample"
            return {
                "finding": (
                    f"{words} {before['value']:.4g} → {t['value']:.4g} between {name} {before_x:.4g} and {x:.4g}"
                    f"{tokens} → the answers degrade under load (truncated answers, an output cap, a cache or "
                    "batch that changes results): each point's text_accuracy has the figures"
                ),
                "figures": {
                    "load": name, "figure": figure, "x": [_sig(v) for v, _ in scored],
                    "values": [t2["value"] for _, t2 in scored], "ci95": [t2.get("ci95") for _, t2 in scored],
                    "tokens_per_sample": [t2.get("tokens_per_sample") for _, t2 in scored],
                    "rule": f"≥ {ACCURACY_DROP:g} points below the lowest load's score, 95 % intervals apart",
                },
            }
    return None


# in the order users troubleshoot (issue #15): queueing, input length, output length,
# concurrency, failures, the answers' accuracy, then the saturated points
RULES = (_queue, _ttft, _e2e_vs_output, _tpot_vs_concurrency, _failures, _accuracy_falls, _saturation)


def diagnose(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding the sweep's points support, in RULES' order."""
    return [f for rule in RULES if (f := rule(data)) is not None]
