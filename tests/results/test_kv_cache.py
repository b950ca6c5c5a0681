"""KV-cache figures against hand-computed values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.errors import ConfigError
from harness.results.kv_cache import KvShape, estimate, from_hf_config


def test_llama_70b_like_gqa_by_hand():
    # 80 layers, 8 KV heads (64 attention heads), head dim 128, fp16:
    # 2 * 80 * 8 * 128 * 2 bytes = 327,680 bytes per token.
    est = estimate(KvShape(80, 8, 128, "fp16"), seq_len=8192, batch=16, memory_gb=80, weights_gb=26)
    assert est.bytes_per_token == 327_680
    assert est.bytes_per_sequence == 327_680 * 8192 == 2_684_354_560
    assert est.bytes_for_batch == 2_684_354_560 * 16
    assert est.max_concurrent_sequences == int((80e9 - 26e9) // 2_684_354_560) == 20


def test_issue_example_40_layers():
    est = estimate(KvShape(40, 8, 128, "fp16"), seq_len=8192, batch=16)
    assert est.bytes_per_token == 2 * 40 * 8 * 128 * 2 == 163_840
    assert est.bytes_for_batch == 163_840 * 8192 * 16


@pytest.mark.parametrize(
    "dtype,per_token", [("fp32", 2 * 2 * 4 * 64 * 4), ("bf16", 2 * 2 * 4 * 64 * 2), ("int8", 2 * 2 * 4 * 64), ("int4", 2 * 2 * 4 * 64 / 2)]
)
def test_dtypes(dtype, per_token):
    assert KvShape(2, 4, 64, dtype).bytes_per_token() == per_token


def test_hf_config_uses_kv_heads_not_attention_heads(tmp_path):
    cfg = tmp_path / "config.json"
    # SmolLM2-135M: 30 layers, 9 attention heads, 3 KV heads, hidden 576 -> head dim 64.
    cfg.write_text(json.dumps({"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                               "hidden_size": 576, "torch_dtype": "bfloat16"}))
    shape = from_hf_config(cfg)
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.dtype) == (30, 3, 64, "bf16")
    assert shape.bytes_per_token() == 2 * 30 * 3 * 64 * 2 == 23_040


def test_hf_config_without_kv_heads_is_multi_head(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768}))
    assert from_hf_config(cfg).kv_heads == 12


def test_bad_inputs_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="kv_heads"):
        KvShape(2, 0, 64)
    with pytest.raises(ConfigError, match="no room"):
        estimate(KvShape(2, 2, 64), 128, memory_gb=10, weights_gb=12)


def test_cli_prints_figures_and_what_it_leaves_out(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "kv-cache", "--layers", "80", "--kv-heads", "8", "--head-dim", "128",
         "--seq-len", "8192", "--dtype", "fp16", "--batch", "16", "--memory-gb", "80", "--weights-gb", "26", "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["max_concurrent_sequences"] == 20 and data["bytes_per_token"] == 327_680
    assert "fragmentation" in " ".join(data["left_out"])
    proc = subprocess.run([sys.executable, "-m", "harness", "kv-cache", "--seq-len", "10"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--model-config" in proc.stderr
