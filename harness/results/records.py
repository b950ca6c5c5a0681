"""Per-request records: their format, and reading them back.

Every sample LoadGen issues becomes one row of `records.parquet`. During the test the
child's writer (harness.child.record_writer) appends rows to `records.partial` as marshal
frames (`frame_bytes`) — ten times cheaper than any columnar write, and the writer shares the GIL with
LoadGen's callbacks — and `recover()` turns them into `records.parquet` once the timed test
is over, a row group at a time. A tensor backend call is one entry for all its samples
(`Call`), made into rows only then. A crashed or killed run keeps what it recorded: the
parent calls `recover()` on the file.

Why Parquet (pyarrow): an MLPerf run is tens of millions of samples. A column of issue times
delta-encodes to a few bits a sample, so a whole row costs bytes on disk, not the ~85 of a
CSV line; readers load only the columns they use, as typed arrays (8 bytes a time, 1 a
status code), never Python rows; and pandas, polars, DuckDB and Spark open the file as it
is. `harness report RUN --format csv` still exports CSV. Folders written before this format
hold `records.csv` (LEGACY_RECORDS); `read_records` reads those too.
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

import contextlib
import csv
import marshal
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ResultsError
from harness.results.folder import LEGACY_RECORDS, PARTIAL_RECORDS, RECORDS, write_failed

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
TEXT_COLUMNS = ("status", "error")
# In-memory width of each integer column: times and ids need 64 bits, counts fit in 32.
INT_TYPES = {
    "query_id": "int64",
    "sample_index": "int32",
    "issue_ns": "int64",
    "dispatch_ns": "int64",
    "first_byte_ns": "int64",
    "first_token_ns": "int64",
    "complete_ns": "int64",
    "n_tokens": "int32",
    "input_tokens": "int32",
    "batch_id": "int64",
    "worker": "int32",
}
# Rows per row group: bounds the Python objects `recover()` holds at once (~30 MB) whatever
# the run's length, and the memory of a reader that walks the file group by group.
GROUP_ROWS = 1 << 16

Row = tuple  # one value per COLUMNS entry
# A tensor backend call, one entry for all its samples, made into rows by `recover()`
# after the test: (query_ids, sample_indices, issue_ns tuples, dispatch_ns, complete_ns,
# batch_id, worker, status, error). A 13-field row per sample cost the worker ~0.5 us a
# sample and packing it as much again, both on the GIL LoadGen's thread waits for.
Call = tuple


def is_call(entry: tuple) -> bool:
    return type(entry[0]) is tuple


def int_array(values: Any, type_: Any) -> Any:
    """An integer column as a pyarrow array over the numpy buffer. Not `pa.array`: for any
    input it asks pandas whether the object is one of its own, importing pandas (0.5 s of a
    1.2 s run on 2 cores) in a process that has no other use for it. `to_numpy` does too,
    hence `numpy_of`."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.dtype(str(type_)))
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def numpy_of(array: Any) -> np.ndarray:
    """An integer Arrow array or chunked array, which has no nulls, as numpy: a read-only view
    of its one chunk's buffer, as `to_numpy()` gives, without importing pandas (`int_array`)."""
    chunks = array.chunks if hasattr(array, "chunks") else [array]
    parts = []
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError(f"a {chunk.type} column has {chunk.null_count} nulls")
        dtype = np.dtype(str(chunk.type))
        data = chunk.buffers()[1]
        parts.append(np.frombuffer(data, dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)
                     if len(chunk) else np.empty(0, dtype=dtype))
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.dtype(str(array.type)))


def _strings(texts: list[str]) -> Any:
    """A string column from its UTF-8 bytes and offsets (pyarrow's layout), as `int_array` does."""
    import pyarrow as pa

    data = [t.encode() for t in texts]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def _schema() -> Any:
    import pyarrow as pa

    fields = [(c, getattr(pa, INT_TYPES[c])()) for c in COLUMNS if c not in TEXT_COLUMNS]
    fields += [(c, pa.dictionary(pa.int32(), pa.string())) for c in TEXT_COLUMNS]
    return pa.schema(fields)


def frame_bytes(entries: list) -> bytes:
    """One frame of records.partial: its length (4 bytes, little-endian), then the marshal
    of its entries. The length lets `recover()` read a frame whole and `marshal.loads` it:
    `marshal.load` on a file reads item by item through Python, 30 times slower."""
    data = marshal.dumps(entries)
    return len(data).to_bytes(4, "little") + data


def _frames(src: Any) -> Iterator[list]:
    """The entries of each whole frame; a frame cut by a crash ends the file."""
    while True:
        head = src.read(4)
        if len(head) < 4:
            return
        size = int.from_bytes(head, "little")
        data = src.read(size)
        if len(data) < size:
            return
        try:
            yield marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            return


class _GroupBuilder:
    """The rows read so far, until a row group is full. The three columns that differ per
    sample (query_id, sample_index, issue_ns) are lists of values; every other column has
    one value per entry, which a call's samples share, repeated only when the group is
    made into arrays (in C). Texts are kept as codes into their distinct texts."""

    def __init__(self) -> None:
        self.per_sample: list[list[int]] = [[], [], []]
        self.per_entry: list[list] = [[] for _ in COLUMNS[3:]]
        self.runs: list[int] = []  # samples per entry
        self.words: list[dict[str, int]] = [{} for _ in TEXT_COLUMNS]
        self.n = 0

    def add(self, entry: tuple) -> None:
        if is_call(entry):
            ids, indices, issued, dispatch, done, batch_id, worker, status, error = entry
            k = len(ids)
            values: tuple = (dispatch, 0, 0, done, 0, 0, batch_id, worker)
        else:
            ids, indices, issued = (entry[0],), (entry[1],), (entry[2],)
            k = 1
            values, status, error = entry[3:-2], entry[-2], entry[-1]
        for col, v in zip(self.per_sample, (ids, indices, issued)):
            col.extend(v)
        for col, v in zip(self.per_entry, values):
            col.append(v)
        for col, words, text in zip(self.per_entry[-2:], self.words, (status, error)):
            col.append(words.setdefault(text, len(words)))
        self.runs.append(k)
        self.n += k

    def table(self, schema: Any) -> Any:
        import pyarrow as pa

        runs = np.asarray(self.runs, dtype=np.int64)
        repeat = bool((runs != 1).any())
        arrays = []
        for i, field in enumerate(schema):
            if i < 3:
                arrays.append(int_array(self.per_sample[i], field.type))
                continue
            values = np.asarray(self.per_entry[i - 3], dtype=np.int32 if field.name in TEXT_COLUMNS else INT_TYPES[field.name])
            values = np.repeat(values, runs) if repeat else values
            if pa.types.is_dictionary(field.type):
                words = self.words[TEXT_COLUMNS.index(field.name)]
                arrays.append(pa.DictionaryArray.from_arrays(int_array(values, pa.int32()), _strings(list(words))))
            else:
                arrays.append(int_array(values, field.type))
        return pa.Table.from_arrays(arrays, schema=schema)


class RecordsFile:
    """Writes records.parquet a row group at a time (beside it, then renamed by `close`)."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")
        self.schema = _schema()
        self.rows = 0
        try:
            # Delta-packed integers and dictionary-coded text, then zstd: a few bytes a row.
            self._writer = pq.ParquetWriter(
                self.tmp,
                self.schema,
                compression="zstd",
                use_dictionary=list(TEXT_COLUMNS),
                column_encoding={c: "DELTA_BINARY_PACKED" for c in COLUMNS if c not in TEXT_COLUMNS},
            )
        except BaseException:
            self.tmp.unlink(missing_ok=True)  # opened, then its header failed (a full disk)
            raise

    def write(self, group: _GroupBuilder) -> None:
        if group.n:
            self._writer.write_table(group.table(self.schema))
            self.rows += group.n

    def write_columns(self, columns: Mapping[str, Any]) -> None:
        """Whole columns (arrays or lists, one value per row) as row groups."""
        import pyarrow as pa

        n = len(columns["query_id"])
        arrays = []
        for field in self.schema:
            v = columns[field.name]
            if pa.types.is_dictionary(field.type):
                arrays.append(_strings([str(s) for s in v]).dictionary_encode())
            else:
                arrays.append(int_array(v, field.type))
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema), row_group_size=GROUP_ROWS)
        self.rows += n

    def close(self) -> None:
        self._writer.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        # The disk that failed a write fails the footer too, or a failed close left the
        # writer half closed: either way the file goes.
        with contextlib.suppress(Exception):
            self._writer.close()
        self.tmp.unlink(missing_ok=True)


def write_records(run_dir: Path, columns: Mapping[str, Any]) -> Path:
    """records.parquet from whole columns: for tools and tests that make records directly."""
    out = RecordsFile(run_dir / RECORDS)
    try:
        out.write_columns(columns)
    except BaseException:
        out.abort()
        raise
    out.close()
    return out.path


def recover(run_dir: Path) -> int:
    """records.partial -> records.parquet; a frame cut by a crash ends the file. Returns rows."""
    partial = run_dir / PARTIAL_RECORDS
    if not partial.exists():
        return 0
    # Written beside, then renamed: a disk that fills up mid-way leaves records.partial (all
    # that was recorded) and no half file that would read as tampered.
    try:
        out = RecordsFile(run_dir / RECORDS)
    except OSError as e:
        raise write_failed(run_dir / RECORDS, e) from e
    try:
        with open(partial, "rb") as src:
            group = _GroupBuilder()
            for entries in _frames(src):
                for entry in entries:
                    group.add(entry)
                if group.n >= GROUP_ROWS:
                    out.write(group)
                    group = _GroupBuilder()
            out.write(group)
        out.close()
    except OSError as e:
        out.abort()
        raise write_failed(run_dir / RECORDS, e) from e
    partial.unlink()
    return out.rows


class Records:
    """A run's records as columns (numpy arrays), for the summary and reports.

    `columns` maps each name in COLUMNS to an array; read from records.parquet, a column is
    read when first asked for, so a figure that needs three columns holds three. `ok()`,
    `distinct()` and `text_counts()` answer from the file's compact form where they can
    (status codes, row group by row group), without the 8-bytes-a-row arrays."""

    def __init__(self, columns: Mapping[str, Any], n: int | None = None) -> None:
        self.columns = columns
        self.n = len(columns["query_id"]) if n is None else n

    def __len__(self) -> int:
        return self.n

    def ok(self) -> np.ndarray:
        """True for each row whose status is "ok"."""
        return ok_mask(self.columns)

    def distinct(self, name: str) -> int:
        """How many different values the integer column holds."""
        if isinstance(self.columns, _ParquetColumns):
            return self.columns.distinct(name)
        return int(len(np.unique(self.columns[name])))

    def text_counts(self, name: str, rows: np.ndarray) -> dict[str, int]:
        """How often each text of a text column occurs in the rows of the mask `rows`."""
        if isinstance(self.columns, _ParquetColumns):
            codes, words = self.columns.codes(name)
            counts = np.bincount(codes[rows], minlength=len(words))
            return {words[i]: int(k) for i, k in enumerate(counts) if k}
        values, counts = np.unique(np.asarray(self.columns[name], dtype=object)[rows].astype(str), return_counts=True)
        return {str(v): int(k) for v, k in zip(values, counts)}


def ok_mask(columns: Mapping[str, Any]) -> np.ndarray:
    """True for each row whose status is "ok" (from the file's status codes when it can:
    1 byte a row, not an 8-byte object array of texts)."""
    if isinstance(columns, _ParquetColumns):
        codes, words = columns.codes("status")
        return codes == (words.index("ok") if "ok" in words else -1)
    return np.asarray(columns["status"]) == "ok"


def records_path(run_dir: Path) -> Path | None:
    """The folder's records file: records.parquet, or a legacy records.csv; None if neither."""
    for name in (RECORDS, LEGACY_RECORDS):
        if (run_dir / name).is_file():
            return run_dir / name
    return None


def read_records(run_dir: Path) -> Records:
    path = records_path(run_dir)
    if path is None:
        raise ResultsError(f"{run_dir} has no {RECORDS}")
    if path.name == LEGACY_RECORDS:
        return _read_csv(path)
    columns = _ParquetColumns(path)
    return Records(columns, columns.rows)


def scan_records(run_dir: Path) -> int:
    """Reads every value of the records file, a row group at a time (memory bounded by one
    group), and returns the row count; a damaged file raises ResultsError naming it."""
    path = records_path(run_dir)
    if path is None:
        raise ResultsError(f"{run_dir} has no {RECORDS}")
    if path.name == LEGACY_RECORDS:
        return len(_read_csv(path))
    columns = _ParquetColumns(path)
    with _damage(path):
        for i in range(columns.file.num_row_groups):
            group = columns.file.read_row_group(i)
            _no_nulls(path, group)
    return columns.rows


@contextlib.contextmanager
def _damage(path: Path) -> Iterator[None]:
    """Turns whatever pyarrow raises on a damaged file into one ResultsError naming it."""
    import pyarrow as pa

    try:
        yield
    except (FileNotFoundError, PermissionError) as e:
        raise ResultsError(f"{path} cannot be read: {e.strerror}") from e
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ResultsError(f"{path} is damaged: not a readable Parquet file ({_short(e)})") from e


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _no_nulls(path: Path, table: Any) -> None:
    """The harness writes no empty values: a column with some is not its file."""
    for name, col in zip(table.column_names, table.columns):
        if col.null_count:
            raise ResultsError(f"{path} is damaged: column {name} has {col.null_count} empty values")


class _ParquetColumns(Mapping):
    """records.parquet's columns by name, each read on first use and kept.

    A column is read row group by row group into one preallocated array: reading it whole
    would hold Arrow's chunks and their concatenated copy at once, twice the column."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.path = path
        with _damage(path):
            names = tuple(pq.ParquetFile(path).schema_arrow.names)
        if names != COLUMNS:  # before asking for the text columns by name
            raise ResultsError(f"{path} is damaged: columns {','.join(names)[:80]}; expected {','.join(COLUMNS)}")
        with _damage(path):
            self.file = pq.ParquetFile(path, read_dictionary=list(TEXT_COLUMNS))
            schema = self.file.schema_arrow
        for field in _schema():
            got = schema.field(field.name).type
            if got != field.type:
                raise ResultsError(f"{path} is damaged: column {field.name} is {got}, expected {field.type}")
        self.rows = self.file.metadata.num_rows
        self._cache: dict[str, np.ndarray] = {}

    def _groups(self, name: str) -> Iterator[tuple[int, Any]]:
        """(first row, the column's Arrow array) of each row group."""
        start = 0
        for i in range(self.file.num_row_groups):
            with _damage(self.path):
                group = self.file.read_row_group(i, columns=[name])
            _no_nulls(self.path, group)
            for chunk in group.column(0).chunks:
                yield start, chunk
                start += len(chunk)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            if name not in COLUMNS:
                raise KeyError(name)
            if name in TEXT_COLUMNS:
                # Text as an object array over the column's few distinct strings: 8 bytes a row.
                codes, words = self.codes(name)
                self._cache[name] = np.asarray(words, dtype=object)[codes]
            elif (value := self._constant(name)) is not None:
                # One value in every row (a tensor run's token and first-byte columns): one
                # number, read-only, however many rows.
                self._cache[name] = np.broadcast_to(np.asarray(value, dtype=INT_TYPES[name]), (self.rows,))
            else:
                out = np.empty(self.rows, dtype=INT_TYPES[name])
                for start, chunk in self._groups(name):
                    out[start:start + len(chunk)] = numpy_of(chunk)
                self._cache[name] = out
        return self._cache[name]

    def _constant(self, name: str) -> int | None:
        """The column's one value, when every row group's statistics say min = max = it."""
        i = COLUMNS.index(name)
        values = set()
        meta = self.file.metadata
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(i).statistics
            if stats is None or not stats.has_min_max or stats.min != stats.max:
                return None
            values.add(stats.min)
        return values.pop() if len(values) == 1 else None

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """A text column as codes into its list of distinct texts (each group's dictionary
        merged into one), read anew each time: 4 bytes a row while in use."""
        index: dict[str, int] = {}
        out = np.empty(self.rows, dtype=np.int32)
        for start, chunk in self._groups(name):
            local = [index.setdefault(w, len(index)) for w in chunk.dictionary.to_pylist()]
            out[start:start + len(chunk)] = np.asarray(local, dtype=np.int32)[numpy_of(chunk.indices)]
        return out, list(index)

    def distinct(self, name: str) -> int:
        if name in self._cache:
            return int(len(np.unique(self._cache[name])))
        # Each group's distinct values, then theirs: a batch is seldom split between groups.
        parts = [np.unique(numpy_of(chunk)) for _, chunk in self._groups(name)]
        return int(len(np.unique(np.concatenate(parts)))) if parts else 0

    def __iter__(self) -> Iterator[str]:
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)


def _read_csv(path: Path) -> Records:
    """A legacy records.csv, as written before records.parquet."""
    ints: dict[str, list[int]] = {c: [] for c in COLUMNS if c not in TEXT_COLUMNS}
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
    cols: dict[str, Any] = {c: np.asarray(v, dtype=INT_TYPES[c]) for c, v in ints.items()}
    cols["status"] = np.asarray(status, dtype=object)
    cols["error"] = np.asarray(errors, dtype=object)
    return Records(cols)
