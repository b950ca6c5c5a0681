"""Shared test helpers: real LoadGen runs in a temporary results root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.config.run_config import RunConfig  # noqa: E402
from harness.run import runner  # noqa: E402


@pytest.fixture
def run_harness(tmp_path: Path):
    """Run one real LoadGen test in a child process; returns (run_dir, summary)."""

    def _run(**settings: Any) -> tuple[Path, dict[str, Any]]:
        outcome = runner.run(RunConfig(**settings), tmp_path / "results")
        if ((outcome.summary.get("validity") or {}).get("harness") or {}).get("clock_ok") is False:
            # The machine stepped its wall clock during the test, which LoadGen times with
            # (seen on a fresh clone: LoadGen's log spanned 3.47 s of a 1.15 s test, its
            # rate a third of ours). The harness said so and judged the run INVALID; its
            # fix is to run again, and no figure of LoadGen's in it can be compared.
            # The stepped run is kept beside the results, the test judges the re-run.
            aside = tmp_path / "clock-stepped"
            aside.mkdir(exist_ok=True)
            outcome.run_dir.rename(aside / outcome.run_dir.name)
            print(f"clock stepped during {outcome.run_dir.name}: {outcome.summary['validity']['reasons']}; run again")
            outcome = runner.run(RunConfig(**settings), tmp_path / "results")
        return outcome.run_dir, outcome.summary

    return _run


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    from harness.data.embedded import default_model

    return default_model()
