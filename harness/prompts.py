"""Prompt datasets for generative (HTTP/LLM) backends, behind the same QSL as tensors.

Specs, as given to `--dataset`:
    prompts.jsonl  (or jsonl:PATH)   one JSON object a line: `prompt` (text) or `messages`
                                     (chat turns), optional `max_tokens`, optional expected
                                     output (`expected`, `output` or `completion`)
    synthetic[:isl=128,osl=64,n=256,seed=0]
                                     seeded random prompts of about `isl` input tokens, each
                                     asking for `osl` output tokens (sent as max_tokens)

`isl`/`osl` take a fixed number or a distribution: lognormal(median,sigma),
normal(mean,std), uniform(lo,hi). Synthetic prompts are built from common English words
that are one token in the usual BPE vocabularies, so `isl` is close to the prompt's real
token count; the server's `usage` (or a local tokenizer) gives the exact figure reported.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets import Dataset, parse_spec
from harness.errors import DatasetError

# Frequent English words that are single tokens (with their leading space) in GPT-2,
# Llama and SmolLM vocabularies: one word per input token, give or take.
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can who out said up into do time them some could other than then now only its may new "
    "about these two first any like over after also made well most back through where much your "
    "way down should because long each just those people how too little state good very make world "
    "still own see men work year day same under last might great never man old life while off show "
    "part place right high since small large every find both home name does here water city long "
    "word music light game team house story point group power money hand open fact line best body"
).split()

_DIST = re.compile(r"^(lognormal|normal|uniform)\(\s*([0-9.eE+-]+)\s*,\s*([0-9.eE+-]+)\s*\)$")


@dataclass(frozen=True)
class Prompt:
    """One request's input. Exactly one of `prompt` and `messages` is set."""

    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    max_tokens: int | None = None
    expected: str | None = None
    #: the generator's target input length (synthetic only; 0 when unknown)
    target_input_tokens: int = 0

    def text(self) -> str:
        """The whole input as one text, for local token counting."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.get("content", "") for m in self.messages or ())


class PromptDataset(Dataset):
    """Prompts held in memory (they are small); load/unload keep the QSL's contract."""

    def __init__(self, name: str, prompts: list[Prompt], source: dict[str, Any]) -> None:
        self.name = name
        self.prompts = prompts
        self.source = source
        super().__init__(len(prompts))

    def _make(self, index: int) -> Prompt:
        return self.prompts[index]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for p in self.prompts:
            h.update(json.dumps(asdict(p), sort_keys=True).encode())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        with_max = [p.max_tokens for p in self.prompts if p.max_tokens]
        return {
            **super().describe(),
            **self.source,
            "chat": any(p.messages is not None for p in self.prompts),
            "max_tokens_mean": float(np.mean(with_max)) if with_max else None,
            "with_expected_output": sum(p.expected is not None for p in self.prompts),
        }


# --- JSONL ----------------------------------------------------------------------------


def load_jsonl(path: Path) -> PromptDataset:
    if not path.is_file():
        raise DatasetError(f"prompt file {path} does not exist")
    prompts: list[Prompt] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{where}: not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict):
                raise DatasetError(f"{where}: expected a JSON object with `prompt` or `messages`")
            prompts.append(_prompt_from(obj, where))
    if not prompts:
        raise DatasetError(f"prompt file {path} holds no prompts")
    return PromptDataset("jsonl", prompts, {"path": str(path)})


def _prompt_from(obj: dict[str, Any], where: str) -> Prompt:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise DatasetError(f"{where}: give exactly one of `prompt` (text) and `messages` (chat turns)")
    if prompt is not None and not isinstance(prompt, str):
        raise DatasetError(f"{where}: `prompt` must be a string")
    turns: tuple[dict[str, str], ...] | None = None
    if messages is not None:
        if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise DatasetError(f"{where}: `messages` must be a non-empty list of {{role, content}} strings")
        turns = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise DatasetError(f"{where}: `max_tokens` must be a positive integer")
    expected = next((obj[k] for k in ("expected", "output", "completion") if k in obj), None)
    if expected is not None and not isinstance(expected, str):
        raise DatasetError(f"{where}: the expected output must be a string")
    unknown = set(obj) - {"prompt", "messages", "max_tokens", "expected", "output", "completion", "id"}
    if unknown:
        raise DatasetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return Prompt(prompt, turns, max_tokens, expected)


# --- synthetic ------------------------------------------------------------------------


def length_sampler(value: str, key: str, spec: str) -> Callable[[np.random.Generator], int]:
    """'128' or 'lognormal(1024,0.5)' -> a function drawing a length >= 1 from a generator."""
    value = value.strip()
    if value.isdigit():
        n = int(value)
        if n < 1:
            raise DatasetError(f"dataset spec {spec!r}: {key} must be at least 1")
        return lambda rng: n
    m = _DIST.match(value)
    if not m:
        raise DatasetError(
            f"dataset spec {spec!r}: {key}={value!r} is neither a number nor "
            "lognormal(median,sigma) / normal(mean,std) / uniform(lo,hi)"
        )
    kind, a, b = m.group(1), float(m.group(2)), float(m.group(3))
    if a <= 0 or b < 0 or (kind == "uniform" and b < a):
        raise DatasetError(f"dataset spec {spec!r}: {key}={value!r} has impossible parameters")
    if kind == "lognormal":
        return lambda rng: max(1, int(round(a * np.exp(rng.normal(0.0, b)))))
    if kind == "normal":
        return lambda rng: max(1, int(round(rng.normal(a, b))))
    return lambda rng: max(1, int(round(rng.uniform(a, b))))


def synthetic_prompts(spec: str, params: dict[str, str], seed: int) -> PromptDataset:
    isl = params.pop("isl", "128")
    osl = params.pop("osl", "64")
    try:
        n = int(params.pop("n", "256"))
        s = int(params.pop("seed", str(seed)))
    except ValueError as e:
        raise DatasetError(f"dataset spec {spec!r}: n and seed must be integers") from e
    if n < 1:
        raise DatasetError(f"dataset spec {spec!r}: n must be at least 1")
    draw_in, draw_out = length_sampler(isl, "isl", spec), length_sampler(osl, "osl", spec)
    prompts = []
    for i in range(n):
        # One generator per index: sample i is the same whatever n is.
        rng = np.random.default_rng([s, i])
        k = draw_in(rng)
        words = rng.integers(0, len(_WORDS), size=k)
        prompts.append(Prompt(" ".join(_WORDS[w] for w in words), None, draw_out(rng), None, k))
    return PromptDataset("synthetic-prompts", prompts, {"isl": isl, "osl": osl, "seed": s})


def build_prompt_dataset(spec: str, seed: int) -> PromptDataset:
    kind, _, rest = spec.partition(":")
    if kind in ("jsonl", "npy") or spec.endswith(".jsonl"):
        # The runner resolves an existing file path to `npy:ABSPATH`; a .jsonl file is
        # still a prompt file, so every spelling lands here.
        return load_jsonl(Path(rest if kind in ("jsonl", "npy") else spec))
    kind, params = parse_spec(spec)
    if kind != "synthetic":
        raise DatasetError(
            f"unknown prompt dataset {spec!r}: use a .jsonl file of prompts or "
            "synthetic:isl=N,osl=N[,n=N,seed=S]"
        )
    ds = synthetic_prompts(spec, params, seed)
    if params:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(params)}")
    return ds
