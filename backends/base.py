"""The backend contract: the few methods a runtime must offer to be benchmarked.

A backend only knows *how* to run a model. It never sleeps, paces, queues or times:
LoadGen decides when, and the SUT adapter (`harness.child.tensor_sut`) owns threads, batching,
timing and failure accounting. A new backend is one module with one class that
subclasses `Backend` and is registered in the `harness.backends` entry-point group.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict


class BackendOptions(BaseModel):
    """Base for each backend's options; unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output. A `None` dimension is dynamic (the batch dim is first)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str  # numpy dtype name, e.g. "float32"

    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample: the batch dimension dropped, other dynamic dims set to 1."""
        return tuple(1 if d is None else d for d in self.shape[1:])


@dataclass(frozen=True)
class LoadContext:
    """What a backend needs to load: the model reference and the run's resolved settings."""

    model: str | None
    max_batch: int
    scenario: str
    seed: int = 0
    #: threads each backend call may use so that workers x threads <= cores
    threads: int = 1


@dataclass
class Chunk:
    """One piece of a generated stream: `n_tokens` tokens of `text` (may be several)."""

    text: str = ""
    n_tokens: int = 1
    # Backend-measured details, e.g. server usage figures; copied into the records.
    info: dict[str, Any] = field(default_factory=dict)


Batch = Mapping[str, np.ndarray]  # input name -> array with the batch dimension first
Outputs = Sequence[np.ndarray]  # one array per model output, batch dimension first


class Backend:
    """Base class of all backends.

    Class attributes tell the registry what the backend needs before it is imported:
    `requires` lists importable module names, `install_hint` is the command that
    provides them, `Options` validates the backend's own settings.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[BackendOptions]] = BackendOptions
    requires: ClassVar[tuple[str, ...]] = ()
    install_hint: ClassVar[str] = ""
    #: "tensor" backends implement `predict` and are served by worker threads
    #: (harness.child.tensor_sut); any other kind ("async", "generative") is served by an event loop
    #: (harness.child.stream_sut) and implements `stream`.
    kind: ClassVar[str] = "tensor"

    @classmethod
    def scales_with_host_cores(cls, options: BackendOptions) -> bool:
        """True when `predict` computes on this machine's CPU cores and releases the GIL,
        so that Offline runs best as one single-threaded worker per core. False (the
        default) keeps one worker per device: right for GPUs, servers and emulators."""
        return False

    def __init__(self, options: BackendOptions) -> None:
        self.options = options

    def load(self, ctx: LoadContext) -> None:
        """Load the model once, before LoadGen starts. Raise `harness.errors` on bad input."""

    def inputs(self) -> list[TensorSpec]:
        """The model's input signature, used to build synthetic samples."""
        return []

    def warmup(self, batch: Batch) -> None:
        """Run outside the timed test; the default runs one prediction."""
        self.predict(batch)

    def predict(self, batch: Batch) -> Outputs:
        """Run one batch. May release the GIL. Exceptions fail the batch's samples."""
        raise TypeError(f"backend {self.name!r} does not implement predict()")

    async def stream(self, sample: Any) -> AsyncIterator[Chunk]:  # pragma: no cover - interface
        """Yield generated chunks for one sample (generative backends)."""
        raise TypeError(f"backend {self.name!r} does not implement stream()")
        yield Chunk()

    def describe(self) -> dict[str, Any]:
        """Engine, versions, device, precision and the settings really in effect."""
        return {"backend": self.name}

    def close(self) -> None:
        """Free resources; called once after the test."""
