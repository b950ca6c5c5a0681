"""Service-level objectives per request, their attainment, and goodput.

A run's `slo` setting holds per-request targets (`--set slo.ttft_ms=500`):

    ttft_ms   time to first token  (issue -> first content chunk)
    tpot_ms   time per output token ((E2E - TTFT) / (n - 1); a 1-token answer meets it)
    e2e_ms    whole request        (issue -> completion)

A request is *good* when it succeeded, met every target, and (when its sample has a
validator) its answer was right. Goodput is good requests per second of the run, the
span from the first issue to the last completion, the same span as throughput, so the
two are directly comparable. Attainment per target is over *all* requests: a failed
request met no target, so failures never raise attainment by dropping out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.errors import ConfigError

TARGETS = ("ttft_ms", "tpot_ms", "e2e_ms")


def parse_slo(slo: dict[str, float] | None) -> dict[str, float]:
    """The targets, checked: known keys, positive numbers. {} when none are set."""
    if not slo:
        return {}
    out: dict[str, float] = {}
    for key, value in slo.items():
        if key not in TARGETS:
            raise ConfigError(f"slo.{key}: unknown target; use {', '.join('slo.' + t for t in TARGETS)}")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"slo.{key}: must be a positive number of milliseconds (got {value!r})")
        out[key] = float(value)
    return out


def evaluate(
    targets: dict[str, float],
    ok: np.ndarray,
    ttft_ms: np.ndarray,
    tpot_ms: np.ndarray,
    e2e_ms: np.ndarray,
    valid: np.ndarray,
    validated: bool,
    span_s: float,
) -> dict[str, Any]:
    """Attainment per target and goodput, from per-request arrays of equal length.

    `ttft_ms`/`tpot_ms` hold NaN where undefined (no first token; one token only);
    `valid` is False only where a validator rejected the answer; `validated` says whether
    any answer was checked, so the criterion names the check only when there was one.
    """
    n = len(ok)
    good = ok & valid
    attainment: dict[str, Any] = {}
    values = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "e2e_ms": e2e_ms}
    for key, target in targets.items():
        v = values[key]
        # tpot undefined (a 1-token answer) has no time between tokens to miss the target
        met = ok & ((v <= target) | (np.isnan(v) & (key == "tpot_ms")))
        good &= met
        attainment[key] = {"target": target, "met": int(met.sum()), "rate": float(met.sum()) / n if n else None}
    parts = [f"{k}<={t:g}" for k, t in targets.items()]
    if validated:
        parts.append("answer valid")
    requests = int(good.sum())
    return {
        "targets": dict(targets),
        "attainment": attainment,
        "goodput": {
            "criterion": " and ".join(parts) if parts else "status ok",
            "requests": requests,
            "per_s": requests / span_s if span_s > 0 else None,
            "rate": requests / n if n else None,
        },
    }
