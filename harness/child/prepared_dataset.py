"""The streaming SUT's dataset: each sample turned into its request when it is loaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.data.datasets import Dataset


class PreparedDataset(Dataset):
    """The QSL's dataset with each loaded sample already turned into its request.

    Building request bodies (JSON encoding of tensors or prompts) at load time keeps that
    cost out of the timed path. Labels, fingerprint and description are the source's.
    """

    def __init__(self, source: Dataset, prepare: Callable[[Any], Any]) -> None:
        self.source = source
        self.name = source.name
        self._prepare = prepare
        #: the source's per-sample answer checks (prompt datasets with validators or schemas):
        #: (valid, "reason: detail" when not), None for a sample without any
        self.judge: Callable[[int, str], tuple[bool, str | None] | None] | None = getattr(source, "judge", None)
        super().__init__(len(source), source.labels)

    def _make(self, index: int) -> Any:
        return self._prepare(self.source.materialize(index))

    def fingerprint(self) -> str:
        return self.source.fingerprint()

    def describe(self) -> dict[str, Any]:
        return self.source.describe()
