"""Loading a backend leaves the process as it found it: environment, sys.path, torch's
thread count and global random state. Parity loads two backends in one process, and a
library caller may run one in its own: neither may inherit what a backend set for itself.

Runs in a fresh interpreter, so nothing the test session did before can hide a change.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch

    def state():
        return {
            "environ": dict(os.environ),
            "sys_path": list(sys.path),
            "threads": torch.get_num_threads(),
            "rng": torch.random.get_rng_state().sum().item(),
        }

    from backends.base import LoadContext
    from backends.pytorch import PyTorchBackend, PyTorchOptions
    from backends.pytorch_llm import PyTorchLLMBackend, PyTorchLLMOptions
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    # A tiny Llama and a word-level tokenizer, made here: nothing is downloaded.
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "a", "b", "c"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained("tiny-llm")
    fast.save_pretrained("tiny-llm")

    torch.set_num_threads(2)
    before = state()
    tensor = PyTorchBackend(PyTorchOptions(threads=1, input_shape=(8,)))
    tensor.load(LoadContext("userpkg.models:build", 4, "Offline", seed=7, threads=1))
    out = tensor.predict({"input": torch.zeros(2, 8).numpy()})
    llm = PyTorchLLMBackend(PyTorchLLMOptions(threads=1))
    llm.load(LoadContext("tiny-llm", 1, "SingleStream", seed=7, threads=2))
    llm.close()
    after = state()
    print(json.dumps({"before": before, "after": after, "rows": int(out[0].shape[0]), "threads": tensor.threads}))
    """
)

USER_PACKAGE = """
import torch

def build():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
"""


def test_loading_backends_changes_no_process_state(tmp_path: Path) -> None:
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(USER_PACKAGE)
    (tmp_path / "probe.py").write_text(SCRIPT)
    # -I: the cwd is not on sys.path, as for the `harness` script; site.main() then adds the
    # installed packages (-S kept it from running before -I took effect).
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import site; site.main(); exec(open('probe.py').read())"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    before, after = result["before"], result["after"]
    assert result["rows"] == 2 and result["threads"] == 1  # the user package in the cwd was found and ran
    assert after["environ"] == before["environ"]  # no HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE left behind
    assert after["sys_path"] == before["sys_path"]
    assert after["threads"] == before["threads"] == 2
    assert after["rng"] == before["rng"]
