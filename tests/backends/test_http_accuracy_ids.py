"""Accuracy mode keeps answers in MLPerf's form: the generated token ids, int32, in LoadGen's
accuracy log, with the count LoadGen got equal to the ids logged.

Each run is a real LoadGen test (harness.run.runner.run) against the truth server of
tests/support/http_servers.py answering known texts, so the ids each sample must log are
known: the server's own `token_ids` when it sends them, else SmolLM2's tokenizer's ids of
the text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.results.records import read_records
from tests.support.http_servers import ServerThread, Timing, openai_app

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

ANSWERS = {
    "request 0": "The cat sat on the mat.",
    "request 1": "Stocks fell sharply on Monday after the report.",
    "request 2": "Rain is expected tomorrow in the north.",
    "request 3": "Yes",  # one word: one token, too short for LoadGen
}


def _server_ids(text: str) -> list[int]:
    """The truth server's own tokenizer: a fixed id per word piece, unlike SmolLM2's."""
    return [1000 + sum(map(ord, text)) % 5000, 7]


def _gguf() -> str:
    from tests.support.smollm2_hf import gguf_path

    return str(gguf_path())


def _prompts(tmp_path: Path, keys: list[str]) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": k}) + "\n" for k in keys))
    return path


def _logged(run_dir: Path) -> dict[int, list[int]]:
    entries = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist() for e in entries}


def _tokens(run_dir: Path) -> dict[int, dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    return {r["sample_index"]: r for r in rows}


def _run(run_harness, srv: ServerThread, dataset: Path, protocol: str = "openai-completions", **options: Any):
    return run_harness(
        backend="http", scenario="Offline", mode="AccuracyOnly", dataset=str(dataset),
        backend_options={"protocol": protocol, "url": srv.url + "/v1", **options},
    )


@pytest.mark.parametrize("protocol", ["openai-completions", "openai-chat"])
@pytest.mark.parametrize("stream", [True, False])
def test_server_ids_are_logged_as_int32(run_harness, tmp_path, protocol, stream):
    keys = ["request 0", "request 1", "request 2"]
    sent: dict[str, list[int]] = {}
    with ServerThread(openai_app(Timing(), answers=ANSWERS, token_ids=_server_ids, sent_ids=sent)) as srv:
        run_dir, s = _run(run_harness, srv, _prompts(tmp_path, keys), protocol, stream=stream)
    logged = _logged(run_dir)
    assert logged == {i: sent[k] for i, k in enumerate(keys)}  # the server's ids, not a tokenizer's
    tokens = _tokens(run_dir)  # written without use_token_latencies: accuracy mode keeps the texts
    for i, k in enumerate(keys):
        assert tokens[i]["text"] == ANSWERS[k]
        assert tokens[i]["ids_source"] == "server"
        assert tokens[i]["n_ids"] == len(logged[i])
    assert s["tokens"]["output_ids_source"] == {"server": 3}
    assert s["harness"]["success_rate"] == 1.0


def test_text_is_tokenized_when_the_server_sends_no_ids(run_harness, tmp_path):
    from llama_cpp import Llama

    vocab = Llama(model_path=_gguf(), vocab_only=True, verbose=False)
    keys = ["request 0", "request 1", "request 2"]
    with ServerThread(openai_app(Timing(), answers=ANSWERS)) as srv:  # no token_ids: llama.cpp-like
        run_dir, s = _run(run_harness, srv, _prompts(tmp_path, keys), tokenizer=_gguf())
    logged = _logged(run_dir)
    for i, k in enumerate(keys):
        assert logged[i] == vocab.tokenize(ANSWERS[k].encode(), add_bos=False, special=False)
        assert vocab.detokenize(logged[i]).decode() == ANSWERS[k]
    assert s["tokens"]["output_ids_source"] == {"tokenizer": 3}


def test_no_ids_and_no_tokenizer_is_one_config_error(run_harness, tmp_path):
    with ServerThread(openai_app(Timing(), answers=ANSWERS)) as srv:
        with pytest.raises(ConfigError, match=r"tokenizer=PATH\.gguf") as info:
            _run(run_harness, srv, _prompts(tmp_path, ["request 0"]))
    assert "\n" not in str(info.value)


def test_a_one_token_answer_is_a_counted_failure(run_harness, tmp_path):
    keys = ["request 0", "request 3"]
    with ServerThread(openai_app(Timing(), answers=ANSWERS, token_ids=lambda text: [5])) as srv:
        run_dir, s = _run(run_harness, srv, _prompts(tmp_path, keys))
    rec = read_records(run_dir).columns
    by_index = dict(zip(rec["sample_index"].tolist(), zip(rec["status"].tolist(), rec["error"].tolist())))
    assert by_index[0] == ("ok", "")
    assert by_index[1][0] == "error" and by_index[1][1].startswith("short_output: the answer has 1 token(s)")
    assert s["harness"]["failed"] == 1
    assert _logged(run_dir)[1] == []  # nothing logged for the failure; LoadGen logged no error
    detail = (run_dir / "mlperf_log_detail.txt").read_text()
    assert '"key": "error_' not in detail and "error_runtime" not in detail


@pytest.mark.parametrize("server_ids", [True, False])
def test_token_latencies_log_first_token_ids_and_the_count_of_ids(run_harness, tmp_path, server_ids):
    """With token latencies (SingleStream), LoadGen logs the first token's data (`token_data`)
    and the n_tokens it got (`token_count`): the first chunk's ids as int32, and exactly the
    number of ids logged in `data`."""
    from llama_cpp import Llama

    vocab = Llama(model_path=_gguf(), vocab_only=True, verbose=False)
    keys = ["request 0", "request 1", "request 2"]
    app = openai_app(Timing(tpot_ms=1), answers=ANSWERS, token_ids=_server_ids if server_ids else None)
    with ServerThread(app) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="SingleStream", mode="AccuracyOnly", dataset=str(_prompts(tmp_path, keys)),
            use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000,
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", **({} if server_ids else {"tokenizer": _gguf()})},
        )
    entries = {e["qsl_idx"]: e for e in json.loads((run_dir / "mlperf_log_accuracy.json").read_text())}
    for i, k in enumerate(keys):
        ids = np.frombuffer(bytes.fromhex(entries[i]["data"]), dtype="<i4").tolist()
        first = np.frombuffer(bytes.fromhex(entries[i]["token_data"]), dtype="<i4").tolist()
        word = ANSWERS[k].split()[0]  # the first chunk: the answer's first word
        assert first == (_server_ids(word) if server_ids else vocab.tokenize(word.encode(), add_bos=False, special=False))
        assert entries[i]["token_count"] == len(ids) > 1
    assert s["loadgen"]["errors"] == []


def test_a_server_refusing_return_token_ids_is_told_what_to_set(run_harness, tmp_path):
    """A strict server (OpenAI's own) answers 400 to a field it does not know: the run stops at
    the warm-up, saying which options to set; with them, it runs on the tokenizer's ids."""
    from aiohttp import web

    inner = openai_app(Timing(), answers=ANSWERS)

    @web.middleware
    async def strict(request: web.Request, handler):
        if request.method == "POST" and "return_token_ids" in await request.json():
            return web.json_response({"error": {"message": "Unrecognized request argument: return_token_ids"}}, status=400)
        return await handler(request)

    inner.middlewares.append(strict)
    from harness.errors import BackendError

    with ServerThread(inner) as srv:
        with pytest.raises(BackendError, match="set server_token_ids=false and tokenizer=PATH.gguf"):
            _run(run_harness, srv, _prompts(tmp_path, ["request 0"]), tokenizer=_gguf())
        run_dir, s = _run(run_harness, srv, _prompts(tmp_path, ["request 0"]), tokenizer=_gguf(), server_token_ids=False)
    assert s["tokens"]["output_ids_source"] == {"tokenizer": 1}
