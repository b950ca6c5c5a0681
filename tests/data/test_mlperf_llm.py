"""LLM accuracy datasets: MLPerf's processed files written here in their shipped formats, and JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.data.audio import AUDIO_READERS
from harness.data.benchmarks import RECORDS
from harness.data.mlperf_llm import READERS, read_jsonl, read_llm_dataset
from harness.errors import DatasetError


def cnn_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "input": ["Summarize: one", "Summarize: two", "Summarize: three"],
        "tok_input": [[1, 2, 3], [4, 5], [6]],
        "output": ["First summary.", "Second summary.", "Third summary."],
    })


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_cnn_eval_json_as_pandas_writes_it(tmp_path):
    path = tmp_path / "cnn_eval.json"
    cnn_frame().to_json(path)
    dataset = read_llm_dataset("llama3.1-8b", path)
    assert dataset.kind == "llama3.1-8b" and len(dataset.rows) == 3
    assert dataset.rows[1].prompt == "Summarize: two"
    assert dataset.rows[1].input_ids == (4, 5)
    assert dataset.references() == ["First summary.", "Second summary.", "Third summary."]
    assert {row.metric for row in dataset.rows} == {"rouge"}


def test_a_missing_column_names_the_file_and_the_column(tmp_path):
    path = tmp_path / "cnn_eval.json"
    cnn_frame().drop(columns=["output"]).to_json(path)
    with pytest.raises(DatasetError, match=r"cnn_eval.json: no column 'output' \(columns: input, tok_input\)"):
        read_llm_dataset("llama3.1-8b", path)


def test_a_wrong_type_names_the_file_the_row_and_the_column(tmp_path):
    frame = cnn_frame()
    frame.loc[2, "output"] = None
    path = tmp_path / "cnn_eval.json"
    frame.to_json(path)
    with pytest.raises(DatasetError, match=r"cnn_eval.json: row 2: column 'output' is empty, expected text"):
        read_llm_dataset("llama3.1-8b", path)
    pd.DataFrame({"input": [17], "tok_input": [[1]], "output": ["x"]}).to_json(path)
    with pytest.raises(DatasetError, match=r"row 0: column 'input' is int, expected text"):
        read_llm_dataset("llama3.1-8b", path)
    frame = cnn_frame()
    frame.at[1, "tok_input"] = ["a", "b"]
    frame.to_json(path)
    with pytest.raises(DatasetError, match=r"row 1: column 'tok_input' is not a non-empty list of token ids"):
        read_llm_dataset("llama3.1-8b", path)


def test_a_file_that_is_not_a_table_is_one_line(tmp_path):
    path = tmp_path / "cnn_eval.json"
    path.write_text("{not json")
    with pytest.raises(DatasetError, match=r"cnn_eval.json: cannot be read as a pandas table"):
        read_llm_dataset("llama3.1-8b", path)
    with pytest.raises(DatasetError, match="does not exist"):
        read_llm_dataset("llama3.1-8b", tmp_path / "absent.json")


def test_open_orca_pickle_with_its_processed_columns(tmp_path):
    frame = pd.DataFrame({
        "id": ["niv.1", "t0.2"], "system_prompt": ["", "Be brief."], "question": ["Q1", "Q2"],
        "output": ["Answer one.", "Answer two."], "input": ["<s>[INST] Q1 [/INST]", "<s>[INST] Q2 [/INST]"],
        "tok_input": [np.array([1, 2, 3]), np.array([1, 4])], "tok_output": [[7], [8]],
    })
    path = tmp_path / "open_orca.pkl"
    frame.to_pickle(path)
    dataset = read_llm_dataset("llama2-70b", path)
    assert [r.input_ids for r in dataset.rows] == [(1, 2, 3), (1, 4)]
    assert dataset.references() == ["Answer one.", "Answer two."]
    # a filtered frame whose index was not reset: positions and labels would disagree
    frame.iloc[[1]].to_pickle(path)
    with pytest.raises(DatasetError, match="its index is not 0..0"):
        read_llm_dataset("llama2-70b", path)


def test_deepseek_r1_pickle(tmp_path):
    frame = pd.DataFrame({
        "text_input": ["What is 2+2?", "Pick one."], "ground_truth": ["4", "B"],
        "dataset": ["aime", "gpqa"], "question": ["2+2", "pick"],
    })
    path = tmp_path / "deepseek.pkl"
    frame.to_pickle(path)
    dataset = read_llm_dataset("deepseek-r1", path)
    assert [(r.prompt, r.reference, r.dataset, r.metric) for r in dataset.rows] == [
        ("What is 2+2?", "4", "aime", "deepseek-r1"), ("Pick one.", "B", "gpqa", "deepseek-r1")]
    assert dataset.rows[0].input_ids is None
    frame.rename(columns={"ground_truth": "gt_output"}).to_pickle(path)
    assert read_llm_dataset("deepseek-r1", path).references() == ["4", "B"]
    frame.loc[1, "ground_truth"] = float("nan")
    frame.to_pickle(path)
    with pytest.raises(DatasetError, match=r"row 1: column 'ground_truth' has no reference answer"):
        read_llm_dataset("deepseek-r1", path)


def test_gpt_oss_parquet_and_pickle(tmp_path):
    frame = pd.DataFrame({
        "input_tokens": [[200006, 17], [200006, 18, 19]], "dataset": ["aime25", "gpqa_diamond"],
        "ground_truth": ["7", "C"],
    })
    parquet = tmp_path / "acc_eval_inputs.parquet"
    frame.to_parquet(parquet)
    dataset = read_llm_dataset("gpt-oss", parquet)
    assert [r.input_ids for r in dataset.rows] == [(200006, 17), (200006, 18, 19)]
    assert [r.dataset for r in dataset.rows] == ["aime25", "gpqa_diamond"]
    pickle = tmp_path / "acc_eval_inputs.pkl"
    frame.rename(columns={"input_tokens": "tok_input"}).to_pickle(pickle)
    assert read_llm_dataset("gpt-oss", pickle).references() == ["7", "C"]
    frame.drop(columns=["dataset"]).to_parquet(parquet)
    with pytest.raises(DatasetError, match=r"acc_eval_inputs.parquet: no column 'dataset'"):
        read_llm_dataset("gpt-oss", parquet)


def test_jsonl_rows_with_prompt_or_messages_answer_and_metric(tmp_path):
    path = write_jsonl(tmp_path / "answers.jsonl", [
        {"prompt": "Capital of France?", "answer": "Paris"},
        {"messages": [{"role": "user", "content": "2+2?"}], "answer": 4, "metric": "regex:(\\d+)"},
        {"prompt": "Summarize this.", "answer": "A summary.", "metric": "rouge", "id": "s3"},
    ])
    dataset = read_jsonl(path)
    assert [r.metric for r in dataset.rows] == ["exact_match", "regex:(\\d+)", "rouge"]
    assert dataset.rows[1].messages == ({"role": "user", "content": "2+2?"},)
    assert dataset.references() == ["Paris", 4, "A summary."]
    assert [r.metric for r in read_jsonl(path, default_metric="choice").rows][0] == "choice"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "q", "messages": [{"role": "user", "content": "q"}], "answer": "a"}, "exactly one of"),
        ({"prompt": "q"}, "no `answer`"),
        ({"prompt": "q", "answer": ["a"]}, "`answer` is list"),
        ({"prompt": 3, "answer": "a"}, "`prompt` is int"),
        ({"messages": [{"role": "user"}], "answer": "a"}, "`messages` must be"),
        ({"prompt": "q", "answer": "a", "metric": "bleu"}, "unknown metric 'bleu'"),
        ({"prompt": "q", "answer": "a", "metric": "regex:("}, "not a valid regular expression"),
        ({"prompt": "q", "answer": "a", "metric": "choice:ABD"}, "without gaps"),
        ({"prompt": "q", "answer": "a", "reference": "a"}, "unknown field"),
        ("just a string", "expected a JSON object"),
    ],
)
def test_a_bad_jsonl_row_is_one_line_naming_the_file_and_row(tmp_path, row, message):
    path = write_jsonl(tmp_path / "answers.jsonl", [{"prompt": "fine", "answer": "ok"}, row])
    with pytest.raises(DatasetError, match=message) as raised:
        read_jsonl(path)
    assert "answers.jsonl: row 1 (line 2)" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_empty_files_and_unknown_kinds(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DatasetError, match="has no rows"):
        read_jsonl(tmp_path / "empty.jsonl")
    path = tmp_path / "cnn_eval.json"
    cnn_frame().iloc[0:0].to_json(path)
    with pytest.raises(DatasetError, match="has no rows"):
        read_llm_dataset("llama3.1-8b", path)
    with pytest.raises(DatasetError, match="unknown LLM dataset kind 'mixtral'; use one of llama3.1-8b"):
        read_llm_dataset("mixtral", path)
    # every benchmark with a dataset names a reader that exists, and every reader serves one
    assert {b.reader for b in RECORDS if b.dataset} == set(READERS) | set(AUDIO_READERS)  # whisper's: audio
