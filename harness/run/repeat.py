"""`harness run --repeat N`: N runs of one config, each in its own process, and their aggregate.

    results/<stamp>-<name>-<scenario>-repeat/
        aggregate.json          the runs (relative names) and, per headline figure (by its
                                name in harness.results.metrics), median, min/max, mean,
                                stdev and a 95 % t interval of the mean
        <stamp>-<name>-<scenario>/      run 1 (a normal results folder)
        ...

Each repetition is a full `harness.run.runner.run`, so each gets a fresh child process and
LoadGen instance: one run's warm caches or leaked threads never flatter the next.
`harness compare` takes the repeat folder as one side.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.analysis.compare import headline
from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.results import folder
from harness.results.stats import over_runs
from harness.run import runner

# 2: metrics are keyed by harness.results.metrics' names (latency_p99, not p99_latency).
AGGREGATE_SCHEMA_VERSION = 2
# A spread above this is flagged: the gate would need a larger threshold to be trusted.
NOISY_SPREAD = 0.10


@dataclass(frozen=True)
class RepeatOutcome:
    repeat_dir: Path
    outcomes: list[runner.RunOutcome]
    aggregate: dict[str, Any]


def aggregate(repeat_dir: Path, run_dirs: list[Path]) -> dict[str, Any]:
    """aggregate.json for runs already on disk (so it can be rebuilt from the folders alone)."""
    per_run = [headline(d) for d in run_dirs]
    metrics = {}
    for name in per_run[0]:
        values = [float(h[name]) for h in per_run if h.get(name) is not None]
        if values:
            metrics[name] = over_runs(values)
    summaries = [folder.load_summary(d) for d in run_dirs]
    warnings = [
        f"{name}: runs spread over {m['relative_spread']:.0%} of the median; use more runs or a longer min_duration_s"
        for name, m in metrics.items()
        if m["relative_spread"] is not None and m["relative_spread"] > NOISY_SPREAD
    ]
    invalid = [d.name for d, s in zip(run_dirs, summaries) if s["validity"]["result"] == "INVALID"]
    if invalid:
        warnings.append(f"{len(invalid)} of {len(run_dirs)} runs are INVALID: {', '.join(invalid)}")
    return {
        "aggregate_schema_version": AGGREGATE_SCHEMA_VERSION,
        "kind": "repeat",
        "n": len(run_dirs),
        "runs": [str(d.relative_to(repeat_dir)) for d in run_dirs],
        "scenario": summaries[0]["run"]["scenario"],
        "validity": [s["validity"]["result"] for s in summaries],
        "status": [s["status"] for s in summaries],
        "metrics": metrics,
        "warnings": warnings,
    }


def run_repeated(
    config: RunConfig,
    output_root: Path,
    repeat: int,
    after_each: Callable[[runner.RunOutcome], None] | None = None,
) -> RepeatOutcome:
    """`after_each` runs on each finished run before the aggregate (e.g. writes its cost.json)."""
    if repeat < 2:
        raise ConfigError(f"--repeat {repeat}: use 2 or more (one run needs no aggregate)")
    repeat_dir = runner.new_results_dir(output_root, f"{config.name}-{config.scenario}-repeat")
    outcomes = []
    for _ in range(repeat):
        outcomes.append(runner.run(config, repeat_dir))
        if after_each is not None:
            after_each(outcomes[-1])
        if outcomes[-1].stopped_by:
            break  # a stop signal ends the repeats: the aggregate covers the runs made
    data = aggregate(repeat_dir, [o.run_dir for o in outcomes])
    (repeat_dir / folder.AGGREGATE).write_text(json.dumps(data, indent=2))
    return RepeatOutcome(repeat_dir, outcomes, data)
