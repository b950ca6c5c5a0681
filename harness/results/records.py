"""Per-request records: their format, and reading them back.

Every sample LoadGen issues becomes one row of `records.csv`. During the test the child's
writer (harness.child.record_writer) appends rows to `records.partial` as marshal frames —
ten times cheaper than CSV, and the writer shares the GIL with LoadGen's callbacks — and
`recover()` turns them into `records.csv` once the timed test is over. A tensor backend call
is one entry for all its samples (`Call`), made into rows only then. A crashed or killed run
keeps what it recorded: the parent calls `recover()` on the file.
Times are `time.perf_counter_ns()` readings (monotonic, one clock per run).

Columns (see docs/records.md):
    query_id       LoadGen's response id for the sample
    sample_index   index into the dataset
    issue_ns       LoadGen's issue callback handed the sample to the harness
    dispatch_ns    a worker handed it to the backend (queue time = dispatch - issue)
    first_byte_ns  response headers arrived (HTTP only; 0 otherwise)
    first_token_ns first content token (generative only; 0 otherwise)
    complete_ns    the backend finished the sample
    n_tokens       output tokens (generative only; 0 otherwise)
    input_tokens   prompt tokens (generative only; 0 otherwise)
    batch_id       the backend call that served it
    worker         the worker (thread or event loop) that served it
    status         "ok" or "error"
    error          the failure reason, empty when ok

Generative backends also append one JSON line per request to `tokens.jsonl`
(chunk arrival times and token counts) for inter-token latency.
"""

from __future__ import annotations

import csv
import marshal
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ResultsError
from harness.results.folder import PARTIAL_RECORDS, RECORDS, write_failed

COLUMNS = (
    "query_id",
    "sample_index",
    "issue_ns",
    "dispatch_ns",
    "first_byte_ns",
    "first_token_ns",
    "complete_ns",
    "n_tokens",
    "input_tokens",
    "batch_id",
    "worker",
    "status",
    "error",
)

Row = tuple  # one value per COLUMNS entry
# A tensor backend call, one entry for all its samples, made into rows by `recover()`
# after the test: (query_ids, sample_indices, issue_ns tuples, dispatch_ns, complete_ns,
# batch_id, worker, status, error). A 13-field row per sample cost the worker ~0.5 us a
# sample and packing it as much again, both on the GIL LoadGen's thread waits for.
Call = tuple


def is_call(entry: tuple) -> bool:
    return type(entry[0]) is tuple


def _rows_of(entry: tuple) -> list[Row]:
    if not is_call(entry):
        return [entry]
    ids, indices, issued, dispatch, done, batch_id, worker, status, error = entry
    return [(q, i, t, dispatch, 0, 0, done, 0, 0, batch_id, worker, status, error) for q, i, t in zip(ids, indices, issued)]


def recover(run_dir: Path) -> int:
    """records.partial -> records.csv; a frame cut by a crash ends the file. Returns rows."""
    partial = run_dir / PARTIAL_RECORDS
    if not partial.exists():
        return 0
    n = 0
    # Written beside, then renamed: a disk that fills up mid-way leaves records.partial (all
    # that was recorded) and no half records.csv that would read as tampered.
    tmp = run_dir / f".{RECORDS}.tmp"
    try:
        with open(partial, "rb") as src, open(tmp, "w", newline="") as dst:
            out = csv.writer(dst)
            out.writerow(COLUMNS)
            while True:
                try:
                    entries = marshal.load(src)
                except (EOFError, ValueError, TypeError):
                    break
                for entry in entries:
                    rows = _rows_of(entry)
                    out.writerows(rows)
                    n += len(rows)
        os.replace(tmp, run_dir / RECORDS)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(run_dir / RECORDS, e) from e
    partial.unlink()
    return n


@dataclass
class Records:
    """records.csv read back as columns (numpy arrays), for the summary and reports."""

    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(self.columns["query_id"])


def read_records(run_dir: Path) -> Records:
    import numpy as np

    path = run_dir / RECORDS
    ints: dict[str, list[int]] = {c: [] for c in COLUMNS if c not in ("status", "error")}
    status: list[str] = []
    errors: list[str] = []
    int_cols = [(i, c) for i, c in enumerate(COLUMNS) if c in ints]
    # Every way the file can be damaged is one ResultsError naming it and the place.
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None or tuple(header) != COLUMNS:
                shown = "none (the file is empty)" if header is None else ",".join(header)[:80]
                raise ResultsError(f"{path} is damaged: unexpected header {shown}; expected {','.join(COLUMNS)}")
            for row in reader:
                if len(row) != len(COLUMNS):  # a row cut by a crash mid-write
                    continue
                for i, c in int_cols:
                    try:
                        ints[c].append(int(row[i]))
                    except ValueError:
                        raise ResultsError(
                            f"{path} is damaged: line {reader.line_num}, column {c}: {row[i][:40]!r} is not an integer"
                        ) from None
                status.append(row[-2])
                errors.append(row[-1])
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path} is damaged: not UTF-8 text (byte {e.start})") from e
    except csv.Error as e:
        raise ResultsError(f"{path} is damaged: not CSV ({e})") from e
    except OSError as e:
        raise ResultsError(f"{path} cannot be read: {e.strerror}") from e
    cols: dict[str, Any] = {c: np.asarray(v, dtype=np.int64) for c, v in ints.items()}
    cols["status"] = np.asarray(status, dtype=object)
    cols["error"] = np.asarray(errors, dtype=object)
    return Records(cols)
