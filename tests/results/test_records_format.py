"""records.parquet: what the writer puts in is what the readers get back, at every size a
row group cuts, with the compact forms (status codes, constant columns) agreeing with the
plain ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.errors import ResultsError
from harness.results import folder
from harness.results.records import (
    COLUMNS,
    GROUP_ROWS,
    Records,
    frame_bytes,
    read_records,
    recover,
    scan_records,
    write_records,
)


def _columns(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    issue = 10**15 + np.cumsum(rng.integers(0, 10**6, n))
    failed = rng.random(n) < 0.1
    return {
        "query_id": 140_000_000_000_000 + rng.permutation(n) * 64,
        "sample_index": rng.integers(0, 24_576, n),
        "issue_ns": issue,
        "dispatch_ns": issue + rng.integers(0, 10**5, n),
        "first_byte_ns": np.zeros(n, dtype=np.int64),
        "first_token_ns": issue + 2 * 10**5,
        "complete_ns": issue + rng.integers(3 * 10**5, 10**8, n),
        "n_tokens": rng.integers(1, 512, n),
        "input_tokens": np.full(n, 128),
        "batch_id": np.arange(n) // 3,
        "worker": rng.integers(0, 4, n),
        "status": np.where(failed, "error", "ok"),
        "error": np.where(failed, np.where(rng.random(n) < 0.5, "http_500: boom", "timeout: 2 s"), ""),
    }


@pytest.mark.parametrize("n", [0, 1, GROUP_ROWS, 2 * GROUP_ROWS + 17])
def test_columns_come_back_as_written(tmp_path: Path, n: int):
    cols = _columns(n)
    write_records(tmp_path, cols)
    rec = read_records(tmp_path)
    assert len(rec) == n == scan_records(tmp_path)
    for c in COLUMNS:
        assert list(rec.columns[c]) == list(cols[c]), c
    ok = cols["status"] == "ok"
    assert np.array_equal(rec.ok(), ok)
    assert rec.distinct("batch_id") == len(np.unique(cols["batch_id"]))
    want = {e: int((cols["error"][~ok] == e).sum()) for e in np.unique(cols["error"][~ok])}
    assert rec.text_counts("error", ~ok) == want
    # The compact answers agree with those of the same columns held in memory.
    plain = Records({c: cols[c] for c in COLUMNS})
    assert np.array_equal(plain.ok(), rec.ok()) and plain.distinct("batch_id") == rec.distinct("batch_id")
    assert plain.text_counts("error", ~ok) == rec.text_counts("error", ~ok)


def test_a_constant_column_is_one_number_in_memory(tmp_path: Path):
    write_records(tmp_path, _columns(3 * GROUP_ROWS))
    cols = read_records(tmp_path).columns
    zeros, varied = cols["first_byte_ns"], cols["issue_ns"]
    assert zeros.shape == (3 * GROUP_ROWS,) and not zeros.any() and zeros.strides == (0,)
    assert (cols["input_tokens"] == 128).all() and cols["input_tokens"].strides == (0,)
    assert varied.strides == (8,) and varied.flags.owndata


def test_recover_makes_calls_and_rows_into_one_row_per_sample(tmp_path: Path):
    calls = [((1, 2, 3), (7, 8, 9), (10, 10, 11), 20, 30, 5, 1, "ok", ""),
             ((4,), (0,), (12,), 21, 31, 6, 0, "error", "RuntimeError: x")]
    rows = [(9, 3, 40, 41, 42, 43, 44, 12, 100, 7, 2, "ok", ""), (10, 4, 50, 51, 0, 0, 54, 0, 100, 8, 2, "error", "e")]
    (tmp_path / folder.PARTIAL_RECORDS).write_bytes(frame_bytes(calls) + frame_bytes(rows) + frame_bytes(rows)[:9])
    assert recover(tmp_path) == 6  # the frame cut after 9 bytes ends the file
    c = read_records(tmp_path).columns
    assert list(c["query_id"]) == [1, 2, 3, 4, 9, 10]
    assert list(c["dispatch_ns"]) == [20, 20, 20, 21, 41, 51]
    assert list(c["first_byte_ns"]) == [0, 0, 0, 0, 42, 0] and list(c["n_tokens"]) == [0, 0, 0, 0, 12, 0]
    assert list(c["status"]) == ["ok", "ok", "ok", "error", "ok", "error"]
    assert list(c["error"]) == ["", "", "", "RuntimeError: x", "", "e"]
    assert not (tmp_path / folder.PARTIAL_RECORDS).exists()


def test_a_file_of_other_columns_is_named_damaged(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"query_id": [1], "latency": [2]}), tmp_path / folder.RECORDS)
    with pytest.raises(ResultsError, match=r"records.parquet is damaged: columns query_id,latency; expected"):
        read_records(tmp_path)
