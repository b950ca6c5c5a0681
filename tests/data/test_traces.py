"""Trace files as prompt datasets (harness.data.traces): their rows, their times, and one
clear line for each kind of bad row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.data.prompts import build_prompt_dataset
from harness.errors import DatasetError, HarnessError


def mooncake(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_rows_become_prompts_at_their_times_sharing_their_blocks(tmp_path: Path):
    path = mooncake(tmp_path / "t.jsonl", [
        {"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]},
        {"timestamp": 1250, "input_length": 9, "output_length": 5, "hash_ids": [7, 8, 10]},
        {"timestamp": 3000, "input_length": 6, "output_length": 2, "hash_ids": [11, 12]},
    ])
    ds = build_prompt_dataset(f"trace:{path},block_size=4", 0)
    # ms timestamps, re-based on the first row
    assert ds.arrival_s.tolist() == [0.0, 0.25, 2.0]
    words = [p.prompt.split() for p in ds.prompts]
    assert [len(w) for w in words] == [10, 9, 6]  # one word a token without a tokenizer
    assert [p.max_tokens for p in ds.prompts] == [3, 5, 2]
    # blocks 7 and 8 (8 words) are the same text in both requests; the third block differs
    assert words[0][:8] == words[1][:8] and words[0][8:9] != words[1][8:9]
    assert words[2][:4] != words[0][:4]
    d = ds.describe()
    # request 2 reuses 2 blocks of 4 tokens out of 10 + 9 + 6 prompt tokens
    assert d["expected_reusable_fraction"] == pytest.approx(8 / 25)
    assert d["format"] == "mooncake" and d["rows"] == 3 and d["offered_per_s"] == pytest.approx(2 / 2.0)


def test_time_scale_start_end_and_idle_cap(tmp_path: Path):
    path = mooncake(tmp_path / "t.jsonl", [
        {"timestamp": t, "input_length": 4, "output_length": 2, "hash_ids": []} for t in (0, 100, 200, 5200, 5300)
    ])
    assert build_prompt_dataset(f"trace:{path},time_scale=2", 0).arrival_s.tolist() == [0, 0.05, 0.1, 2.6, 2.65]
    # the 5 s gap capped at 1 s of the replay, after scaling
    capped = build_prompt_dataset(f"trace:{path},max_idle_s=1", 0).arrival_s
    assert np.allclose(capped, [0, 0.1, 0.2, 1.2, 1.3])
    # rows in [0.1, 5.2) s of trace time, re-based on the first kept
    window = build_prompt_dataset(f"trace:{path},start_s=0.1,end_s=5.2", 0)
    assert np.allclose(window.arrival_s, [0, 0.1]) and len(window) == 2


def test_azure_and_burstgpt_csv(tmp_path: Path):
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    ds = build_prompt_dataset(f"trace:{azure}", 0)
    assert ds.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)  # 7 fraction digits read exactly
    assert [p.target_input_tokens for p in ds.prompts] == [374, 396] and ds.prompts[1].max_tokens == 109
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"
                     "118,GPT-4,417,276,693,Conversation log\n")
    ds = build_prompt_dataset(f"trace:{burst}", 0)
    # the failed request (0 response tokens) is left out, and said
    assert ds.arrival_s.tolist() == [0, 113] and ds.describe()["skipped_failed_rows"] == 1


@pytest.mark.parametrize(("content", "where", "words"), [
    ('{"timestamp": 5, "input_length": 4, "output_length": 2}\n{"timestamp": 3, "input_length": 4, "output_length": 2}\n',
     ":2:", "goes backwards"),
    ('{"timestamp": 5, "input_length": -4, "output_length": 2}\n', ":1:", "negative"),
    ('{"timestamp": 5, "input_length": 4.5, "output_length": 2}\n', ":1:", "not a whole number"),
    ('{"timestamp": 5, "input_length": 4}\n', ":1:", "missing output_length"),
])
def test_bad_mooncake_rows_are_one_line_naming_file_and_row(tmp_path: Path, content: str, where: str, words: str):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError) as e:
        build_prompt_dataset(f"trace:{path}", 0)
    message = str(e.value)
    assert f"{path}{where}" in message and words in message and "\n" not in message
    assert isinstance(e.value, HarnessError) and e.value.exit_code == 2


@pytest.mark.parametrize(("content", "where", "words"), [
    ("TIMESTAMP,ContextTokens\n1,2\n", ":1:", "missing column(s) GeneratedTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,abc,3\n", ":3:", "not a whole number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n3,2,3\n2,2,3\n", ":3:", "goes backwards"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n3,2,0\n", ":2:", "zero"),
])
def test_bad_csv_rows_are_one_line_naming_file_and_row(tmp_path: Path, content: str, where: str, words: str):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(DatasetError) as e:
        build_prompt_dataset(f"trace:{path},format=azure", 0)
    assert f"{path}{where}" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
