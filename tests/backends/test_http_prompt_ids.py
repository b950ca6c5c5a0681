"""MLPerf's token-id prompts (`tok_input`) sent as the prompt: `prompt_from: ids`.

Real runs (harness.run.runner.run, real LoadGen) against the truth server, which records
each request's prompt as it arrived. A cnn_eval.json written as MLCommons ships it (a
pandas DataFrame with `input`, `tok_input`, `output`) gives each row known ids, so the
test knows exactly which list each request must carry and how many input tokens it has.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.run_config import RunConfig
from harness.errors import ConfigError, DatasetError
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, openai_app

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

# rows of different lengths, so a count taken from the wrong row would show
IDS = [[1, 415, 2, 9, 77], [1, 88, 3], [1, 5, 6, 7, 8, 9, 10, 11], [1, 300]]


def write_cnn_eval(path: Path) -> Path:
    """cnn_eval.json as MLCommons ships it: a DataFrame (input, tok_input, output) written with to_json."""
    import pandas as pd

    pd.DataFrame({"input": [f"Summarize article {i}." for i in range(len(IDS))], "tok_input": IDS,
                  "output": [f"summary {i}" for i in range(len(IDS))]}).to_json(path)
    return path


def write_gpt_oss(path: Path) -> Path:
    """gpt-oss's pickle: token ids only (tok_input), no text prompt, as MLCommons ships it."""
    import pandas as pd

    pd.DataFrame({"tok_input": IDS, "dataset": ["aime25"] * len(IDS),
                  "ground_truth": [str(i) for i in range(len(IDS))]}).to_pickle(path)
    return path


def _config(dataset: str, url: str, **options: object) -> RunConfig:
    return RunConfig(
        backend="http", scenario="Offline", dataset=dataset, min_query_count=8, min_duration_s=0.1,
        backend_options={"protocol": "openai-completions", "url": url, "prompt_from": "ids", **options},
    )  # fmt: skip


def test_ids_go_out_as_the_prompt_and_count_the_input_exactly(tmp_path):
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    received: list[object] = []
    # no usage: the input count is the client's, from the ids it sent
    with ServerThread(openai_app(Timing(usage=False), received=received)) as srv:
        outcome = runner.run(_config(f"mlperf:llama3.1-8b:{data}", srv.url + "/v1"), tmp_path / "results")
    warmup, timed = received[0], received[1:]
    assert warmup == list(reversed(IDS[0]))  # the warm-up shares no prefix with sample 0
    assert len(timed) == 8 and all(p in IDS for p in timed), timed
    entries = [json.loads(line) for line in (outcome.run_dir / "tokens.jsonl").read_text().splitlines()]
    assert all(e["input_tokens"] == len(IDS[e["sample_index"]]) for e in entries)
    tokens = outcome.summary["tokens"]
    assert tokens["input_tokens"] == sum(len(IDS[e["sample_index"]]) for e in entries)
    assert tokens["input_token_count_source"] == {"the dataset's token ids": 8}
    assert outcome.summary["backend"]["prompt_from"] == "ids"


def test_rows_with_ids_only_are_prompts_sent_as_ids_and_refused_as_text(tmp_path):
    data = write_gpt_oss(tmp_path / "acc_eval_inputs.pkl")
    received: list[object] = []
    with ServerThread(openai_app(Timing(), received=received)) as srv:  # usage: prompt_tokens = ids sent
        outcome = runner.run(_config(f"mlperf:gpt-oss:{data}", srv.url + "/v1"), tmp_path / "results")
        assert outcome.summary["harness"]["success_rate"] == 1.0
        assert all(p in IDS for p in received[1:])
        assert outcome.summary["tokens"]["input_token_count_source"] == {"usage": 8}
        with pytest.raises(DatasetError) as info:
            runner.run(_config(f"mlperf:gpt-oss:{data}", srv.url + "/v1", prompt_from="text"), tmp_path / "r2")
    msg = str(info.value)
    assert "\n" not in msg and f"{data}: row 0 has token ids only" in msg and "prompt_from=ids" in msg


def test_chat_cannot_take_ids_one_config_error(tmp_path):
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    cfg = RunConfig(backend="http", scenario="Offline", dataset=f"mlperf:llama3.1-8b:{data}",
                    backend_options={"protocol": "openai-chat", "url": "http://127.0.0.1:9/v1", "prompt_from": "ids"})
    with pytest.raises(ConfigError) as info:
        runner.run(cfg, tmp_path / "results")
    msg = str(info.value)
    assert "\n" not in msg and "prompt_from is not an option of protocol openai-chat (it is openai-completions's)" in msg
    assert not (tmp_path / "results").exists()


def test_a_prompt_file_without_ids_names_the_row_and_the_fix(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hello"}) + "\n")
    received: list[object] = []
    with ServerThread(openai_app(Timing(), received=received)) as srv:
        with pytest.raises(DatasetError) as info:
            runner.run(_config(str(data), srv.url + "/v1"), tmp_path / "results")
    msg = str(info.value)
    assert "\n" not in msg and f"{data}: row 0 has no token ids" in msg
    assert "mlperf:SET:PATH" in msg and "prompt_from=text" in msg
    assert received == []  # refused before the warm-up sent anything
