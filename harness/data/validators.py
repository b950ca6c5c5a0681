"""Task success: whether a generated answer is right, not only whether the request returned.

A prompt dataset may name a validator (for the whole file, or per JSONL line); the
expected output is the reference it checks against:

    exact      the answer, stripped of surrounding whitespace, equals the expected text
    contains   the expected text occurs in the answer (case-insensitive)
    regex      the expected text is a regular expression found in the answer (re.search)
    json       the answer parses as JSON; with an expected text, it also equals that JSON

Checked once per request when the request completes, on its whole text; the verdict is
kept per request in tokens.jsonl ("valid"), and the summary counts it as success only
when the request also succeeded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from harness.errors import DatasetError

VALIDATORS = ("exact", "contains", "regex", "json")


def _exact(answer: str, expected: str | None) -> bool:
    return expected is not None and answer.strip() == expected.strip()


def _contains(answer: str, expected: str | None) -> bool:
    return expected is not None and expected.casefold() in answer.casefold()


def _json(answer: str, expected: str | None) -> bool:
    text = answer.strip()
    # Models often wrap JSON in a Markdown code fence; the fence is not part of the answer.
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    if fence:
        text = fence.group(1)
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return expected is None or value == json.loads(expected)


def make_validator(kind: str, expected: str | None, where: str) -> Callable[[str], bool]:
    """A check of one answer; the reference is checked here, so a bad regex fails at load."""
    if kind not in VALIDATORS:
        raise DatasetError(f"{where}: unknown validator {kind!r}; use one of {', '.join(VALIDATORS)}")
    if kind in ("exact", "contains", "regex") and expected is None:
        raise DatasetError(f"{where}: validator {kind} needs an expected output (`expected`)")
    if kind == "regex":
        try:
            pattern = re.compile(expected or "")
        except re.error as e:
            raise DatasetError(f"{where}: expected is not a valid regular expression ({e})") from e
        return lambda answer: pattern.search(answer) is not None
    if kind == "json" and expected is not None:
        try:
            json.loads(expected)
        except ValueError as e:
            raise DatasetError(f"{where}: validator json: the expected output is not JSON ({e})") from e
    check = {"exact": _exact, "contains": _contains, "json": _json}[kind]
    return lambda answer: check(answer, expected)
