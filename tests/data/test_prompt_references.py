"""Prompt datasets that carry references: MLPerf's processed files and a JSONL with `answer`,
read into prompts whose rows keep the reference and the metric that scores it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.data.hashing import sha256_file
from harness.data.prompts import build_prompt_dataset
from harness.data.spec import parse_dataset_spec
from harness.errors import DatasetError


def write_cnn_eval(path: Path, rows: list[tuple[str, str]]) -> Path:
    """A cnn_eval.json as MLCommons ships it: a pandas DataFrame written with to_json."""
    import pandas as pd

    frame = pd.DataFrame({"input": [p for p, _ in rows], "tok_input": [[1, 2, 3 + i] for i in range(len(rows))],
                          "output": [r for _, r in rows]})
    frame.to_json(path)
    return path


def test_cnn_eval_rows_are_prompts_with_rouge_references(tmp_path):
    path = write_cnn_eval(tmp_path / "cnn_eval.json", [("Summarize: a", "ref a"), ("Summarize: b", "ref b")])
    ds = build_prompt_dataset(f"mlperf:llama3.1-8b:{path}", seed=0)
    assert [p.prompt for p in ds.prompts] == ["Summarize: a", "Summarize: b"]
    assert ds.references() == [{"reference": "ref a", "metric": "rouge", "subset": None},
                               {"reference": "ref b", "metric": "rouge", "subset": None}]
    d = ds.describe()
    assert d["sha256"] == sha256_file(path) and d["set"] == "llama3.1-8b" and d["with_reference"] == 2
    # each row keeps its tok_input, for prompt_from=ids
    assert [p.input_ids for p in ds.prompts] == [(1, 2, 3), (1, 2, 4)] and d["with_token_ids"] == 2


def test_mlperf_spec_round_trips_and_names_its_sets(tmp_path):
    spec = parse_dataset_spec("mlperf:llama2-70b:data/orca.pkl")
    assert (spec.kind, spec.path, spec.params) == ("mlperf", Path("data/orca.pkl"), {"set": "llama2-70b"})
    assert parse_dataset_spec(str(spec.with_path(Path("/abs/orca.pkl")))) == spec.with_path(Path("/abs/orca.pkl"))
    with pytest.raises(DatasetError, match="mlperf:SET:PATH with SET one of llama3.1-8b"):
        parse_dataset_spec("mlperf:llama9:x.json")


def test_jsonl_answers_become_references_with_their_metric(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"prompt": "2+2?", "answer": 4}) + "\n"
                    + json.dumps({"prompt": "Pick", "answer": "B", "metric": "choice:ABCD"}) + "\n")
    ds = build_prompt_dataset(str(path), seed=0)
    assert ds.references() == [{"reference": 4, "metric": "exact_match", "subset": None},
                               {"reference": "B", "metric": "choice:ABCD", "subset": None}]
    assert ds.describe()["sha256"] == sha256_file(path)


def test_a_row_without_a_reference_is_one_line_naming_it(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"prompt": "a", "answer": "x"}) + "\n" + json.dumps({"prompt": "b"}) + "\n")
    with pytest.raises(DatasetError, match=r"qa\.jsonl: row 1 has no `answer`") as info:
        build_prompt_dataset(str(path), seed=0)
    assert "\n" not in str(info.value)
    path.write_text(json.dumps({"prompt": "a", "metric": "rouge"}) + "\n")
    with pytest.raises(DatasetError, match=r"qa\.jsonl:1: `metric` without an `answer`"):
        build_prompt_dataset(str(path), seed=0)
    # a cnn_eval.json row without its reference: the reader names file, row and column
    import pandas as pd

    pd.DataFrame({"input": ["p0", "p1"], "tok_input": [[1], [2]], "output": ["r0", None]}).to_json(tmp_path / "c.json")
    with pytest.raises(DatasetError, match=r"c\.json: row 1: column 'output' is empty"):
        build_prompt_dataset(f"mlperf:llama3.1-8b:{tmp_path / 'c.json'}", seed=0)


def test_prompts_without_references_keep_their_fingerprint():
    """Adding the reference fields (and the token ids, and a row's schema) changed no existing dataset's
    fingerprint (repro checks)."""
    ds = build_prompt_dataset("synthetic:isl=8,osl=4,n=3", seed=0)
    assert ds.references() is None
    import hashlib
    from dataclasses import asdict

    h = hashlib.sha256()
    for p in ds.prompts:
        row = {k: v for k, v in asdict(p).items() if k not in ("reference", "metric", "subset", "input_ids", "response_schema")}
        h.update(json.dumps(row, sort_keys=True).encode())
    assert ds.fingerprint() == h.hexdigest()
