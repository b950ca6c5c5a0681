"""Token ids back to text, with the tokenizer a run recorded, as the evaluation scripts do.

MLCommons' scripts decode the logged ids with the model's tokenizer (`tokenizer.decode(ids,
skip_special_tokens=True)`). A run records where its tokenizer lies and its sha256
(references.json), so a folder is rescored with the very file the run used: a .gguf
(llama.cpp's vocabulary, read with llama-cpp-python) or a Hugging Face tokenizer folder
(transformers). An id past the vocabulary is a ResultsError naming the sample: nothing is
decoded into something else, or skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, ResultsError


def tokenizer_sha256(path: Path) -> str:
    """The sha256 of a tokenizer: the .gguf file, or a folder's tokenizer files in name order."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file() and "token" in p.name)
    for file in files:
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Decoder:
    """`decode(ids)` of one tokenizer, and the size of its vocabulary (ids are checked against it)."""

    path: str
    vocab_size: int
    _decode: Callable[[Sequence[int]], str]

    def decode(self, ids: Sequence[int], where: str) -> str:
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ResultsError(f"{where}: token id {bad} is not in the tokenizer's vocabulary "
                               f"of {self.vocab_size} ({self.path}): these ids cannot be decoded")
        return self._decode(ids)


def load_decoder(path: str, sha256: str | None = None) -> Decoder:
    """The tokenizer at `path`; with `sha256`, it must be the file the run recorded."""
    p = Path(path)
    if not p.exists():
        raise ResultsError(f"the run's tokenizer {path} no longer exists: put it back to rescore from the accuracy log")
    if sha256 is not None and tokenizer_sha256(p) != sha256:
        raise ResultsError(f"the run's tokenizer {path} changed since the run (sha256 differs): "
                           "restore the file the run used to decode its accuracy log")
    if p.suffix == ".gguf":
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise ConfigError("decoding ids with a .gguf tokenizer needs llama-cpp-python: pip install llama-cpp-python") from e
        # llama.cpp's loader logs a context warning through Python's stderr even when not
        # verbose: kept out of the command's one-line errors and its JSON
        with contextlib.redirect_stderr(io.StringIO()):
            vocab = Llama(model_path=str(p), vocab_only=True, verbose=False)

        def decode_gguf(ids: Sequence[int]) -> str:
            # special=False: control tokens (end of turn) are not text, as skip_special_tokens
            return vocab.detokenize(list(ids), special=False).decode("utf-8", errors="replace")

        return Decoder(str(p), int(vocab.n_vocab()), decode_gguf)
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise ConfigError("decoding ids with a Hugging Face tokenizer needs transformers: pip install 'loadgen-harness[llm]'") from e
    folder = p.parent if p.is_file() else p
    kwargs = {"gguf_file": p.name} if p.is_file() else {}
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **kwargs)
    except (OSError, ValueError) as e:
        raise ResultsError(f"cannot load the run's tokenizer {path}: {str(e).splitlines()[0]}") from e
    return Decoder(str(p), len(tok), lambda ids: tok.decode(list(ids), skip_special_tokens=True))
