"""Read LoadGen's own log (`mlperf_log_detail.txt`): the official figures and verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.results.folder import LOADGEN_ACCURACY as ACCURACY
from harness.results.folder import LOADGEN_DETAIL as DETAIL


def read_detail(run_dir: Path) -> tuple[dict[str, Any], list[str], list[str]]:
    """key -> value (last wins), plus the error and warning messages LoadGen logged."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    warnings: list[str] = []
    path = run_dir / DETAIL
    if not path.exists():
        return values, errors, warnings
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith(":::MLLOG "):
                continue
            try:
                entry = json.loads(line[len(":::MLLOG ") :])
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            key = entry.get("key")
            meta = entry.get("metadata", {})
            if meta.get("is_error"):
                errors.append(f"{key}: {entry.get('value')}")
            elif meta.get("is_warning"):
                warnings.append(f"{key}: {entry.get('value')}")
            if key:
                values[key] = entry.get("value")
    return values, errors, warnings


def effective_settings(values: dict[str, Any]) -> dict[str, Any]:
    return {k.removeprefix("effective_"): v for k, v in values.items() if k.startswith("effective_")}


def read_accuracy_log(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / ACCURACY
    if not path.exists() or path.stat().st_size == 0:
        return []
    text = path.read_text().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # LoadGen leaves a trailing comma when the run is cut short.
        return json.loads(text.rstrip(",\n ]") + "]")
