"""Runs of tensor backends sized from a pilot when the user gave LoadGen no hint (Offline,
and the expected latency of SingleStream and MultiStream).

LoadGen's Offline query holds 1.1 x offline_expected_qps x min_duration samples. Left at
LoadGen's default (1 sample/s) the query is a hundred-odd samples, over in milliseconds,
and the run INVALID (too short) whatever the system; a hint copied from an INVALID run's
rate is still short, since that rate included the start-up. So when a timed Offline run
has no `offline_expected_qps` (and no conf file that could set it), the harness first runs
a pilot of the same config (an ordinary run in its own process, in a folder it then
removes), and sets the hint to the pilot's rate x MARGIN: at the pilot's rate the timed
query then lasts 1.1 x 1.5 = 1.65 x min_duration, so it stays long enough when the timed
run is up to 1.65 x faster than the pilot. The value used is the run's
`offline_expected_qps` in run.yaml (so `harness run -c run.yaml` repeats it with no pilot),
and the manifest's `sizing` says how it was found.

A pilot is short, and on a shared machine a burst can slow it more than the margin covers
(a timed run at 604,971 samples/s ran out of a query sized from its pilot, seen in CI). A
timed run that then ends before min_duration, and for nothing else, is itself the better
pilot: `resize` sizes the config again from its figure, as the INVALID run's fix line says,
and the runner runs it once more.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.run_config import RunConfig
from harness.errors import HarnessError, RunError
from harness.results.explain import FIX_MARGIN

MARGIN = 1.5
#: samples of the first Offline pilot: enough to pass start-up
FIRST_PILOT = 512
#: queries of a SingleStream/MultiStream pilot: one at a time, so fewer
FIRST_LATENCY_PILOT = 64
#: a first pilot shorter than this measured start-up more than throughput: a second pilot
#: then runs about SECOND_PILOT_S at the first one's rate
TRUST_S = 0.25
SECOND_PILOT_S = 1.0
MAX_PILOT_SAMPLES = 1 << 22

#: runs one config into a folder under a root: harness.run.runner.run, given by its caller
#: so that this module does not import the runner that imports it
RunFn = Callable[[RunConfig, Path], Any]


class _Stopped(Exception):
    """A stop signal came during a pilot: the command stops, no timed run starts."""


#: the hint LoadGen sizes each scenario's test from, when the user gave none
HINTS = {"Offline": "offline_expected_qps", "SingleStream": "single_stream_expected_latency_ms",
         "MultiStream": "multi_stream_expected_latency_ms"}


def needs_sizing(config: RunConfig) -> str | None:
    """The hint to measure for this config, or None when it needs none."""
    key = HINTS.get(config.scenario)
    if (
        key is None
        or config.mode not in ("PerformanceOnly", "SubmissionRun")
        or getattr(config, key) is not None
        or config.min_duration_s == 0  # LoadGen then issues min_query_count samples: nothing to size
        or config.mlperf_conf
        or config.user_conf
    ):
        return None
    return key


def _round_up(x: float) -> float:
    """Two significant figures, rounded up (a hint is a lower bound on the query's length)."""
    if x <= 0:
        return 1.0
    step = 10 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / step) * step


def _round_sig_down(x: float) -> float:
    step = 10 ** (math.floor(math.log10(x)) - 1)
    return math.floor(x / step) * step


def _pilot(config: RunConfig, samples: int, run: RunFn) -> tuple[dict[str, Any], float]:
    """(summary, seconds) of a pilot of `samples` samples (queries) of this config."""
    key = HINTS[config.scenario]
    pilot = config.model_copy(update={"name": f"{config.name[:58]}-pilot", "min_duration_s": 0.0,
                                      "min_query_count": samples, "max_duration_s": None, key: None})
    with tempfile.TemporaryDirectory(prefix="harness-pilot-") as tmp:
        outcome = run(pilot, Path(tmp))
    if outcome.stopped_by:
        raise _Stopped(outcome.stopped_by)
    return outcome.summary, float(outcome.summary["timings_s"].get("test_s") or math.inf)


def size_offline(config: RunConfig, kind: str, run: RunFn) -> tuple[RunConfig, dict[str, Any] | None]:
    """The config with its load hint from a pilot, and how it was found; the config
    unchanged (and None) when it needs none. A pilot that fails in its test leaves the
    config as it is: the timed run then fails the same way, in a folder the user keeps. One
    that cannot start raises its error. `run` runs a pilot.

    Offline: offline_expected_qps = the pilot's rate x MARGIN. SingleStream/MultiStream:
    LoadGen generates min_duration / expected latency queries, too few when the system is
    faster than the hint, so the expected latency = the pilot's p50 / MARGIN."""
    key = needs_sizing(config)
    if key is None or kind != "tensor":
        # A pilot's requests to a server (or a generative model) would warm its prompt
        # cache for the timed run; there the INVALID run's fix, with its margin, says what to set.
        return config, None
    offline = config.scenario == "Offline"
    samples = FIRST_PILOT if offline else FIRST_LATENCY_PILOT
    try:
        summary, took = _pilot(config, samples, run)
        rate = float(summary["loadgen"].get("throughput_per_s") or 0.0)
        if offline and 0 < took < TRUST_S:
            samples = int(min(max(rate * SECOND_PILOT_S, samples), MAX_PILOT_SAMPLES))
            summary, took = _pilot(config, samples, run)
            rate = float(summary["loadgen"].get("throughput_per_s") or 0.0)
    except _Stopped as e:
        raise RunError(f"stopped by {e} while sizing the test from a pilot, before the timed run") from e
    except HarnessError as e:
        if getattr(e, "set_aside", None) is not None:
            # The model or the configuration failed before the pilot's test started, and
            # the timed run would fail the same way (a second child: seconds with torch),
            # so this is the run's error, its attempt set aside where the run's would be.
            raise
        return config, None
    if offline:
        measured = rate
        hint = _round_up(rate * MARGIN) if rate > 0 else None
    else:
        lat = summary["loadgen"].get("latency_ms") or {}
        measured = lat.get("p50")
        hint = _round_sig_down(measured / MARGIN) if measured else None
    if not hint:
        return config, None
    sizing = {key: hint, "measured": measured, "measured_as": "samples/s" if offline else "p50 latency (ms)",
              "pilot_samples": samples, "pilot_s": took, "margin": MARGIN,
              "why": f"no {key} given: sized from a pilot run"}
    return config.model_copy(update={key: hint}), sizing


def ran_out_only(summary: dict[str, Any]) -> bool:
    """The run finished and is INVALID only for ending before min_duration: its hint asked
    LoadGen for too short a test, and a larger one is the whole fix."""
    v = summary["validity"]
    return (summary["status"] == "complete" and v.get("min_duration_met") is False
            and all(v.get(k) is not False for k in ("min_queries_met", "perf_constraints_met", "early_stopping_met"))
            and (v.get("harness") or {}).get("success_rate_ok") is not False)


def resize(config: RunConfig, sizing: dict[str, Any] | None,
           summary: dict[str, Any]) -> tuple[RunConfig, dict[str, Any]] | None:
    """The config sized again from a timed run that ran out (its rate x FIX_MARGIN, its p50 /
    FIX_MARGIN: the fix its summary states), and the sizing that says so; None when the hint
    was not the harness's to change (`sizing` None: the user's, or a conf file's), the run
    was already a second try, or it did not run out."""
    if sizing is None or "first_try" in sizing or not ran_out_only(summary):
        return None
    key = HINTS[config.scenario]
    old = getattr(config, key)
    ours = summary["harness"]
    if config.scenario == "Offline":
        measured = ours.get("throughput_per_s") or 0.0
        hint = _round_up(measured * FIX_MARGIN) if measured > 0 else None
        larger = hint is not None and hint > old
    else:
        measured = (ours.get("latency_ms") or {}).get("p50") or 0.0
        hint = _round_sig_down(measured / FIX_MARGIN) if measured > 0 else None
        larger = hint is not None and hint < old  # a lower expected latency: more queries
    if not larger:
        return None
    first_try = {key: old, "measured": measured, "pilot_measured": sizing.get("measured")}
    return config.model_copy(update={key: hint}), {
        **sizing, key: hint, "measured": measured, "margin": FIX_MARGIN,
        "first_try": first_try,
        "why": f"no {key} given: sized from a pilot run; the timed run ran out before min_duration, so sized "
               "again from its own figure"}
