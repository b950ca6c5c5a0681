"""The CLI explains itself (#16): help texts, examples, and hints towards the fix."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from harness.cli.main import main as cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "80"}, catch_exceptions=False)


def test_kv_cache_takes_the_dtype_from_the_config_or_says_which_default(tmp_path: Path):
    shape = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    (tmp_path / "fp32.json").write_text(json.dumps({**shape, "torch_dtype": "float32"}))
    (tmp_path / "bare.json").write_text(json.dumps(shape))
    fp32 = invoke("kv-cache", "--model-config", str(tmp_path / "fp32.json"), "--seq-len", "100")
    assert fp32.exit_code == 0 and "(fp32)" in fp32.output and "torch_dtype 'float32'" in fp32.output
    bare = invoke("kv-cache", "--model-config", str(tmp_path / "bare.json"), "--seq-len", "100")
    assert "(fp16)" in bare.output and "by default" in bare.output and "--dtype" in bare.output
    js = invoke("kv-cache", "--model-config", str(tmp_path / "bare.json"), "--seq-len", "100", "--json")
    assert "by default" in json.loads(js.output)["dtype_source"]
