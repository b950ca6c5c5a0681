"""Do two backend configurations give the same answers? No LoadGen: same samples, both models.

Both backends load in this process, each with all usable cores (they never run at once),
and see the same dataset samples in the same batches. Per output we report the largest
absolute and relative error and how many elements break |b - a| <= atol + rtol * |a|
(numpy's `isclose`, with side A as the reference); where an output holds class scores
(2-D, more than one column) also the share of samples whose top-1 class agrees.
The relative error is taken over elements with |a| > atol: below that, atol alone judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.base import Backend, LoadContext, TensorSpec
from harness.config import registry
from harness.config.host import usable_cores
from harness.config.run_config import RunConfig, validate_backend_options
from harness.data.datasets import Dataset, build_tensor_dataset
from harness.errors import BackendError, ConfigError, DatasetError, HarnessError, first_line


@dataclass(frozen=True)
class Side:
    """One configuration under comparison."""

    backend: str
    model: str | None
    options: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        opts = " ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.backend} {self.model or ''} {opts}".strip()


@dataclass(frozen=True)
class Tolerances:
    atol: float = 1e-4
    rtol: float = 1e-3
    min_top1: float = 0.99

    def __post_init__(self) -> None:
        if self.atol < 0 or self.rtol < 0:
            raise ConfigError("parity tolerances atol and rtol must be >= 0")
        if not 0 <= self.min_top1 <= 1:
            raise ConfigError(f"min_top1 must be between 0 and 1 (got {self.min_top1})")


@dataclass(frozen=True)
class OutputComparison:
    index: int
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mismatched: int  # elements outside atol + rtol * |a|
    elements: int
    top1: float | None  # share of samples with the same arg-max; None: not class scores


@dataclass(frozen=True)
class ParityResult:
    a: Side
    b: Side
    samples: int
    batch: int
    dataset: dict[str, Any]
    tolerances: Tolerances
    outputs: list[OutputComparison]
    describe_a: dict[str, Any]
    describe_b: dict[str, Any]
    input_map: dict[str, str]  # A's input name -> B's, when they differ
    accuracy_a: float | None
    accuracy_b: float | None
    failures: list[str]

    @property
    def agree(self) -> bool:
        return not self.failures


def _load(side: Side, max_batch: int, seed: int, which: str) -> Backend:
    config = RunConfig(backend=side.backend, model=side.model, backend_options=side.options)
    cls = registry.get(side.backend)
    if cls.kind != "tensor":
        raise ConfigError(f"parity compares tensor backends; {which} backend {side.backend!r} is {cls.kind}")
    try:
        options = validate_backend_options(config, cls.Options)
    except ConfigError as e:
        raise ConfigError(f"side {which}: {e}") from e
    backend = cls(options)
    try:
        backend.load(LoadContext(side.model, max_batch, "Offline", seed, usable_cores()))
    except HarnessError as e:
        raise type(e)(f"side {which} ({side.backend}): {e}") from e
    return backend


def _input_map(a: list[TensorSpec], b: list[TensorSpec]) -> dict[str, str]:
    """A's input names -> B's: by name, or by position for two single-input models."""
    names_a, names_b = [s.name for s in a], [s.name for s in b]
    if sorted(names_a) == sorted(names_b):
        return {n: n for n in names_a}
    if len(a) == 1 and len(b) == 1:
        return {names_a[0]: names_b[0]}
    raise DatasetError(
        f"the two models take different inputs: A {names_a}, B {names_b}; parity needs the same names "
        "(or one input each): rename one side's inputs"
    )


def _predict(backend: Backend, batch: dict[str, np.ndarray], which: str, first: int) -> list[np.ndarray]:
    try:
        return [np.asarray(o) for o in backend.predict(batch)]
    except Exception as e:  # a backend failing mid-way is a result to report, in one line
        raise BackendError(f"side {which} failed on samples {first}-{first + len(next(iter(batch.values()))) - 1}: {first_line(e)}") from e


def _compare(i: int, a: np.ndarray, b: np.ndarray, tol: Tolerances) -> OutputComparison:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    diff = np.abs(b64 - a64)
    ref = np.abs(a64)
    big = ref > tol.atol
    top1 = None
    if a.ndim == 2 and a.shape[1] > 1 and np.issubdtype(a.dtype, np.floating):
        top1 = float(np.mean(a.argmax(axis=1) == b.argmax(axis=1)))
    return OutputComparison(
        index=i,
        shape=tuple(a.shape),
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float((diff[big] / ref[big]).max()) if big.any() else 0.0,
        mismatched=int(np.count_nonzero(diff > tol.atol + tol.rtol * ref)),
        elements=int(diff.size),
        top1=top1,
    )


def _accuracy(outputs: list[np.ndarray], dataset: Dataset, n: int) -> float | None:
    if dataset.labels is None or not outputs or outputs[0].ndim != 2 or outputs[0].shape[1] < 2:
        return None
    return float(np.mean(outputs[0].argmax(axis=1) == np.asarray(dataset.labels)[:n]))


def run_parity(
    a: Side,
    b: Side,
    *,
    dataset: str = "synthetic",
    samples: int = 256,
    batch: int = 32,
    seed: int = 0,
    tolerances: Tolerances | None = None,
) -> ParityResult:
    tol = tolerances or Tolerances()
    if samples < 1 or batch < 1:
        raise ConfigError(f"parity needs samples >= 1 and batch >= 1 (got samples={samples}, batch={batch})")
    backend_a = _load(a, batch, seed, "A")
    try:
        backend_b = _load(b, batch, seed, "B")
        try:
            return _run(a, b, backend_a, backend_b, dataset, samples, batch, seed, tol)
        finally:
            backend_b.close()
    finally:
        backend_a.close()


def _run(
    a: Side, b: Side, backend_a: Backend, backend_b: Backend, spec: str, samples: int, batch: int, seed: int, tol: Tolerances
) -> ParityResult:
    inputs_a, inputs_b = backend_a.inputs(), backend_b.inputs()
    ds = build_tensor_dataset(spec, inputs_a, seed)
    mapping = _input_map(inputs_a, inputs_b)
    by_name_b = {s.name: s for s in inputs_b}
    # B's expected shapes under A's names: the same checks, and messages, as a run's dataset.
    ds.check_against([TensorSpec(n, by_name_b[m].shape, by_name_b[m].dtype) for n, m in mapping.items()])
    n = min(samples, len(ds))
    outs_a: list[list[np.ndarray]] = []
    outs_b: list[list[np.ndarray]] = []
    for first in range(0, n, batch):
        rows = [ds.materialize(i) for i in range(first, min(n, first + batch))]
        x = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        outs_a.append(_predict(backend_a, x, "A", first))
        outs_b.append(_predict(backend_b, {mapping[k]: v for k, v in x.items()}, "B", first))
    cat_a = [np.concatenate(parts) for parts in zip(*outs_a, strict=True)]
    cat_b = [np.concatenate(parts) for parts in zip(*outs_b, strict=True)]

    failures: list[str] = []
    if len(cat_a) != len(cat_b):
        failures.append(f"A returns {len(cat_a)} output(s), B returns {len(cat_b)}; compared the first {min(len(cat_a), len(cat_b))}")
    comparisons = []
    for i, (oa, ob) in enumerate(zip(cat_a, cat_b, strict=False)):
        if oa.shape != ob.shape:
            failures.append(f"output {i}: A has shape {oa.shape}, B {ob.shape}")
            continue
        c = _compare(i, oa, ob, tol)
        comparisons.append(c)
        if c.mismatched:
            failures.append(
                f"output {i}: {c.mismatched:,} of {c.elements:,} elements differ by more than "
                f"atol {tol.atol:g} + rtol {tol.rtol:g}·|a| (max abs error {c.max_abs:.3g})"
            )
        if c.top1 is not None and c.top1 < tol.min_top1:
            failures.append(f"output {i}: top-1 agreement {c.top1:.2%} is below min_top1 {tol.min_top1:.2%}")
    return ParityResult(
        a=a,
        b=b,
        samples=n,
        batch=batch,
        dataset={**ds.describe(), "spec": spec},
        tolerances=tol,
        outputs=comparisons,
        describe_a=backend_a.describe(),
        describe_b=backend_b.describe(),
        input_map={k: v for k, v in mapping.items() if k != v},
        accuracy_a=_accuracy(cat_a, ds, n),
        accuracy_b=_accuracy(cat_b, ds, n),
        failures=failures,
    )
