"""JSON Lines read one object a row, for prompt files and reference sets alike: a line that
is not JSON, or not an object, is one DatasetError naming where it is."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.errors import DatasetError


def json_objects(path: Path, where: Callable[[int, int], str], expected: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object) per non-blank line; `where(row, line)` names a row in errors,
    `expected` says what an object must hold."""
    row = 0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            at = where(row, lineno)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{at}: not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict):
                raise DatasetError(f"{at}: expected a JSON object with {expected}")
            yield at, obj
            row += 1
