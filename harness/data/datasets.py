"""Datasets behind LoadGen's Query Sample Library (QSL).

A dataset holds samples by index. LoadGen asks the QSL to `load` a subset before the
test (the performance sample set) and `unload` it afterwards; only loaded samples may
be issued, so `load` really materialises them and `unload` really frees them.

Specs, as given to `--dataset`:
    synthetic[:n=1024,seed=0]  random inputs shaped by the model's input signature
    digits                     scikit-learn's handwritten digits test split, labelled
    npy:DIR  or  DIR           a folder of .npy (single input) or .npz (named inputs)
                               files, sorted by name; optional labels.npy beside them
Generative backends take prompt datasets instead (`harness.data.prompts`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import TensorSpec
from harness.data.spec import parse_dataset_spec
from harness.errors import DatasetError

_NUMPY_DTYPES = {"float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"}


class Dataset:
    """Indexable samples plus optional labels. Subclasses fill `_make(index)`."""

    name = "dataset"

    def __init__(self, count: int, labels: np.ndarray | None = None) -> None:
        if count <= 0:
            raise DatasetError(f"dataset {self.name!r} has no samples")
        self.count = count
        self.labels = labels
        self._loaded: dict[int, Any] = {}
        self._as_batch: dict[int, dict[str, np.ndarray]] = {}
        self._packed: dict[str, np.ndarray] | None = None  # the loaded set, one array per input
        self._row: dict[int, int] = {}  # dataset index -> row of the packed arrays

    def __len__(self) -> int:
        return self.count

    def load(self, indices: Iterable[int]) -> None:
        for i in indices:
            if i not in self._loaded:
                self._loaded[i] = self._make(i)
        self._pack()

    def unload(self, indices: Iterable[int]) -> None:
        for i in indices:
            self._loaded.pop(i, None)
            self._as_batch.pop(i, None)
        self._pack()

    def _pack(self) -> None:
        """Copy the loaded tensor samples into one array per input, the samples becoming
        views of it, so a batch is one fancy-index per input: np.stack of N small arrays
        cost ~1.5 us a sample on the worker's thread. Runs on LoadGen's load and unload,
        outside the timed test; samples whose shapes differ stay unpacked (and batch by
        stacking, which then fails loudly as before)."""
        self._packed, self._row = None, {}
        first = next(iter(self._loaded.values()), None)
        if not isinstance(first, dict) or not all(isinstance(v, np.ndarray) for v in first.values()):
            return  # not tensors (prompts, requests)
        order = list(self._loaded)
        try:
            packed = {k: np.stack([self._loaded[i][k] for i in order]) for k in first}
        except (ValueError, KeyError, TypeError):
            return
        self._packed, self._row = packed, {i: r for r, i in enumerate(order)}
        for r, i in enumerate(order):
            self._loaded[i] = {k: a[r] for k, a in packed.items()}
        self._as_batch.clear()

    @property
    def loaded_count(self) -> int:
        return len(self._loaded)

    def get(self, index: int) -> Any:
        """A loaded sample. LoadGen only issues loaded indices; anything else is a bug."""
        return self._loaded[index]

    def batch_of_one(self, index: int) -> dict[str, np.ndarray]:
        """A loaded tensor sample as a batch of one (views with a leading axis of 1), made
        once per load: a Server worker asks for it for every sample."""
        batch = self._as_batch.get(index)
        if batch is None:
            batch = self._as_batch[index] = {k: v[None] for k, v in self._loaded[index].items()}
        return batch

    def batch(self, indices: list[int]) -> dict[str, np.ndarray]:
        """Loaded tensor samples as one batch: for one sample the cached batch of one, else
        a new array per input (one gather from the packed set)."""
        if len(indices) == 1:
            return self.batch_of_one(indices[0])
        if self._packed is not None:
            rows = np.fromiter(map(self._row.__getitem__, indices), np.intp, len(indices))
            return {k: a.take(rows, axis=0) for k, a in self._packed.items()}
        samples = [self._loaded[i] for i in indices]
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}

    def materialize(self, index: int) -> Any:
        """A sample whether loaded or not (warm-up, parity checks)."""
        return self._loaded.get(index) if index in self._loaded else self._make(index)

    def _make(self, index: int) -> Any:
        raise NotImplementedError

    def fingerprint(self) -> str:
        """sha256 over every sample (and labels): equal fingerprints mean equal data."""
        h = hashlib.sha256()
        for i in range(self.count):
            for name, arr in sorted(self.materialize(i).items()):
                h.update(name.encode())
                h.update(np.ascontiguousarray(arr).tobytes())
        if self.labels is not None:
            h.update(np.ascontiguousarray(self.labels).tobytes())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "count": self.count, "labelled": self.labels is not None}

    def check_against(self, inputs: list[TensorSpec]) -> None:
        """Fail early, with names, when samples do not fit the model's inputs."""
        if not inputs:
            return
        sample = self.materialize(0)
        expected = {s.name for s in inputs}
        if set(sample) != expected:
            raise DatasetError(
                f"dataset {self.name!r} provides inputs {sorted(sample)} but the model expects "
                f"{sorted(expected)}: name the .npz arrays after the model inputs"
            )
        for spec in inputs:
            arr = sample[spec.name]
            want = spec.shape[1:]
            if len(arr.shape) != len(want) or any(
                w is not None and w != a for w, a in zip(want, arr.shape, strict=False)
            ):
                raise DatasetError(
                    f"dataset {self.name!r} sample shape {tuple(arr.shape)} for input "
                    f"{spec.name!r} does not match the model's {_fmt_shape(spec.shape)} "
                    "(per sample, without the batch dimension)"
                )
            if spec.dtype in _NUMPY_DTYPES and arr.dtype != np.dtype(spec.dtype):
                raise DatasetError(
                    f"dataset {self.name!r} input {spec.name!r} has dtype {arr.dtype} but the "
                    f"model expects {spec.dtype}"
                )


def _fmt_shape(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"


class SyntheticTensors(Dataset):
    """Random inputs drawn per index from a seeded generator: the same seed, the same data."""

    name = "synthetic"

    def __init__(self, inputs: list[TensorSpec], count: int = 1024, seed: int = 0) -> None:
        if not inputs:
            raise DatasetError(
                "synthetic dataset needs the model's input signature, and this backend has none: "
                "pass --dataset DIR with real samples"
            )
        self.inputs = inputs
        self.seed = seed
        super().__init__(count)

    def _make(self, index: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, index])
        out = {}
        for spec in self.inputs:
            shape = spec.sample_shape()
            dtype = np.dtype(spec.dtype)
            if dtype.kind == "f":
                out[spec.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind in "iu":
                out[spec.name] = rng.integers(0, 100, size=shape).astype(dtype)
            elif dtype.kind == "b":
                out[spec.name] = rng.integers(0, 2, size=shape).astype(dtype)
            else:
                raise DatasetError(f"synthetic data cannot make dtype {spec.dtype} for {spec.name!r}")
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "seed": self.seed}


class ArrayDataset(Dataset):
    """Samples already in memory: arrays whose first dimension indexes samples."""

    def __init__(self, name: str, arrays: dict[str, np.ndarray], labels: np.ndarray | None) -> None:
        self.name = name
        self.arrays = arrays
        super().__init__(len(next(iter(arrays.values()))), labels)

    def _make(self, index: int) -> dict[str, np.ndarray]:
        return {k: np.array(v[index]) for k, v in self.arrays.items()}


class NpyFolder(Dataset):
    """One file per sample; samples are read from disk on load, dropped on unload."""

    name = "npy"

    def __init__(self, folder: Path, input_name: str | None) -> None:
        if not folder.is_dir():
            raise DatasetError(f"dataset folder {folder} does not exist")
        self.files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz") and p.stem != "labels")
        if not self.files:
            raise DatasetError(f"dataset folder {folder} holds no .npy or .npz sample files")
        self.input_name = input_name
        self.folder = folder
        labels = None
        if (folder / "labels.npy").exists():
            labels = np.load(folder / "labels.npy")
            if len(labels) != len(self.files):
                raise DatasetError(
                    f"{folder / 'labels.npy'} has {len(labels)} labels for {len(self.files)} samples"
                )
        super().__init__(len(self.files), labels)

    def _make(self, index: int) -> dict[str, np.ndarray]:
        path = self.files[index]
        try:
            data = np.load(path)
        except (OSError, ValueError) as e:
            raise DatasetError(f"cannot read sample {path}: {e}") from e
        if isinstance(data, np.ndarray):
            if self.input_name is None:
                raise DatasetError(f"{path} is a bare array but the model's input name is unknown: use .npz")
            return {self.input_name: data}
        return {k: data[k] for k in data.files}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": str(self.folder)}


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """'synthetic:n=8,seed=1' -> ('synthetic', {'n': '8', 'seed': '1'}); 'npy:DIR' -> ('npy', {'path': DIR}).
    The grammar is harness.data.spec's; this is its (kind, params) view."""
    ds = parse_dataset_spec(spec)
    return ds.kind, {**ds.params, **({"path": str(ds.path)} if ds.path is not None else {})}


def _int(params: dict[str, str], key: str, default: int, spec: str) -> int:
    try:
        return int(params.pop(key, default))
    except ValueError as e:
        raise DatasetError(f"dataset spec {spec!r}: {key} must be an integer") from e


class HeldElsewhere:
    """The QSL's dataset in a process that serves none of the samples itself: its size,
    labels, samples (for a warm-up) and fingerprint are `source`'s, while LoadGen's load and
    unload go to the processes that do serve them (client shards, backend replicas), each
    holding its own copy built from the same spec."""

    def __init__(self, source: Dataset, load: Any, unload: Any) -> None:
        self.source = source
        self.labels = source.labels
        self._load, self._unload = load, unload

    def __len__(self) -> int:
        return len(self.source)

    def load(self, indices: Iterable[int]) -> None:
        self._load(list(indices))

    def unload(self, indices: Iterable[int]) -> None:
        self._unload(list(indices))

    def materialize(self, index: int) -> Any:
        return self.source.materialize(index)

    def fingerprint(self) -> str:
        return self.source.fingerprint()

    def describe(self) -> dict[str, Any]:
        return self.source.describe()


def build_tensor_dataset(spec: str, inputs: list[TensorSpec], seed: int) -> Dataset:
    parsed = parse_dataset_spec(spec)
    kind, params = parsed.kind, dict(parsed.params)
    if kind == "synthetic":
        n = _int(params, "n", 1024, spec)
        s = _int(params, "seed", seed, spec)
        ds: Dataset = SyntheticTensors(inputs, n, s)
    elif kind == "digits":
        from harness.data.embedded import digits_test_split

        images, labels = digits_test_split()
        name = inputs[0].name if inputs else "image"
        ds = ArrayDataset("digits", {name: images}, labels)
    elif kind == "npy" and parsed.path is not None:
        only = inputs[0].name if len(inputs) == 1 else None
        ds = NpyFolder(parsed.path, only)
    else:
        raise DatasetError(
            f"unknown dataset {spec!r}: use synthetic[:n=N,seed=S], digits, or a folder of .npy/.npz files"
        )
    if params:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(params)}")
    ds.check_against(inputs)
    return ds
