"""Local token counting for the http backend's `tokenizer` option: a whitespace count, or
a .gguf file's vocabulary (and chat template) read with llama-cpp-python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import BackendError, ConfigError


class Tokenizer:
    """Counts tokens locally: a chunk's when the server sends no usage, and a prompt's.

    A chat request's prompt is what the server tokenizes after applying the model's chat
    template (SmolLM2's adds a system prompt: 128 words of content were 158 tokens), so a
    .gguf tokenizer counts messages through the template it carries."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._chat: Any = None
        self._ids: Any = None  # text -> ids: a .gguf only (whitespace has no ids)
        if spec == "whitespace":
            self._count = lambda text: len(text.split())
            return
        path = Path(spec)
        if path.suffix != ".gguf" or not path.is_file():
            raise ConfigError(f"tokenizer {spec!r}: give 'whitespace' or an existing .gguf file")
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise BackendError("tokenizer from a .gguf file needs llama-cpp-python: pip install llama-cpp-python") from e
        vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
        self._ids = lambda text: vocab.tokenize(text.encode(), add_bos=False, special=False)
        self._count = lambda text: len(self._ids(text)) if text else 0
        template = (vocab.metadata or {}).get("tokenizer.chat_template")
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            def special(token: int) -> str:
                return vocab.detokenize([token], special=True).decode(errors="replace")

            formatter = Jinja2ChatFormatter(template=template, eos_token=special(vocab.token_eos()),
                                            bos_token=special(vocab.token_bos()), add_generation_prompt=True)
            # the template writes the special tokens out as text; the server parses them back
            self._chat = lambda messages: len(vocab.tokenize(formatter(messages=messages).prompt.encode(),
                                                             add_bos=False, special=True))

    @property
    def chat_method(self) -> str:
        return "tokenizer, chat template" if self._chat is not None else "tokenizer, message contents only"

    def count(self, text: str) -> int:
        return self._count(text)

    @property
    def makes_ids(self) -> bool:
        """A .gguf turns text into token ids; 'whitespace' only counts words."""
        return self._ids is not None

    def ids(self, text: str) -> list[int]:
        """The token ids of an answer's text, as the server's tokenizer would make them."""
        return list(self._ids(text)) if text else []

    def count_chat(self, messages: list[dict[str, str]]) -> int:
        if self._chat is not None:
            return self._chat(messages)
        return sum(self._count(m.get("content", "")) for m in messages)
