"""Offline runs sized from a pilot when the user gave LoadGen no hint.

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
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from harness.config.run_config import RunConfig
from harness.errors import HarnessError, RunError

MARGIN = 1.5
#: samples of the first pilot: enough to pass start-up on a tensor backend, few requests
#: to an LLM (each can take seconds)
FIRST_PILOT = {"tensor": 512, "stream": 16}
#: a first pilot shorter than this measured start-up more than throughput: a second pilot
#: then runs about SECOND_PILOT_S at the first one's rate
TRUST_S = 0.25
SECOND_PILOT_S = 1.0
MAX_PILOT_SAMPLES = 1 << 22


class _Stopped(Exception):
    """A stop signal came during a pilot: the command stops, no timed run starts."""


def needs_sizing(config: RunConfig) -> bool:
    return (
        config.scenario == "Offline"
        and config.mode in ("PerformanceOnly", "SubmissionRun")
        and config.offline_expected_qps is None
        and config.min_duration_s != 0  # 0: LoadGen issues min_query_count samples; nothing to size
        and not config.mlperf_conf
        and not config.user_conf
    )


def _round_up(x: float) -> float:
    """Two significant figures, rounded up (a hint is a lower bound on the query's length)."""
    if x <= 0:
        return 1.0
    step = 10 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / step) * step


def _pilot(config: RunConfig, samples: int) -> tuple[float, float]:
    """(samples/s, seconds) of an Offline pilot of `samples` samples of this config."""
    from harness.run import runner

    pilot = config.model_copy(update={"name": f"{config.name[:58]}-pilot", "min_duration_s": 0.0,
                                      "min_query_count": samples, "max_duration_s": None})
    with tempfile.TemporaryDirectory(prefix="harness-pilot-") as tmp:
        outcome = runner.run(pilot, Path(tmp))
    if outcome.stopped_by:
        raise _Stopped(outcome.stopped_by)
    rate = float(outcome.summary["loadgen"].get("throughput_per_s") or 0.0)
    return rate, (samples / rate if rate > 0 else math.inf)


def size_offline(config: RunConfig, kind: str) -> tuple[RunConfig, dict[str, Any] | None]:
    """The config with `offline_expected_qps` from a pilot, and how it was found; the
    config unchanged (and None) when it needs no sizing. A pilot that fails leaves the
    config as it is: the timed run then fails the same way, in a folder the user keeps."""
    if not needs_sizing(config):
        return config, None
    samples = FIRST_PILOT["tensor" if kind == "tensor" else "stream"]
    try:
        rate, took = _pilot(config, samples)
        if 0 < took < TRUST_S:
            samples = int(min(max(rate * SECOND_PILOT_S, samples), MAX_PILOT_SAMPLES))
            rate, took = _pilot(config, samples)
    except _Stopped as e:
        raise RunError(f"stopped by {e} while sizing the Offline query, before the timed run") from e
    except HarnessError:
        return config, None
    if rate <= 0:
        return config, None
    hint = _round_up(rate * MARGIN)
    sizing = {"offline_expected_qps": hint, "pilot_samples": samples, "pilot_rate_per_s": rate,
              "pilot_s": took, "margin": MARGIN, "why": "no offline_expected_qps given: sized from a pilot run"}
    return config.model_copy(update={"offline_expected_qps": hint}), sizing
