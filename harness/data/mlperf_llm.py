"""LLM accuracy datasets: MLPerf's processed files as shipped, and a generic JSONL.

Each reader returns an `LLMDataset`: its rows in file order (row i is qsl_idx i, as the
official scripts index them), each with the prompt, its token ids when the file has them,
the reference, and the metric that scores it (the benchmark record's `scorer`). A set's
reader is its record's `reader` (harness.data.benchmarks); the formats, READERS' keys, are
the sets' files as read at mlcommons/inference commit b66003e10e2db4b8c36a448b0545ec90fcc6e9e9:

    rouge-json         pandas.read_json: input (prompt text), tok_input (ids), output (reference
                       summary)                          language/llama3.1-8b/dataset.py (cnn_eval.json)
    rouge-pickle       pandas.read_pickle: input, tok_input, output (processorca.py renames
                       response -> output)               language/llama2-70b/dataset.py (Open-Orca)
    exact-text-pickle  text_input (prompt), ground_truth (or gt_output), dataset (gpqa, mmlu_pro,
                       math500, aime, livecodebench...)  language/deepseek-r1/mlperf/utils.py
    exact-ids-parquet  parquet or pickle: tok_input (or input_tokens, v4.0+), dataset, ground_truth
                                       language/gpt-oss-120b/utils/tokenization.py, eval_mlperf_accuracy.py
    jsonl              one object a line: `prompt` (text) or `messages` ([{role, content}]),
                       `answer` (the reference), optional `metric` (see ROW_METRICS)

Pickles run code when read, as pandas.read_pickle always does: read only files you trust
(MLPerf's own downloads). A missing column or a value of the wrong type is one
`DatasetError` line naming the file, the row and the column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.data.benchmarks import DATASETS, Benchmark, for_dataset
from harness.data.jsonl import json_objects
from harness.errors import DatasetError

INSTALL_HINT = "pip install 'loadgen-harness[accuracy]'"

#: what a JSONL row's `metric` may say; the argument after ":" is checked here, scored in
#: harness.results.scoring (rouge: rouge.py; the others: exact_match.scorer_for)
ROW_METRICS = ("rouge", "exact_match", "choice", "regex", "json_field")


@dataclass(frozen=True)
class LLMRow:
    """One sample: exactly one of `prompt` and `messages`, the reference, and how it is scored."""

    prompt: str | None
    messages: tuple[dict[str, str], ...] | None
    input_ids: tuple[int, ...] | None
    reference: str | int | float
    #: rouge | exact_match | choice[:LETTERS] | regex:PATTERN | json_field:PATH, or an MLPerf
    #: benchmark's scorer (harness.data.benchmarks.Scorer)
    metric: str
    #: MLPerf's sub-dataset (an exact-match scorer picks the answer-extraction rule by it)
    dataset: str | None = None


@dataclass(frozen=True)
class LLMDataset:
    """A file's rows in order (row i answers qsl_idx i) and what it was read as."""

    kind: str
    path: Path
    rows: tuple[LLMRow, ...]

    def references(self) -> list[str | int | float]:
        return [row.reference for row in self.rows]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:
        raise DatasetError(f"reading MLPerf's processed datasets needs pandas: {INSTALL_HINT}") from e
    return pandas


def _frame(path: Path, read: Callable[[Any, Path], Any]) -> Any:
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    pd = _pandas()
    try:
        frame = read(pd, path)
    except Exception as e:  # pandas raises many kinds for a file that is not what it should be
        raise DatasetError(f"{path}: cannot be read as a pandas table ({type(e).__name__}: {e})") from e
    if not isinstance(frame, pd.DataFrame):
        raise DatasetError(f"{path}: holds a {type(frame).__name__}, not a pandas DataFrame")
    if len(frame) == 0:
        raise DatasetError(f"{path}: has no rows")
    if not frame.index.equals(pd.RangeIndex(len(frame))):
        # the scripts look rows up by position (or by label, llama2-70b): both agree only on 0..n-1
        raise DatasetError(f"{path}: its index is not 0..{len(frame) - 1}, so qsl_idx would not name rows by position")
    return frame


def _column(frame: Any, path: Path, *names: str) -> str:
    for name in names:
        if name in frame.columns:
            return name
    wanted = " or ".join(repr(n) for n in names)
    raise DatasetError(f"{path}: no column {wanted} (columns: {', '.join(map(str, frame.columns))})")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _text(value: Any, path: Path, row: int, column: str) -> str:
    if _missing(value):
        raise DatasetError(f"{path}: row {row}: column {column!r} is empty, expected text")
    if not isinstance(value, str):
        raise DatasetError(f"{path}: row {row}: column {column!r} is {type(value).__name__}, expected text")
    return value


def _ids(value: Any, path: Path, row: int, column: str) -> tuple[int, ...]:
    if hasattr(value, "tolist"):  # numpy arrays in pickles and parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not value or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise DatasetError(f"{path}: row {row}: column {column!r} is not a non-empty list of token ids")
    return tuple(value)


def _reference(value: Any, path: Path, row: int, column: str) -> str | int | float:
    if _missing(value) or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DatasetError(f"{path}: row {row}: column {column!r} has no reference answer (found {value!r})")
    return value


def _rouge_file(path: Path, record: Benchmark, read: Callable[[Any, Path], Any]) -> LLMDataset:
    frame = _frame(path, read)
    for name in ("input", "tok_input", "output"):
        _column(frame, path, name)
    rows = []
    for i, (prompt, ids, output) in enumerate(zip(frame["input"], frame["tok_input"], frame["output"])):
        rows.append(LLMRow(
            prompt=_text(prompt, path, i, "input"), messages=None, input_ids=_ids(ids, path, i, "tok_input"),
            reference=_text(output, path, i, "output"), metric=_scorer(record),
        ))
    return LLMDataset(_kind(record), path, tuple(rows))


def read_rouge_json(path: Path, record: Benchmark) -> LLMDataset:
    """A JSON table (CNN-DailyMail's `cnn_eval.json`): read with pandas.read_json as dataset.py does."""
    return _rouge_file(path, record, lambda pd, p: pd.read_json(p))


def read_rouge_pickle(path: Path, record: Benchmark) -> LLMDataset:
    """A processed pickle (Open-Orca's): read with pandas.read_pickle as dataset.py does."""
    return _rouge_file(path, record, lambda pd, p: pd.read_pickle(p))


def read_exact_text_pickle(path: Path, record: Benchmark) -> LLMDataset:
    """A pickle of text prompts: prompts in text_input (tokenised by the SUT), references in
    ground_truth (or gt_output), the sub-dataset in dataset; tok_input is kept when present."""
    frame = _frame(path, lambda pd, p: pd.read_pickle(p))
    truth = _column(frame, path, "ground_truth", "gt_output")
    _column(frame, path, "text_input")
    _column(frame, path, "dataset")
    tokens = "tok_input" if "tok_input" in frame.columns else None
    rows = []
    for i in range(len(frame)):
        row = frame.iloc[i]
        rows.append(LLMRow(
            prompt=_text(row["text_input"], path, i, "text_input"), messages=None,
            input_ids=_ids(row[tokens], path, i, tokens) if tokens else None,
            reference=_reference(row[truth], path, i, truth), metric=_scorer(record),
            dataset=_text(row["dataset"], path, i, "dataset"),
        ))
    return LLMDataset(_kind(record), path, tuple(rows))


def read_exact_ids_parquet(path: Path, record: Benchmark) -> LLMDataset:
    """A parquet (or pickle) of token-id prompts: ids in tok_input (input_tokens from v4.0),
    the sub-dataset in dataset, references in ground_truth. Rubric-graded rows are not scored."""
    if path.suffix in (".pkl", ".pickle"):
        frame = _frame(path, lambda pd, p: pd.read_pickle(p))
    else:
        frame = _frame(path, lambda pd, p: pd.read_parquet(p))
    tokens = _column(frame, path, "tok_input", "input_tokens")
    _column(frame, path, "dataset")
    _column(frame, path, "ground_truth")
    text = next((c for c in ("text_input", "prompt") if c in frame.columns), None)
    rows = []
    for i in range(len(frame)):
        row = frame.iloc[i]
        rows.append(LLMRow(
            prompt=_text(row[text], path, i, text) if text else None, messages=None,
            input_ids=_ids(row[tokens], path, i, tokens),
            reference=_reference(row["ground_truth"], path, i, "ground_truth"), metric=_scorer(record),
            dataset=_text(row["dataset"], path, i, "dataset"),
        ))
    return LLMDataset(_kind(record), path, tuple(rows))


def _kind(record: Benchmark) -> str:
    if record.dataset is None:
        raise DatasetError(f"benchmark {record.name} has no MLPerf dataset the harness reads")
    return record.dataset


def _scorer(record: Benchmark) -> str:
    if record.scorer is None:
        raise DatasetError(f"benchmark {record.name} has no scorer the harness knows")
    return record.scorer


def check_metric(metric: Any, where: str) -> str:
    """A row's `metric` must be one of ROW_METRICS, with the argument it needs."""
    if not isinstance(metric, str):
        raise DatasetError(f"{where}: `metric` must be a string, such as rouge or exact_match")
    kind, colon, argument = metric.partition(":")
    if kind not in ROW_METRICS:
        raise DatasetError(f"{where}: unknown metric {metric!r}; use one of rouge, exact_match, "
                           "choice[:LETTERS], regex:PATTERN, json_field:PATH")
    if kind in ("rouge", "exact_match") and colon:
        raise DatasetError(f"{where}: metric {kind} takes no argument (found {metric!r})")
    if kind == "choice" and colon and argument != "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:len(argument)]:
        raise DatasetError(f"{where}: choice letters must run from A without gaps, such as choice:ABCDE (found {argument!r})")
    if kind == "regex":
        if not argument:
            raise DatasetError(f"{where}: metric regex needs a pattern: regex:PATTERN")
        try:
            re.compile(argument)
        except re.error as e:
            raise DatasetError(f"{where}: metric regex: {argument!r} is not a valid regular expression ({e})") from e
    if kind == "json_field" and not [k for k in argument.split(".") if k]:
        raise DatasetError(f"{where}: metric json_field needs a field path: json_field:PATH")
    return metric


def _jsonl_row(obj: dict[str, Any], where: str, default_metric: str) -> LLMRow:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise DatasetError(f"{where}: give exactly one of `prompt` (text) and `messages` (chat turns)")
    if prompt is not None and not isinstance(prompt, str):
        raise DatasetError(f"{where}: `prompt` is {type(prompt).__name__}, expected text")
    turns = None
    if messages is not None:
        if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
        ):
            raise DatasetError(f"{where}: `messages` must be a non-empty list of {{role, content}} strings")
        turns = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    if "answer" not in obj:
        raise DatasetError(f"{where}: no `answer` (the reference the output is scored against)")
    answer = obj["answer"]
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise DatasetError(f"{where}: `answer` is {type(answer).__name__}, expected text or a number")
    metric = check_metric(obj.get("metric", default_metric), where)
    unknown = set(obj) - {"prompt", "messages", "answer", "metric", "id"}
    if unknown:
        raise DatasetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return LLMRow(prompt=prompt, messages=turns, input_ids=None, reference=answer, metric=metric)


def read_jsonl(path: Path, default_metric: str = "exact_match") -> LLMDataset:
    """A JSONL of `prompt` or `messages`, `answer`, optional `metric` (else `default_metric`)."""
    check_metric(default_metric, f"{path}: the default metric")
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    rows = [_jsonl_row(obj, where, default_metric)
            for where, obj in json_objects(path, lambda row, line: f"{path}: row {row} (line {line})",
                                           "`prompt` or `messages` and `answer`")]
    if not rows:
        raise DatasetError(f"{path}: has no rows")
    return LLMDataset("jsonl", path, tuple(rows))


#: a benchmark record's `reader` -> the function reading its set's file
READERS: Mapping[str, Callable[[Path, Benchmark], LLMDataset]] = MappingProxyType({
    "rouge-json": read_rouge_json,
    "rouge-pickle": read_rouge_pickle,
    "exact-text-pickle": read_exact_text_pickle,
    "exact-ids-parquet": read_exact_ids_parquet,
})


def read_llm_dataset(kind: str, path: Path) -> LLMDataset:
    """The file of an MLPerf set (benchmarks.DATASETS, as mlperf:SET:FILE names it) read by its
    benchmark's reader, or a generic JSONL (kind `jsonl`)."""
    if kind == "jsonl":
        return read_jsonl(path)
    record = for_dataset(kind)
    if record is None or record.reader is None:
        raise DatasetError(f"unknown LLM dataset kind {kind!r}; use one of {', '.join((*DATASETS, 'jsonl'))}")
    if record.reader not in READERS:  # an audio set (harness.data.audio): not prompts
        raise DatasetError(f"mlperf:{kind} is audio, not prompts: send it with protocol openai-transcriptions")
    return READERS[record.reader](path, record)
