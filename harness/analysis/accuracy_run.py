"""An accuracy run's folder as the parity comparisons read it (text_parity, vector_parity):
checked to be one, and the label its side is shown by. A folder that is not an accuracy run
is one line saying what to run instead."""

from __future__ import annotations

from pathlib import Path

from harness.errors import ConfigError
from harness.results import folder
from harness.results.text_accuracy import ACCURACY_MODES


def accuracy_run_label(run_dir: Path, compares: str) -> str:
    """The label ("backend model") of an accuracy run's folder; `compares` finishes the
    refusal of any other run, e.g. "text parity compares the answers of accuracy runs"."""
    folder.require_folder(run_dir)
    config = folder.read_run_config(run_dir) or {}
    mode = str(config.get("mode", "PerformanceOnly"))
    if mode not in ACCURACY_MODES:
        raise ConfigError(f"{run_dir} is a {mode} run; {compares} "
                          "(run each side with --mode AccuracyOnly, or let `harness parity` run them)")
    return " ".join(str(x) for x in (config.get("backend"), config.get("model")) if x)
