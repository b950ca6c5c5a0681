"""A backend with no model: each call takes a service time drawn from a distribution.

Used to measure the harness itself (zero service time: how much overhead do we add?)
and as ground truth in tests (a fixed 5 ms must be reported as 5 ms). `sleep` releases
the GIL like real inference engines do; `busy` spins and holds a core.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from backends.base import BackendDescription, BackendOptions, Batch, LoadContext, Outputs, TensorBackend, TensorSpec

_SPIN_NS = 300_000


class SyntheticOptions(BackendOptions):
    service_time_ms: float = Field(0.0, ge=0, description="mean service time of one call")
    per_sample_ms: float = Field(0.0, ge=0, description="added per sample in the batch")
    distribution: Literal["fixed", "normal", "lognormal"] = "fixed"
    stddev_ms: float = Field(0.0, ge=0, description="normal: std dev; lognormal: sigma of log(ms)")
    wait: Literal["sleep", "busy"] = Field(
        "sleep", description="sleep (GIL released; the last 0.3 ms spun for precision) or busy (spin)"
    )
    fail_every: int = Field(0, ge=0, description="raise on every Nth call (0: never), to test failures")
    input_shape: tuple[int, ...] = Field((4,), description="per-sample input shape")
    output_size: int = Field(10, ge=1, description="floats returned per sample")
    cache_repeats: bool = Field(
        False, description="answer a repeated sample without waiting: a deliberately cheating SUT"
    )
    seed: int = 0

    @model_validator(mode="after")
    def _spread(self) -> SyntheticOptions:
        if self.distribution != "fixed" and self.stddev_ms <= 0:
            raise ValueError(f"distribution {self.distribution} needs stddev_ms > 0")
        return self


class SyntheticBackend(TensorBackend):
    name = "synthetic"
    Options = SyntheticOptions
    options: SyntheticOptions

    def load(self, ctx: LoadContext) -> None:
        self._rng = np.random.default_rng(self.options.seed)
        self._calls = 0
        self._seen: set[bytes] = set()
        self._out = np.zeros((1, self.options.output_size), dtype=np.float32)

    def warmup(self, batch: Batch) -> None:
        self.predict(batch)
        self._calls = 0  # `fail_every` and the repeat cache count timed calls only
        self._seen.clear()

    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec("input", (None, *self.options.input_shape), "float32")]

    def _service_ns(self, batch_size: int) -> int:
        o = self.options
        if o.distribution == "fixed":
            ms = o.service_time_ms
        elif o.distribution == "normal":
            ms = max(0.0, self._rng.normal(o.service_time_ms, o.stddev_ms))
        else:  # lognormal with the given median
            ms = float(o.service_time_ms * np.exp(self._rng.normal(0.0, o.stddev_ms)))
        return int((ms + o.per_sample_ms * batch_size) * 1e6)

    def predict(self, batch: Batch) -> Outputs:
        # The service time counts from entry and the answer is ready before the wait, so
        # the call itself lasts the service time: this backend is the ground truth that
        # fidelity is measured against.
        start = time.perf_counter_ns()
        x = batch["input"]
        n = len(x)
        self._calls += 1
        if self.options.fail_every and self._calls % self.options.fail_every == 0:
            raise RuntimeError(f"injected failure on call {self._calls}")
        wait_ns = self._service_ns(n)
        if self.options.cache_repeats:
            key = x.tobytes()
            if key in self._seen:
                wait_ns = 0
            self._seen.add(key)
        # A view of preallocated zeros: at zero service time this call must cost ~nothing.
        if n > len(self._out):
            self._out = np.zeros((n, self.options.output_size), dtype=np.float32)
        outputs = [self._out[:n]]
        if wait_ns:
            end = start + wait_ns
            left = end - time.perf_counter_ns()
            if self.options.wait == "sleep" and left > _SPIN_NS:
                # The OS wakes a sleeper late by up to ~0.2 ms; sleep short, spin the rest.
                time.sleep((left - _SPIN_NS) / 1e9)
            while time.perf_counter_ns() < end:
                pass
        return outputs

    def batches_freely(self) -> bool:
        return True  # a call costs service_time_ms + per_sample_ms x its samples, whatever the size

    def describe(self) -> BackendDescription:
        return {"backend": self.name, "engine": "synthetic", **self.options.model_dump(mode="json")}
