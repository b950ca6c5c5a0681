"""Timestamped request traces as prompt datasets: `trace:PATH[,format=F,time_scale=X,...]`.

Formats (detected from the file when `format` is not given):
    mooncake   JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (the
               prompt's blocks of `block_size` tokens, 512 in Mooncake's traces: requests
               sharing a hash id share that block of prompt text, so a prefix cache sees it)
    azure      Azure LLM-inference CSV: `TIMESTAMP` (a date and time, or seconds),
               `ContextTokens`, `GeneratedTokens`
    burstgpt   BurstGPT CSV: `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`,
               `Total tokens`, `Log Type`; a row with 0 response tokens is a failed request
               in that trace: it is left out, and counted (`skipped_failed_rows`)

Row j becomes sample j: synthetic text of its input length (the words of
harness.data.synthetic_prompts, exact in the model's tokenizer when one is known), asking
for its output length (max_tokens); its arrival time is its timestamp, re-based on the first
row kept. Controls: `start_s`/`end_s` keep the rows in [start, end) seconds of trace time
from the first row; `time_scale` divides every offset (2: twice as fast, half the span);
`max_idle_s` caps any gap of the replay at that many seconds; `seed` draws the words.

Bad input stops the run before the test with one line naming the file, the line and the fix.
"""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.prompt_set import Prompt, PromptDataset, TokenCounter
from harness.data.synthetic_prompts import _Words
from harness.errors import DatasetError

FORMATS = ("mooncake", "azure", "burstgpt")
#: each CSV format's columns: (timestamp, input length, output length)
CSV_COLUMNS = {"azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
               "burstgpt": ("Timestamp", "Request tokens", "Response tokens")}
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
DEFAULT_BLOCK = 512  # Mooncake's traces hash 512-token blocks
# word streams kept apart from synthetic prompts' ([seed, index]) and prefixes'
_BLOCK_STREAM, _ROW_STREAM = 7_927, 7_933


class TraceDataset(PromptDataset):
    """Prompts with their arrival times: `arrival_s[j]` is row j's offset in the replay."""

    def __init__(self, name: str, prompts: list[Prompt], source: dict[str, Any], arrival_s: np.ndarray) -> None:
        super().__init__(name, prompts, source)
        self.arrival_s = arrival_s


class _Row:
    __slots__ = ("t", "inp", "out", "blocks", "where")

    def __init__(self, t: float, inp: int, out: int, blocks: list[int] | None, where: str) -> None:
        self.t, self.inp, self.out, self.blocks, self.where = t, inp, out, blocks, where


def _length(value: Any, where: str, what: str, allow_zero: bool = False) -> int:
    """A token count: a whole number >= 1 (or 0), written as an int or as a float with no fraction."""
    v = value
    if isinstance(v, str):
        try:
            v = float(v) if v.strip() else None
        except ValueError:
            v = None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        raise DatasetError(f"{where}: {what} {value!r} is not a whole number of tokens; fix or drop the row")
    if v < (0 if allow_zero else 1):
        raise DatasetError(f"{where}: {what} {value!r} is {'negative' if v < 0 else 'zero'}; a request has at "
                           "least 1 token each way: fix or drop the row")
    return int(v)


def _seconds(value: Any, where: str, what: str) -> float:
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        # Azure's "2023-11-16 18:15:46.6805900": fromisoformat takes at most 6 fraction digits
        base, dot, frac = text.partition(".")
        try:
            when = datetime.fromisoformat(base)
            # a zone-less time read as UTC: offsets between rows never cross a DST change
            t = (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()
        except ValueError:
            raise DatasetError(f"{where}: {what} {value!r} is neither seconds nor a date and time "
                               "(YYYY-MM-DD HH:MM:SS[.fff])") from None
        if dot:
            if not frac.isdigit():
                raise DatasetError(f"{where}: {what} {value!r} has a malformed fraction of a second")
            t += int(frac) / 10 ** len(frac)
        return t
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DatasetError(f"{where}: {what} {value!r} is not a time")
    return float(value)


def _read_mooncake(path: Path) -> list[_Row]:
    rows: list[_Row] = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{where}: not a JSON object ({e.msg}); a Mooncake trace has one a line") from e
            if not isinstance(obj, dict):
                raise DatasetError(f"{where}: not a JSON object; a Mooncake trace has one a line")
            missing = [k for k in MOONCAKE_KEYS[:3] if k not in obj]
            if missing:
                raise DatasetError(f"{where}: missing {', '.join(missing)}; a Mooncake row has "
                                   f"{', '.join(MOONCAKE_KEYS)}")
            blocks = obj.get("hash_ids") or []
            if not isinstance(blocks, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in blocks):
                raise DatasetError(f"{where}: hash_ids must be a list of integers (the prompt's block hashes)")
            t = _seconds(obj["timestamp"], where, "timestamp") / 1e3  # Mooncake's timestamps are ms
            rows.append(_Row(t, _length(obj["input_length"], where, "input_length"),
                             _length(obj["output_length"], where, "output_length"), blocks, where))
    return rows


def _read_csv(path: Path, fmt: str) -> tuple[list[_Row], int]:
    """(rows, rows skipped as failed requests)."""
    t_col, in_col, out_col = CSV_COLUMNS[fmt]
    rows: list[_Row] = []
    skipped = 0
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in (t_col, in_col, out_col) if c not in header]
        if missing:
            raise DatasetError(f"{path}:1: missing column(s) {', '.join(missing)}; a {fmt} trace has "
                               f"{', '.join((t_col, in_col, out_col))} (header: {', '.join(header)[:80]})")
        ti, ii, oi = header.index(t_col), header.index(in_col), header.index(out_col)
        for row in reader:
            if not row or not any(cell.strip() for cell in row):
                continue
            where = f"{path}:{reader.line_num}"
            if len(row) <= max(ti, ii, oi):
                raise DatasetError(f"{where}: {len(row)} fields, the header names {len(header)}; fix the row")
            out = _length(row[oi], where, out_col, allow_zero=fmt == "burstgpt")
            if out == 0:  # BurstGPT logs failed requests with no response
                skipped += 1
                continue
            rows.append(_Row(_seconds(row[ti], where, t_col), _length(row[ii], where, in_col), out, None, where))
    return rows, skipped


def detect_format(path: Path) -> str:
    with open(path, encoding="utf-8-sig") as f:
        first = f.readline().strip()
    if first.startswith("{"):
        return "mooncake"
    header = [h.strip() for h in first.split(",")]
    for fmt, cols in CSV_COLUMNS.items():
        if cols[0] in header:
            return fmt
    raise DatasetError(f"{path}:1: not a known trace (a Mooncake JSONL row, or an Azure or BurstGPT CSV header); "
                       f"name it with format={'|'.join(FORMATS)}")


def replay_offsets(times: np.ndarray, time_scale: float, max_idle_s: float | None) -> np.ndarray:
    """Offsets of the replay from trace times (already ascending): re-based on the first,
    divided by time_scale, then each gap capped at max_idle_s."""
    gaps = np.diff(times - times[0]) / time_scale
    if max_idle_s is not None:
        gaps = np.minimum(gaps, max_idle_s)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def _float_param(params: dict[str, str], key: str, spec: str, default: float | None, low: float,
                 strict: bool = False) -> float | None:
    if key not in params:
        return default
    try:
        value = float(params.pop(key))
    except ValueError:
        raise DatasetError(f"dataset spec {spec!r}: {key} must be a number") from None
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise DatasetError(f"dataset spec {spec!r}: {key} must be {'>' if strict else '>='} {low:g}")
    return value


def load_trace(spec: str, path: Path, params: dict[str, str], seed: int, count: TokenCounter | None) -> TraceDataset:
    params = dict(params)
    if not path.is_file():
        raise DatasetError(f"trace file {path} does not exist")
    fmt = params.pop("format", None) or detect_format(path)
    if fmt not in FORMATS:
        raise DatasetError(f"dataset spec {spec!r}: format {fmt!r}; use one of {', '.join(FORMATS)}")
    time_scale = _float_param(params, "time_scale", spec, 1.0, 0.0, strict=True)
    start_s = _float_param(params, "start_s", spec, 0.0, 0.0)
    end_s = _float_param(params, "end_s", spec, None, 0.0, strict=True)
    max_idle_s = _float_param(params, "max_idle_s", spec, None, 0.0)
    try:
        block = int(params.pop("block_size", DEFAULT_BLOCK))
        s = int(params.pop("seed", seed))
    except ValueError:
        raise DatasetError(f"dataset spec {spec!r}: block_size and seed must be integers") from None
    if block < 1:
        raise DatasetError(f"dataset spec {spec!r}: block_size must be at least 1")
    if params:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(params)}")
    skipped = 0
    if fmt == "mooncake":
        rows = _read_mooncake(path)
    else:
        rows, skipped = _read_csv(path, fmt)
    for before, row in zip(rows, rows[1:], strict=False):
        if row.t < before.t:
            raise DatasetError(f"{row.where}: timestamp goes backwards ({row.t:.6g} s after {before.t:.6g} s on "
                               f"{before.where.rsplit(':', 1)[1]}); sort the trace by time")
    t0 = rows[0].t if rows else 0.0
    kept = [r for r in rows if r.t - t0 >= (start_s or 0.0) and (end_s is None or r.t - t0 < end_s)]
    if not kept:
        raise DatasetError(f"{path}: no request in [{start_s:g}, {end_s if end_s is not None else 'end'}) s of the "
                           "trace; widen start_s/end_s")
    assert time_scale is not None
    offsets = replay_offsets(np.array([r.t for r in kept]), time_scale, max_idle_s)
    words = _Words(count, spec)
    blocks: dict[int, tuple[str, int]] = {}
    prompts: list[Prompt] = []
    seen: set[int] = set()
    reusable = total = 0
    for j, r in enumerate(kept):
        text, got = _prompt(words, r, j, s, block, blocks)
        prompts.append(Prompt(text, None, r.out, None, target_input_tokens=got))
        # a prefix cache reuses the leading blocks some earlier request already sent
        lead = 0
        for b in r.blocks or ():
            if b not in seen:
                break
            lead += 1
        reusable += min(lead * block, r.inp)
        seen.update(r.blocks or ())
        total += r.inp
    source: dict[str, Any] = {
        "path": str(path), "format": fmt, "rows": len(kept), "skipped_failed_rows": skipped,
        "time_scale": time_scale, "start_s": start_s, "end_s": end_s, "max_idle_s": max_idle_s,
        "span_s": float(offsets[-1]),
        "offered_per_s": float((len(kept) - 1) / offsets[-1]) if offsets[-1] > 0 else None,
        "seed": s, "lengths_counted_in": "tokenizer" if count else "words",
    }
    if fmt == "mooncake":
        source.update(block_size=block, distinct_blocks=len(blocks),
                      expected_reusable_fraction=reusable / total if total else None)
    return TraceDataset(f"trace:{fmt}", prompts, source, offsets)


def _prompt(words: Any, r: _Row, j: int, seed: int, block: int, blocks: dict[int, tuple[str, int]]) -> tuple[str, int]:
    """Row j's prompt: its hash blocks' shared texts (a block's text is the same in every
    request that names it), the last one cut to the input length, then words of its own
    up to that length; a row without blocks is words of its own only."""
    parts: list[str] = []
    have = 0
    for b in r.blocks or ():
        if have >= r.inp:
            break
        if b not in blocks:
            blocks[b] = words.text(np.random.default_rng([seed, _BLOCK_STREAM, b]), block)
        text, n = blocks[b]
        take = min(n, r.inp - have)
        parts.append(text if take == n else " ".join(text.split(" ")[:take]))
        have += take
    if have < r.inp or not parts:
        lead = " ".join(parts)
        text, got = words.text(np.random.default_rng([seed, _ROW_STREAM, j]), max(1, r.inp - have), lead, have)
        return text, got
    text = " ".join(parts)
    return text, (words.count(text) if words.count is not None else have)
