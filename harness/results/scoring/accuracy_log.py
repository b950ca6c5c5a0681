"""LoadGen's accuracy log entries as the official LLM scripts read them, and their de-duplication.

`mlperf_log_accuracy.json` is a JSON list of `{"seq_id", "qsl_idx", "data"[, "token_count"]}`;
`data` is the response buffer in hex: for an LLM, the generated token ids. The scripts
decode it with `np.frombuffer(bytes.fromhex(data), dtype)`: int32 is what the reference SUTs
log (and this harness), int64 the llama scripts' default argument.

De-duplication (LoadGen may log a sample more than once in accuracy mode): llama3.1-8b's
`evaluation.py`, llama2-70b's `evaluate-accuracy.py` and deepseek-r1's `eval_accuracy.py`
keep the *first* entry of each qsl_idx, in file order, and score only those; gpt-oss-120b's
`eval_mlperf_accuracy.py` de-duplicates nothing (each entry is scored). Read at
mlcommons/inference commit b66003e10e2db4b8c36a448b0545ec90fcc6e9e9.

Unlike deepseek-r1's script, which skips an out-of-range qsl_idx or an undecodable entry with
a warning, everything here is an error naming the entry: nothing is silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.errors import ResultsError

DTYPES = {"int32": 4, "int64": 8}

T = TypeVar("T")


@dataclass(frozen=True)
class LogEntry:
    """One accuracy-log entry: which sample, and the token ids it generated."""

    qsl_idx: int
    seq_id: int | None
    token_ids: tuple[int, ...]


def token_ids_from_hex(data: str, dtype: str = "int32") -> tuple[int, ...]:
    """The ids in one entry's `data`, little-endian as numpy reads them on every MLPerf host."""
    import numpy as np

    size = DTYPES.get(dtype)
    if size is None:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    raw = bytes.fromhex(data)  # ValueError on odd length or a non-hex character
    if len(raw) % size:
        raise ValueError(f"{len(raw)} bytes are not a whole number of {dtype} ids")
    return tuple(int(i) for i in np.frombuffer(raw, dtype=f"<i{size}"))


def parse_entries(raw: Any, *, dtype: str = "int32", source: str = "mlperf_log_accuracy.json") -> list[LogEntry]:
    """Every entry of a parsed accuracy log, in file order; a malformed entry is a `ResultsError` naming it."""
    if not isinstance(raw, list):
        raise ResultsError(f"{source}: expected a JSON list of entries, found {type(raw).__name__}")
    entries = []
    for n, item in enumerate(raw):
        where = f"{source}: entry {n}"
        if not isinstance(item, dict):
            raise ResultsError(f"{where} is {type(item).__name__}, not an object")
        qsl_idx, data, seq_id = item.get("qsl_idx"), item.get("data"), item.get("seq_id")
        if isinstance(qsl_idx, bool) or not isinstance(qsl_idx, int) or qsl_idx < 0:
            raise ResultsError(f"{where} has no valid qsl_idx (found {qsl_idx!r})")
        if not isinstance(data, str):
            raise ResultsError(f"{where} (qsl_idx {qsl_idx}) has no hex 'data' string")
        if seq_id is not None and (isinstance(seq_id, bool) or not isinstance(seq_id, int)):
            raise ResultsError(f"{where} (qsl_idx {qsl_idx}) has a seq_id that is not an integer: {seq_id!r}")
        try:
            ids = token_ids_from_hex(data, dtype)
        except ValueError as e:
            raise ResultsError(f"{where} (qsl_idx {qsl_idx}): its data cannot be decoded as {dtype} token ids: {e}") from e
        entries.append(LogEntry(qsl_idx=qsl_idx, seq_id=seq_id, token_ids=ids))
    return entries


def first_per_qsl_idx(entries: Iterable[tuple[int, T]]) -> list[tuple[int, T]]:
    """Keep the first (qsl_idx, payload) of each qsl_idx, in order: the official scripts' rule."""
    seen: set[int] = set()
    kept = []
    for qsl_idx, payload in entries:
        if qsl_idx not in seen:
            seen.add(qsl_idx)
            kept.append((qsl_idx, payload))
    return kept


def dedup_entries(entries: Iterable[LogEntry]) -> list[LogEntry]:
    """`first_per_qsl_idx` over parsed entries."""
    return [entry for _, entry in first_per_qsl_idx((e.qsl_idx, e) for e in entries)]


def check_in_range(entries: Sequence[LogEntry], n_samples: int, *, source: str = "mlperf_log_accuracy.json") -> None:
    """Every qsl_idx must name a dataset row; the first that does not is the error."""
    for entry in entries:
        if entry.qsl_idx >= n_samples:
            raise ResultsError(f"{source}: qsl_idx {entry.qsl_idx} is past the dataset's {n_samples} samples")
