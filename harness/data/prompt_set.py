"""A prompt dataset in memory: its rows (`Prompt`) and the QSL over them (`PromptDataset`).

The readers of each format (harness.data.prompts, synthetic_prompts, traces) build these;
they live apart so that the readers depend on them and the dispatcher on the readers, one way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from backends.base import PromptSample
from harness.data.datasets import Dataset
from harness.data.media import media_description
from harness.data.validators import VALIDATORS, Check, make_validator, schema_check
from harness.errors import DatasetError

#: counts the tokens of a text in the tokenizer of the model under test
TokenCounter = Callable[[str], int]

@dataclass(frozen=True)
class Prompt(PromptSample):
    """One request's input: `prompt` or `messages`, and/or the prompt's token ids
    (backends.base.PromptSample, what a backend receives), and what scoring reads.

    MLPerf's LLM files carry each prompt's token ids (`tok_input`), which their reference
    SUTs send instead of the text; some rows have ids only. A backend sends one or the
    other (its `prompt_from`), and `PromptDataset.check_sendable` refuses a row without it.
    The generator's length (`target_input_tokens`) and the ids are keyword-only.
    """

    expected: str | None = None
    validator: str | None = None
    #: shared-prefix group (synthetic prefix_groups) and that prefix's length in tokens
    prefix_group: int | None = None
    prefix_tokens: int = 0
    #: text accuracy: the reference answer, the metric that scores it (harness.results.scoring)
    #: and MLPerf's sub-dataset (deepseek-r1, gpt-oss pick their answer extraction by it)
    reference: str | int | float | None = None
    metric: str | None = None
    subset: str | None = None


def _wrong_answer(kind: str, check: Callable[[str], bool]) -> Check:
    return lambda answer: None if check(answer) else f"wrong_answer: validator {kind}"


def expected_reusable_fraction(groups: list[int | None], prefix_tokens: list[int], input_tokens: list[int]) -> float | None:
    """Share of prompt tokens a prefix cache can serve, requests taken in the given order.

    The first request of a group computes its prefix; every later one can reuse it, so
    each group's prefix counts once as a miss. None when there are no input tokens.
    """
    total = sum(input_tokens)
    if total <= 0:
        return None
    seen: set[int] = set()
    reusable = 0
    for g, p in zip(groups, prefix_tokens, strict=True):
        if g is None:
            continue
        if g in seen:
            reusable += p
        seen.add(g)
    return reusable / total


class PromptDataset(Dataset):
    """Prompts held in memory (they are small); load/unload keep the QSL's contract."""

    def __init__(self, name: str, prompts: list[Prompt], source: dict[str, Any]) -> None:
        self.name = name
        self.prompts = prompts
        self.source = source
        #: each sample's checks, in order: its schema's, then its validator's
        self._checks: dict[int, list[Check]] = {}
        for i, p in enumerate(prompts):
            # Built now: a bad schema, regex or validator name fails before the test.
            if p.response_schema is not None:
                self._checks.setdefault(i, []).append(schema_check(p.response_schema, f"{name} sample {i}"))
            if p.validator:
                self._checks.setdefault(i, []).append(_wrong_answer(p.validator, make_validator(p.validator, p.expected, f"{name} sample {i}")))
        #: samples checked against the backend's schema (`expect_schema`), not one of their own
        self.backend_schema_rows = 0
        super().__init__(len(prompts))

    def _make(self, index: int) -> Prompt:
        return self.prompts[index]

    def expect_schema(self, schema: Any, where: str) -> None:
        """Every sample without a schema of its own is checked against `schema`, which the
        backend asks its server for (backends.base.StreamingBackend.answer_schema). Set up
        before the test; the rows, and so the fingerprint, stay the file's."""
        check = schema_check(schema, where)
        for i, p in enumerate(self.prompts):
            if p.response_schema is None:
                self._checks[i] = [check, *self._checks.get(i, [])]
                self.backend_schema_rows += 1

    def judge(self, index: int, answer: str) -> tuple[bool, str | None] | None:
        """(valid, why not: "reason: detail") of `answer` by the sample's checks, the first
        that rejects it; None when the sample has none."""
        checks = self._checks.get(index)
        if not checks:
            return None
        for check in checks:
            failure = check(answer)
            if failure is not None:
                return False, failure
        return True, None

    def validate(self, index: int, answer: str) -> bool | None:
        """The sample's checks' verdict on `answer`; None when it has none."""
        judged = self.judge(index, answer)
        return None if judged is None else judged[0]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for p in self.prompts:
            row = asdict(p)
            for key in ("reference", "metric", "subset", "input_ids", "response_schema"):  # absent: the fingerprints of before
                if row[key] is None:
                    del row[key]
            h.update(json.dumps(row, sort_keys=True).encode())
        return h.hexdigest()

    def check_sendable(self, ids: bool) -> None:
        """Refuse, before any request is built, a row that lacks what the backend sends:
        its token ids (`ids`) or a text prompt. Names the file and row, and the fix."""
        where = self.source.get("path") or self.name
        for i, p in enumerate(self.prompts):
            if ids and p.input_ids is None:
                raise DatasetError(
                    f"{where}: row {i} has no token ids, and the backend sends ids (prompt_from=ids): "
                    "use a dataset that carries them (mlperf:SET:PATH, tok_input) or set prompt_from=text"
                )
            if not ids and p.prompt is None and p.messages is None:
                raise DatasetError(
                    f"{where}: row {i} has token ids only (no text prompt): set prompt_from=ids "
                    "(http with protocol openai-completions, or pytorch-llm) to send them"
                )

    def references(self) -> list[dict[str, Any]] | None:
        """Each sample's reference, metric and sub-dataset, for text accuracy; None when the
        dataset has none (every row has one or none: the readers refuse a mix)."""
        if not any(p.reference is not None for p in self.prompts):
            return None
        return [{"reference": p.reference, "metric": p.metric, "subset": p.subset} for p in self.prompts]

    def describe(self) -> dict[str, Any]:
        with_max = [p.max_tokens for p in self.prompts if p.max_tokens]
        out = {
            **super().describe(),
            **self.source,
            "chat": any(p.messages is not None for p in self.prompts),
            "max_tokens_mean": float(np.mean(with_max)) if with_max else None,
            "with_expected_output": sum(p.expected is not None for p in self.prompts),
            "validators": {v: n for v in VALIDATORS if (n := sum(p.validator == v for p in self.prompts))},
            "with_reference": sum(p.reference is not None for p in self.prompts),
            "with_token_ids": sum(p.input_ids is not None for p in self.prompts),
            # structured outputs: rows with a schema of their own, and those given the backend's
            "with_schema": sum(p.response_schema is not None for p in self.prompts) + self.backend_schema_rows,
        }
        media = media_description(p.messages for p in self.prompts)
        if media is not None:  # images and videos per request, their bytes (harness.data.media)
            out["media"] = media
        if any(p.prefix_group is not None for p in self.prompts):
            out["prefix"] = {
                "groups": self.source.get("prefix_groups"),
                "prefix_len": self.source.get("prefix_len"),
                # each sample once, in index order; the run's own figure is in the summary
                "expected_reusable_fraction": expected_reusable_fraction(
                    [p.prefix_group for p in self.prompts],
                    [p.prefix_tokens for p in self.prompts],
                    [p.target_input_tokens for p in self.prompts],
                ),
            }
        return out
