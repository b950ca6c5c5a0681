"""SmolLM2 cut to its first layers (tests/support/smollm2_layers.py), the model the llama3.1-8b
proof serves: a real model llama.cpp loads, whose kept tensors are the original's bytes and
whose name says what it is."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.smollm2_hf import gguf_path
from tests.support.smollm2_layers import first_layers


@pytest.mark.parallel
def test_the_cut_model_keeps_the_first_blocks_bytes_and_says_so(tmp_path):
    from gguf import GGUFReader
    from llama_cpp import Llama

    cut = first_layers(2, tmp_path / "smollm2-2.gguf")
    whole, part = GGUFReader(gguf_path()), GGUFReader(cut)
    source = {t.name: t for t in whole.tensors}
    names = [t.name for t in part.tensors]
    assert {n.split(".")[1] for n in names if n.startswith("blk.")} == {"0", "1"}
    # everything outside the blocks is kept (embeddings, final norm), each tensor as it was
    assert {n for n in source if not n.startswith("blk.")} <= set(names)
    for t in part.tensors:
        assert t.tensor_type == source[t.name].tensor_type and np.array_equal(t.data, source[t.name].data), t.name
    assert len(names) < len(source)

    model = Llama(model_path=str(cut), n_ctx=128, n_threads=1, verbose=False)
    assert model.metadata["general.name"] == "SmolLM2-135M-Instruct, first 2 of 30 layers"
    assert model.metadata["llama.block_count"] == "2"
    vocab = Llama(model_path=str(gguf_path()), vocab_only=True, verbose=False)
    prompt = b"Summarize this news article in one sentence."
    assert model.tokenize(prompt) == vocab.tokenize(prompt)  # the same tokenizer
    out = model.create_completion("The council", max_tokens=4, temperature=0)
    assert out["usage"]["completion_tokens"] == 4
    assert not (tmp_path / "smollm2-2.gguf.tmp").exists()


@pytest.mark.parallel
def test_a_layer_count_outside_the_model_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"layers must be 1\.\.30 \(the model has 30 blocks\), not 31"):
        first_layers(31, tmp_path / "x.gguf")
    assert not list(tmp_path.iterdir())
