"""Reading a results folder back, with clear errors for what is missing or too new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import OutputError
from harness.summary import SCHEMA_VERSION, SUMMARY_FILE


def load_summary(run_dir: Path) -> dict[str, Any]:
    if not run_dir.is_dir():
        raise OutputError(f"{run_dir} is not a results folder")
    path = run_dir / SUMMARY_FILE
    if not path.exists():
        raise OutputError(f"{run_dir} has no {SUMMARY_FILE}: the run did not finish writing it")
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise OutputError(f"{path} is not valid JSON (line {e.lineno}): the file is damaged") from e
    version = summary.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise OutputError(
            f"{path} has schema_version {version!r}; this harness reads up to {SCHEMA_VERSION}: upgrade loadgen-harness"
        )
    return summary
