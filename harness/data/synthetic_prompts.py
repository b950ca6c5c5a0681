"""Synthetic prompt sets: `synthetic[:isl=128,osl=64,n=256,seed=0,prefix_groups=N,prefix_len=L]`.

Seeded random prompts of `isl` input tokens, each asking for `osl` output tokens; both take
a fixed number or a distribution (lognormal(median,sigma), normal(mean,std), uniform(lo,hi)).
Prompts are built from common English words that are one token in the usual BPE
vocabularies; with the tokenizer of the model under test, each prompt is made exactly `isl`
tokens in it (see harness.data.prompts for the whole grammar and shared prefixes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.data.prompt_set import Prompt, PromptDataset, TokenCounter
from harness.errors import DatasetError

# Frequent English words that are single tokens (with their leading space) in GPT-2,
# Llama and SmolLM vocabularies: one word per input token, give or take.
_WORDS = tuple((
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can who out said up into do time them some could other than then now only its may new "
    "about these two first any like over after also made well most back through where much your "
    "way down should because long each just those people how too little state good very make world "
    "still own see men work year day same under last might great never man old life while off show "
    "part place right high since small large every find both home name does here water city long "
    "word music light game team house story point group power money hand open fact line best body"
).split())  # fmt: skip

_DIST = re.compile(r"^(lognormal|normal|uniform)\(\s*([0-9.eE+-]+)\s*,\s*([0-9.eE+-]+)\s*\)$")
# The prefix generator's stream is kept apart from the samples' ([seed, index]) streams.
_PREFIX_STREAM = 7_919


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


class _Words:
    """Turns word draws into texts of an exact token length in the model's tokenizer.

    Without a tokenizer every word counts as one token. With one, only words that are a
    single token both at the start and after a space are kept; a text whose count still
    differs (a merge across words) is trimmed or extended word by word until it matches.
    """

    def __init__(self, count: TokenCounter | None, spec: str) -> None:
        self.count = count
        # Without a tokenizer the original list (duplicates included) keeps old seeds' prompts.
        words = list(_WORDS)
        if count is not None:
            words = [w for w in dict.fromkeys(_WORDS) if count(w) == 1 and count(" " + w) == 1]
            if len(words) < 16:
                raise DatasetError(
                    f"dataset spec {spec!r}: only {len(words)} of the prompt words are one token in this "
                    "model's tokenizer; synthetic prompts need at least 16"
                )
        self.words = words

    def text(self, rng: np.random.Generator, k: int, lead: str = "", lead_tokens: int = 0) -> tuple[str, int]:
        """(text, its token count): `lead` (of `lead_tokens` tokens) followed by k words."""
        picks = [self.words[w] for w in rng.integers(0, len(self.words), size=k)]

        def join() -> str:
            body = " ".join(picks)
            return f"{lead} {body}" if lead else body

        text = join()
        if self.count is None:
            return text, lead_tokens + k
        want = lead_tokens + k
        got = self.count(text)
        added = 0
        while got != want and picks and added <= 4 * k + 16:
            if got > want:
                picks.pop()
            else:
                picks.append(self.words[added % len(self.words)])
                added += 1
            text = join()
            got = self.count(text)
        return text, got


def synthetic_prompts(spec: str, params: dict[str, str], seed: int, count: TokenCounter | None = None) -> PromptDataset:
    isl = params.pop("isl", "128")
    osl = params.pop("osl", "64")
    try:
        n = int(params.pop("n", "256"))
        s = int(params.pop("seed", str(seed)))
        groups = int(params.pop("prefix_groups", "0"))
        prefix_len = int(params.pop("prefix_len", "0"))
    except ValueError as e:
        raise DatasetError(f"dataset spec {spec!r}: n, seed, prefix_groups and prefix_len must be integers") from e
    if n < 1:
        raise DatasetError(f"dataset spec {spec!r}: n must be at least 1")
    if (groups > 0) != (prefix_len > 0) or groups < 0 or prefix_len < 0:
        raise DatasetError(f"dataset spec {spec!r}: shared prefixes need both prefix_groups >= 1 and prefix_len >= 1")
    draw_in, draw_out = length_sampler(isl, "isl", spec), length_sampler(osl, "osl", spec)
    words = _Words(count, spec)
    prefixes: list[tuple[str, int]] = []
    for g in range(groups):
        prefixes.append(words.text(np.random.default_rng([s, _PREFIX_STREAM, g]), prefix_len))
        if count is not None and prefixes[-1][1] != prefix_len:
            raise DatasetError(f"dataset spec {spec!r}: prefix {g} came out {prefixes[-1][1]} tokens, not {prefix_len}")
    prompts = []
    for i in range(n):
        # One generator per index: sample i is the same whatever n is.
        rng = np.random.default_rng([s, i])
        k = draw_in(rng)
        if groups:
            g = i % groups
            lead, lead_n = prefixes[g]
            text, got = words.text(rng, max(1, k - prefix_len), lead, lead_n)
            prompts.append(Prompt(text, None, draw_out(rng), None, target_input_tokens=got, prefix_group=g, prefix_tokens=lead_n))
        else:
            text, got = words.text(rng, k)
            prompts.append(Prompt(text, None, draw_out(rng), None, target_input_tokens=got))
    source: dict[str, Any] = {
        "isl": isl, "osl": osl, "seed": s, "lengths_counted_in": "tokenizer" if count else "words",
    }  # fmt: skip
    if groups:
        source.update(prefix_groups=groups, prefix_len=prefix_len)
    return PromptDataset("synthetic-prompts", prompts, source)
