"""Per-request records, streamed to disk while the test runs.

Every sample LoadGen issues becomes one row of `records.csv`. During the test a background
thread appends the rows every `FLUSH_INTERVAL_S` to `records.partial` as marshal frames —
ten times cheaper than CSV, and the writer shares the GIL with LoadGen's callbacks — and
`close()` turns them into `records.csv` once the timed test is over. A tensor backend call
is one entry for all its samples (`Call`), made into rows only then. A flush cuts its frames
at `FRAME_ROWS` samples and pauses between them: packing 10k rows in one go held the GIL
~4 ms, and LoadGen's thread, which needs it for every query, waited that long. A crashed
or killed run keeps what it recorded: the parent calls `recover()` on the file.
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
import json
import marshal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

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
RECORDS_FILE = "records.csv"
PARTIAL_FILE = "records.partial"
TOKENS_FILE = "tokens.jsonl"
FLUSH_INTERVAL_S = 0.25
FRAME_ROWS = 512  # samples; ~0.2 ms of packing per frame of rows, less of calls
FRAME_PAUSE_S = 0.0001  # long enough for a thread waiting on the GIL to take it

Row = tuple  # one value per COLUMNS entry
# A tensor backend call, one entry for all its samples, made into rows by `recover()`
# after the test: (query_ids, sample_indices, issue_ns tuples, dispatch_ns, complete_ns,
# batch_id, worker, status, error). A 13-field row per sample cost the worker ~0.5 us a
# sample and packing it as much again, both on the GIL LoadGen's thread waits for.
Call = tuple


class RecordWriter:
    """Collects rows from any thread and writes them from one background thread.

    `add` is a deque append (thread-safe without a lock), so the hot path pays no I/O.
    """

    def __init__(self, run_dir: Path, on_flush: Callable[[int], None] | None = None) -> None:
        self._run_dir = run_dir
        self._partial = open(run_dir / PARTIAL_FILE, "wb")
        self._tokens_path = run_dir / TOKENS_FILE
        self._tokens_file = None
        self._rows: deque[Row] = deque()
        self._token_rows: deque[dict[str, Any]] = deque()
        self._written = 0
        self._on_flush = on_flush
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="records", daemon=True)
        self._thread.start()

    @property
    def written(self) -> int:
        return self._written

    def add(self, entry: Row | Call) -> None:
        """A sample's row, or one backend call's samples as one entry (`Call`). One SUT
        writes one kind."""
        self._rows.append(entry)

    def extend(self, entries: list[Row] | list[Call]) -> None:
        self._rows.extend(entries)

    def add_tokens(self, entry: dict[str, Any]) -> None:
        self._token_rows.append(entry)

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self._flush()

    def _flush(self) -> None:
        rows = _drain(self._rows)
        tokens = _drain(self._token_rows)
        if rows:
            calls = _is_call(rows[0])  # one SUT writes one kind of entry
            # marshal would write a numpy integer as raw bytes: a writer that hands those
            # in (checked on the first row of each flush) gets its rows made plain. Call
            # entries come from the tensor SUT with plain ints only.
            if not calls and any(type(v) not in (int, str) for v in rows[0]):
                rows = [tuple(_plain(v) for v in r) for r in rows]
            # Frames are cut at ~FRAME_ROWS samples by slicing: the loop runs per frame.
            step = max(1, FRAME_ROWS // len(rows[0][0])) if calls else FRAME_ROWS
            for start in range(0, len(rows), step):
                if start:
                    time.sleep(FRAME_PAUSE_S)
                frame = rows[start : start + step]
                marshal.dump(frame, self._partial)
                self._written += sum(map(len, map(_first, frame))) if calls else len(frame)
            self._partial.flush()
        if tokens:
            if self._tokens_file is None:
                self._tokens_file = open(self._tokens_path, "a")
            self._tokens_file.write("".join(json.dumps(t) + "\n" for t in tokens))
            self._tokens_file.flush()
        if self._on_flush is not None:
            self._on_flush(self._written)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._flush()
        self._partial.close()
        if self._tokens_file is not None:
            self._tokens_file.close()
        recover(self._run_dir)


_first = itemgetter(0)


def _is_call(entry: tuple) -> bool:
    return type(entry[0]) is tuple


def _rows_of(entry: tuple) -> list[Row]:
    if not _is_call(entry):
        return [entry]
    ids, indices, issued, dispatch, done, batch_id, worker, status, error = entry
    return [(q, i, t, dispatch, 0, 0, done, 0, 0, batch_id, worker, status, error) for q, i, t in zip(ids, indices, issued)]


def _plain(value: Any) -> int | str:
    if isinstance(value, (int, str)):
        return value
    return int(value) if hasattr(value, "__index__") else str(value)


def recover(run_dir: Path) -> int:
    """records.partial -> records.csv; a frame cut by a crash ends the file. Returns rows."""
    partial = run_dir / PARTIAL_FILE
    if not partial.exists():
        return 0
    n = 0
    with open(partial, "rb") as src, open(run_dir / RECORDS_FILE, "w", newline="") as dst:
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
    partial.unlink()
    return n


@dataclass
class Records:
    """records.csv read back as columns (numpy arrays), for the summary and reports."""

    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(self.columns["query_id"])


def _drain(queue: deque) -> list:
    # Pop exactly what is there now; rows appended meanwhile wait for the next flush.
    return [queue.popleft() for _ in range(len(queue))]


def read_records(run_dir: Path) -> Records:
    import numpy as np

    path = run_dir / RECORDS_FILE
    ints: dict[str, list[int]] = {c: [] for c in COLUMNS if c not in ("status", "error")}
    status: list[str] = []
    errors: list[str] = []
    int_cols = [(i, c) for i, c in enumerate(COLUMNS) if c in ints]
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(header) != COLUMNS:
            from harness.errors import OutputError

            raise OutputError(f"{path}: unexpected header {header}; expected {','.join(COLUMNS)}")
        for row in reader:
            if len(row) != len(COLUMNS):  # a row cut by a crash mid-write
                continue
            for i, c in int_cols:
                ints[c].append(int(row[i]))
            status.append(row[-2])
            errors.append(row[-1])
    cols: dict[str, Any] = {c: np.asarray(v, dtype=np.int64) for c, v in ints.items()}
    cols["status"] = np.asarray(status, dtype=object)
    cols["error"] = np.asarray(errors, dtype=object)
    return Records(cols)


def now_ns() -> int:
    return time.perf_counter_ns()
