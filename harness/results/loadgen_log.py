"""Read LoadGen's own log (`mlperf_log_detail.txt`): the official figures and verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.results.folder import LOADGEN_ACCURACY as ACCURACY
from harness.results.folder import LOADGEN_DETAIL as DETAIL


#: MLPerf's Interactive scenario: not one of LoadGen's, but its Server run with the
#: benchmark's `<model>-interactive` mlperf.conf entries (tighter TTFT/TPOT bounds); results
#: are reported, and filed, as Interactive, while LoadGen's log says Server
INTERACTIVE = "Interactive"


def loadgen_scenario(scenario: str) -> str:
    """The LoadGen scenario a harness scenario runs as: Interactive is Server."""
    return "Server" if scenario == INTERACTIVE else scenario


def read_detail(run_dir: Path) -> tuple[dict[str, Any], list[str], list[str]]:
    """key -> value (last wins), plus the error and warning messages LoadGen logged. The
    keys of _EVERY_VALUE also keep every value, in order, under their plural name."""
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
            if not isinstance(entry, dict):
                continue
            key = entry.get("key")
            meta = entry.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            if meta.get("is_error"):
                errors.append(f"{key}: {entry.get('value')}")
            elif meta.get("is_warning"):
                warnings.append(f"{key}: {entry.get('value')}")
            stamp = entry.get("time_ms")
            if isinstance(stamp, (int, float)) and stamp > values.get(LOG_SPAN_MS, 0):
                values[LOG_SPAN_MS] = stamp
            if isinstance(key, str) and key:
                values[key] = entry.get("value")
                if key in _EVERY_VALUE:  # logged once per round of a FindPeakPerformance test
                    values.setdefault(_EVERY_VALUE[key], []).append(entry.get("value"))
    return values, errors, warnings


#: the latest time_ms of the log: how long LoadGen's own clock says the test took
LOG_SPAN_MS = "log_span_ms"
#: keys whose every value is kept, as a list under the second name (last wins otherwise)
_EVERY_VALUE = {"generated_query_count": "generated_query_counts", "generated_samples_per_query": "generated_samples_per_queries",
                "generic_message": "generic_messages"}


def detail_problem(run_dir: Path) -> tuple[str, str] | None:
    """What is wrong with LoadGen's log, as (kind, words) for `harness check`, or None.

    It is the official record, so a folder whose log is missing, empty or not LoadGen's
    can never pass as VALID: "incomplete" when there is no log to read (the test never
    wrote it), "tampered" when there are bytes that are not LoadGen's (a log LoadGen wrote
    opens with its MLLOG lines; a crash cuts only its end).
    """
    path = run_dir / DETAIL
    if not path.is_file():
        return "incomplete", f"{path} is missing"
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024)
    except OSError as e:
        return "tampered", f"{path} cannot be read: {e.strerror}"
    if not head.strip():
        return "incomplete", f"{path} is empty: LoadGen's log of the test is gone"
    values, _, _ = read_detail(run_dir)
    if not values:
        return "tampered", f"{path} is damaged: no LoadGen log entries (:::MLLOG lines) in it"
    if not head.lstrip().startswith(b":::MLLOG "):
        return "tampered", f"{path} is damaged: it does not start with LoadGen's :::MLLOG lines"
    return None


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
