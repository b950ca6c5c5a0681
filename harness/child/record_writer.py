"""The record writer: the child's per-request rows, streamed to disk while the test runs.

The format it writes (marshal frames of rows or `Call` entries in records.partial, turned
into records.parquet by `recover`) is defined in `harness.results.records`, which reads it back.
A flush cuts its frames at `FRAME_ROWS` samples and pauses between them: packing 10k rows
in one go held the GIL ~4 ms, and LoadGen's thread, which needs it for every query, waited
that long.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import Any

from harness.errors import OutputError
from harness.results.folder import PARTIAL_RECORDS, TOKENS, write_failed
from harness.results.records import Call, Row, frame_bytes, is_call, recover

FLUSH_INTERVAL_S = 0.25
FRAME_ROWS = 512  # samples; ~0.2 ms of packing per frame of rows, less of calls
FRAME_PAUSE_S = 0.0001  # long enough for a thread waiting on the GIL to take it
TOKEN_ROWS = 64  # tokens.jsonl entries encoded at a time: ~0.5 ms of the GIL


class RecordWriter:
    """Collects rows from any thread and writes them from one background thread.

    `add` is a deque append (thread-safe without a lock), so the hot path pays no I/O.
    """

    def __init__(self, run_dir: Path, on_flush: Callable[[int], None] | None = None) -> None:
        self._run_dir = run_dir
        self.run_dir = run_dir  # where other per-run files of the child go (schedule.parquet)
        self._partial = open(run_dir / PARTIAL_RECORDS, "wb")
        self._tokens_path = run_dir / TOKENS
        self._tokens_file = None
        self._rows: deque[Row] = deque()
        self._token_rows: deque[dict[str, Any]] = deque()
        self._written = 0
        self._on_flush = on_flush
        self._stop = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self._failed: OutputError | None = None  # the first write that failed (a full disk)
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
            calls = is_call(rows[0])  # one SUT writes one kind of entry
            # marshal would write a numpy integer as raw bytes: a writer that hands those
            # in (checked on the first row of each flush) gets its rows made plain. Call
            # entries come from the tensor SUT with plain ints only.
            if not calls and any(type(v) not in (int, str) for v in rows[0]):
                rows = [tuple(_plain(v) for v in r) for r in rows]
            # Frames are cut at ~FRAME_ROWS samples by slicing: the loop runs per frame.
            step = max(1, FRAME_ROWS // len(rows[0][0])) if calls else FRAME_ROWS
            try:
                self._write_frames(rows, step, calls)
            except OSError as e:  # a full disk: keep what fits, drop the rest, say so at close
                self._failed = self._failed or write_failed(self._run_dir / PARTIAL_RECORDS, e)
        if tokens and self._failed is None:
            try:
                if self._tokens_file is None:
                    self._tokens_file = open(self._tokens_path, "a")
                # in pieces, pausing between them as frames do: 500 entries (a quarter second
                # at 2,000 requests/s) encoded at once held the GIL 4.2 ms, and a scheduled
                # send waited that long
                for start in range(0, len(tokens), TOKEN_ROWS):
                    if start:
                        time.sleep(FRAME_PAUSE_S)
                    self._tokens_file.write("".join(json.dumps(t) + "\n" for t in tokens[start:start + TOKEN_ROWS]))
                self._tokens_file.flush()
            except OSError as e:
                self._failed = write_failed(self._tokens_path, e)
        if self._on_flush is not None:
            self._on_flush(self._written)

    def _write_frames(self, rows: list, step: int, calls: bool) -> None:
        if self._failed is not None:
            return
        for start in range(0, len(rows), step):
            if start:
                time.sleep(FRAME_PAUSE_S)
            frame = rows[start : start + step]
            self._partial.write(frame_bytes(frame))
            self._written += sum(map(len, map(_first, frame))) if calls else len(frame)
        self._partial.flush()

    def close(self) -> None:
        """Flush, close and turn records.partial into records.parquet. Safe to call twice and
        from two threads at once (the test's end and a stop signal, or a crash): the
        second call waits for the first and finds nothing left to do."""
        with self._close_lock:
            if self._closed:
                return
            self._stop.set()
            if self._thread is not threading.current_thread():
                self._thread.join()
            self._flush()
            self._closed = True
            for f in (self._partial, self._tokens_file):
                try:
                    if f is not None:
                        f.close()
                except OSError as e:  # its buffered end could not be written
                    self._failed = self._failed or write_failed(Path(f.name), e)
            if self._failed is not None:
                # records.partial keeps every whole frame that fit; the parent recovers them.
                raise OutputError(f"{self._failed} ({self._written:,} records kept); free space or pass --output-dir DIR")
            recover(self._run_dir)


_first = itemgetter(0)


def _drain(queue: deque) -> list:
    # Pop exactly what is there now; rows appended meanwhile wait for the next flush.
    return [queue.popleft() for _ in range(len(queue))]


def _plain(value: Any) -> int | str:
    if isinstance(value, (int, str)):
        return value
    return int(value) if hasattr(value, "__index__") else str(value)


def now_ns() -> int:
    return time.perf_counter_ns()
