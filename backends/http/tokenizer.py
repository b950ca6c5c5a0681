"""Local token counting for the http backend's `tokenizer` option, with one of three kinds:

    whitespace        words: a count, no ids, no chat template
    a .gguf file      its vocabulary and chat template, read with llama-cpp-python (llama.cpp's)
    a folder          a Hugging Face tokenizer folder (tokenizer.json and its config, as vLLM
                      and `vllm bench serve` take a model), read with transformers

Each loader gives the same three functions (count, ids, chat count); nothing is downloaded:
a name that is no local file or folder is refused, a hub name included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BackendError, ConfigError

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class _Loaded:
    """What one kind of tokenizer gives: a count, and where it has them, ids and a chat count."""

    count: Callable[[str], int]
    ids: Callable[[str], list[int]] | None = None  # text -> ids; None: only counts (whitespace)
    chat: Callable[[Messages], int] | None = None  # the messages after the model's chat template


class Tokenizer:
    """Counts tokens locally: a chunk's when the server sends no usage, and a prompt's.

    A chat request's prompt is what the server tokenizes after applying the model's chat
    template (SmolLM2's adds a system prompt: 128 words of content were 158 tokens), so a
    .gguf or a folder counts messages through the template it carries."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        path = Path(spec)
        if spec == "whitespace":
            self._loaded = _Loaded(count=lambda text: len(text.split()))
        elif path.suffix == ".gguf" and path.is_file():
            self._loaded = _gguf(path)
        elif path.is_dir() and (path / "tokenizer.json").is_file():
            self._loaded = _folder(path)
        else:
            what = ("a folder without tokenizer.json" if path.is_dir() else "not a .gguf file" if path.is_file()
                    else "no such file or folder (nothing is downloaded)")
            raise ConfigError(f"tokenizer {spec!r}: {what}: give 'whitespace', a .gguf file "
                              "or a local tokenizer folder (tokenizer.json)")

    @property
    def chat_method(self) -> str:
        return "tokenizer, chat template" if self._loaded.chat is not None else "tokenizer, message contents only"

    def count(self, text: str) -> int:
        return self._loaded.count(text) if text else 0

    @property
    def makes_ids(self) -> bool:
        """A .gguf or a folder turns text into token ids; 'whitespace' only counts words."""
        return self._loaded.ids is not None

    def ids(self, text: str) -> list[int]:
        """The token ids of an answer's text, as the server's tokenizer would make them."""
        if self._loaded.ids is None:
            raise BackendError(f"tokenizer {self.spec!r} counts words and makes no token ids")
        return self._loaded.ids(text) if text else []

    def count_chat(self, messages: Messages) -> int:
        if self._loaded.chat is not None:
            return self._loaded.chat(messages)
        return sum(self.count(m.get("content", "")) for m in messages)


def _gguf(path: Path) -> _Loaded:
    try:
        from llama_cpp import Llama
    except ImportError as e:
        raise BackendError("tokenizer from a .gguf file needs llama-cpp-python: pip install llama-cpp-python") from e
    vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)

    def ids(text: str) -> list[int]:
        return list(vocab.tokenize(text.encode(), add_bos=False, special=False))

    template = (vocab.metadata or {}).get("tokenizer.chat_template")
    if not template:
        return _Loaded(count=lambda text: len(ids(text)), ids=ids)
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def special(token: int) -> str:
        return vocab.detokenize([token], special=True).decode(errors="replace")

    formatter = Jinja2ChatFormatter(template=template, eos_token=special(vocab.token_eos()),
                                    bos_token=special(vocab.token_bos()), add_generation_prompt=True)

    def chat(messages: Messages) -> int:
        # the template writes the special tokens out as text; the server parses them back
        return len(vocab.tokenize(formatter(messages=messages).prompt.encode(), add_bos=False, special=True))

    return _Loaded(count=lambda text: len(ids(text)), ids=ids, chat=chat)


def _folder(path: Path) -> _Loaded:
    """A Hugging Face tokenizer folder, loaded as vLLM loads it (transformers' AutoTokenizer),
    so that the chat template renders as on the server: transformers' own sandboxed Jinja
    environment, with the folder's special tokens, `add_generation_prompt=True`."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise BackendError("a tokenizer folder needs transformers: pip install 'loadgen-harness[llm]'") from e
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - a broken folder fails anywhere in transformers (KeyError, ValueError, ...)
        first = (str(e).splitlines() or [""])[0]
        raise ConfigError(f"tokenizer {str(path)!r}: transformers cannot load this folder ({type(e).__name__}: {first}): "
                          "give the model's tokenizer folder as save_pretrained writes it") from e
    # Counting runs per streamed chunk: the Rust tokenizer under transformers' wrapper gives
    # the same ids as tok.encode without its Python layers (~3 us a chunk against ~14).
    rust = getattr(tok, "backend_tokenizer", None)
    if rust is None:
        raise ConfigError(f"tokenizer {str(path)!r}: transformers loaded no fast tokenizer from its tokenizer.json")

    def ids(text: str) -> list[int]:
        # no special tokens added: an answer's text, or a prompt the template already wrote out
        return list(rust.encode(text, add_special_tokens=False).ids)

    if tok.chat_template is None:
        return _Loaded(count=lambda text: len(ids(text)), ids=ids)

    def chat(messages: Messages) -> int:
        # vLLM renders the text first, then tokenizes it without adding special tokens
        return len(ids(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)))

    return _Loaded(count=lambda text: len(ids(text)), ids=ids, chat=chat)
