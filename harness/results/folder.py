"""The results folder: every file a run leaves, by name, and the one way to read each back.

Writers (the runner, the child, `harness cost`) and readers (summary, check, compare,
reports, submission) name files through these constants, and every reader goes through the
loaders below, so a missing or damaged file is treated the same way everywhere: a
`ResultsError` naming the file and what is wrong with it, or `None` where the file is
optional and absent.

    run.yaml              the resolved, re-runnable config (RUN_CONFIG)
    system.json           the machine (SYSTEM)
    manifest.json         sha256 of config, model, conf files and what the run produced (MANIFEST)
    child.json/error.json what the child process reports: backend description and timings,
                          or the error that stopped it, with its type and traceback (CHILD, ERROR)
    records.parquet       one row per sample (RECORDS; records.partial while the test runs;
                          records.csv in folders written before, LEGACY_RECORDS)
    tokens.jsonl          chunk times per generated request (TOKENS)
    stages.jsonl          backend-reported stage times (STAGES)
    summary.json          LoadGen's figures and ours (SUMMARY, schema SCHEMA_VERSION)
    cost.json             cost per request and per successful task (COST)
    references.json       a text-scored dataset's references, metrics, file sha256, the
                          tokenizer the logged ids decode with, and what the accuracy log
                          holds (ids or a transcript's labels) (REFERENCES; text_accuracy)
    ranking.json          a rerank dataset's documents per sample and relevance labels (RANKING;
                          harness.results.rerank)
    mlperf_log_*          LoadGen's own logs (LOADGEN_*)
    aggregate.json        in a --repeat folder: the runs and their aggregate (AGGREGATE)
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import yaml

from harness.errors import OutputError, ResultsError

RUN_CONFIG = "run.yaml"
SYSTEM = "system.json"
MANIFEST = "manifest.json"
CHILD = "child.json"
ERROR = "error.json"
RECORDS = "records.parquet"
LEGACY_RECORDS = "records.csv"  # the records of folders written before records.parquet
PARTIAL_RECORDS = "records.partial"
TOKENS = "tokens.jsonl"
STAGES = "stages.jsonl"
SCHEDULE = "schedule.parquet"  # harness.child.schedule: each request's scheduled time (arrivals, a trace)
TELEMETRY = "telemetry.jsonl"  # harness.run.telemetry: server, host and GPU samples taken beside the test
CLUSTER = "cluster.json"  # harness.child: the cluster, where each replica or client shard ran, their clocks
EXPECTED_CLUSTER = "expected_cluster.json"  # harness rerun: the original's cluster shape (harness.results.cluster)
SUMMARY = "summary.json"
COST = "cost.json"
AGGREGATE = "aggregate.json"
REPORT_HTML = "report.html"
AUDIT_CONFIG = "audit.config"  # LoadGen reads it from its working directory: the run folder
AUDIT = "audit.json"
SWEEP_PLAN = "sweep.yaml"  # a sweep or capacity folder (harness.run.sweep): what to run
SWEEP = "sweep.json"  # ... and one entry per finished point
LABELS = "labels.npy"  # the dataset's labels, for accuracy from mlperf_log_accuracy.json
REFERENCES = "references.json"  # a prompt dataset's references, for text accuracy (harness.results.text_accuracy)
RANKING = "ranking.json"  # a rerank dataset's documents and labels (harness.results.rerank)
LOADGEN_SUMMARY = "mlperf_log_summary.txt"
LOADGEN_DETAIL = "mlperf_log_detail.txt"
LOADGEN_ACCURACY = "mlperf_log_accuracy.json"
LOADGEN_TRACE = "mlperf_log_trace.json"

#: summary.json's schema; readers refuse a newer one instead of misreading it
SCHEMA_VERSION = 1


def write_text(path: Path, text: str) -> None:
    """Write a folder's file whole or not at all (a temporary file, then a rename): a full
    disk or a kill mid-write never leaves a half file that reads as damaged."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(path, e) from e


def write_failed(path: Path, e: OSError) -> OutputError:
    """The one line for a file that could not be written."""
    if e.errno == errno.ENOSPC:
        return OutputError(f"no space left on device writing {path}")
    return OutputError(f"cannot write {path}: {e.strerror or e}")


def require_folder(run_dir: Path) -> None:
    """A path that is not a folder at all is bad input (exit 2); a folder whose files are
    missing or damaged is a ResultsError (exit 7)."""
    if not run_dir.exists():
        raise OutputError(
            f"{run_dir} is not a results folder: it does not exist; give a folder a run wrote "
            "(results/<stamp>-<name>-<scenario>)"
        )
    if not run_dir.is_dir():
        raise OutputError(f"{run_dir} is not a results folder: it is a file")


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path} is damaged: not UTF-8 text (byte {e.start})") from e
    except OSError as e:
        raise ResultsError(f"{path} cannot be read: {e.strerror}") from e


def read_json(run_dir: Path, name: str, *, required: bool = False) -> dict[str, Any] | None:
    """A JSON object file of the folder; `None` when absent and not required."""
    return _read_mapping(run_dir, name, required, json.loads, json.JSONDecodeError, "JSON", "an object")


def read_run_config(run_dir: Path, *, required: bool = True) -> dict[str, Any] | None:
    """run.yaml as a mapping (validate it with RunConfig where it must still be runnable)."""
    return _read_mapping(run_dir, RUN_CONFIG, required, yaml.safe_load, yaml.YAMLError, "YAML", "a mapping of settings")


def _read_mapping(
    run_dir: Path, name: str, required: bool, parse: Any, parse_error: type[Exception], fmt: str, shape: str
) -> dict[str, Any] | None:
    path = run_dir / name
    if not path.is_file():
        if required:
            why = ": not a results folder" if name == RUN_CONFIG else ""
            raise ResultsError(f"{run_dir} has no {name}{why}")
        return None
    try:
        data = parse(_text(path))
    except parse_error as e:
        where = f"line {e.lineno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else str(e).splitlines()[0]
        raise ResultsError(f"{path} is damaged: not valid {fmt} ({where})") from e
    if not isinstance(data, dict):
        raise ResultsError(f"{path} is damaged: a {fmt} {type(data).__name__}, not {shape}")
    return data


def read_jsonl(run_dir: Path, name: str) -> list[dict[str, Any]]:
    """One JSON object per line; absent: no entries. A line a crash cut short (not valid
    JSON, or not an object) is skipped: the file is appended to while the test runs."""
    path = run_dir / name
    if not path.is_file():
        return []
    entries = []
    for line in _text(path).splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def load_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json, checked for a schema this harness can read."""
    require_folder(run_dir)
    if not (run_dir / SUMMARY).is_file():
        if (run_dir / RUN_CONFIG).is_file():
            raise ResultsError(f"{run_dir} has no {SUMMARY}: the run did not finish writing it")
        raise OutputError(f"{run_dir} is not a results folder: it has neither {SUMMARY} nor {RUN_CONFIG}")
    summary = read_json(run_dir, SUMMARY, required=True) or {}
    version = summary.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultsError(
            f"{run_dir / SUMMARY} has schema_version {version!r}; this harness reads up to {SCHEMA_VERSION}: "
            "upgrade loadgen-harness"
        )
    return summary
