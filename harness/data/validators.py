"""Task success: whether a generated answer is right, not only whether the request returned.

A prompt dataset may name a validator (for the whole file, or per JSONL line); the
expected output is the reference it checks against:

    exact      the answer, stripped of surrounding whitespace, equals the expected text
    contains   the expected text occurs in the answer (case-insensitive)
    regex      the expected text is a regular expression found in the answer (re.search)
    json       the answer parses as JSON; with an expected text, it also equals that JSON

A prompt may also carry a JSON Schema (structured outputs: a JSONL row's `schema`, or the
backend's for every row, PromptSample.response_schema): its answer must be JSON that the
schema accepts, checked with the `jsonschema` library (`schema_check`).

Checked once per request when the request completes, on its whole text; the verdict is
kept per request in tokens.jsonl ("valid"), and a rejected answer's reason beside it
("invalid": "reason: detail", the form of a failed request's): `wrong_answer` from a
validator, `schema_invalid` from a schema (not JSON, cut short at max_tokens, or failing
the schema: the first error's path and message). The summary counts an answer as a
success only when the request also succeeded and no check rejected it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from harness.errors import DatasetError

VALIDATORS = ("exact", "contains", "regex", "json")

#: a check of one answer: None when it passes, else why not ("reason: detail")
Check = Callable[[str], "str | None"]
#: a schema failure's detail is cut to this many characters (tokens.jsonl keeps one a request)
DETAIL_CHARS = 160


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


def schema_check(schema: Mapping[str, Any], where: str) -> Check:
    """A check of answers against a JSON Schema; the schema is checked here, so a bad one
    fails at load. The validator class is the one the schema's `$schema` names (Draft
    2020-12 when it names none), as jsonschema chooses it."""
    import jsonschema  # only runs with schemas pay its import

    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise DatasetError(f"{where}: not a valid JSON Schema: {e.message} at {_path(e.absolute_path)}") from e
    validator = cls(schema)

    def check(answer: str) -> str | None:
        text = answer.strip()
        try:
            value = json.loads(text)
        except ValueError as e:
            # a JSON prefix ends mid-value: most likely max_tokens cut it
            ended = getattr(e, "pos", -1) >= len(text) or str(e).startswith("Unterminated string")
            cut = " (ends mid-value: cut short at max_tokens?)" if text and ended else ""
            return f"schema_invalid: not JSON{cut}: {_short(str(e))}"
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        return f"schema_invalid: {_path(error.absolute_path)}: {_short(error.message)}"

    return check


def _path(path: Iterable[Any]) -> str:
    """A JSON path to the failing value, `$` for the answer itself: $.people[2].age."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _short(text: str) -> str:
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"
