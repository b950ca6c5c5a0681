"""Do two embedding runs give the same vectors? Two finished accuracy-run folders, compared.

Each side is a results folder of an AccuracyOnly (or SubmissionRun) run whose requests
carried several inputs (tokens.jsonl's request entries: harness.results.vector_metrics),
so LoadGen's accuracy log holds each input's vector as float32. Per sample (qsl_idx) we
take each side's first logged vector and report the cosine similarity of B's to A's:
its minimum and mean over the samples both answered, and the sample where it is least.
The verdict: every sample answered on both sides, one dimension on both, and the least
cosine at or above `min_cosine`. Two servers of one model differ in the last bits (the
batch a text shares moves a llama.cpp vector by ~2e-6), hence a threshold, not equality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.accuracy_run import accuracy_run_label
from harness.errors import ConfigError, DatasetError
from harness.results import folder
from harness.results.loadgen_log import read_accuracy_log
from harness.results.vector_metrics import request_entries


@dataclass(frozen=True)
class VectorParityResult:
    run_a: str
    run_b: str
    label_a: str
    label_b: str
    dataset: dict[str, Any]
    samples: int  # the dataset's samples
    compared: int  # answered on both sides, same dimension
    dimension_a: int | None
    dimension_b: int | None
    cosine_min: float | None
    cosine_mean: float | None
    least_sample: int | None  # where the cosine is least
    min_cosine: float
    failures: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.failures


def is_vector_run(run_dir: Path) -> bool:
    """A folder whose requests carried several inputs, one vector each."""
    return bool(request_entries(folder.read_jsonl(run_dir, folder.TOKENS)))


def read_vectors(run_dir: Path) -> tuple[dict[int, np.ndarray], dict[str, Any], str]:
    """(each answered sample's first vector, the dataset's description, the side's label)."""
    label = accuracy_run_label(run_dir, "vector parity compares the vectors accuracy runs log")
    dataset = (folder.read_json(run_dir, folder.CHILD, required=True) or {}).get("dataset") or {}
    vectors: dict[int, np.ndarray] = {}
    for e in read_accuracy_log(run_dir) or []:
        data = bytes.fromhex(e.get("data") or "")
        if data and e["qsl_idx"] not in vectors:  # a failed sample logs no data
            vectors[int(e["qsl_idx"])] = np.frombuffer(data, dtype="<f4").astype(np.float64)
    return vectors, dataset, label


def compare_vector_folders(run_a: Path, run_b: Path, *, min_cosine: float = 0.999) -> VectorParityResult:
    if not -1 <= min_cosine <= 1:
        raise ConfigError(f"--min-cosine must be between -1 and 1 (got {min_cosine})")
    va, da, la = read_vectors(run_a)
    vb, db, lb = read_vectors(run_b)
    if da.get("sha256") != db.get("sha256") or da.get("count") != db.get("count"):
        raise DatasetError(f"the two runs embedded different texts: A {da.get('path') or da.get('kind')} "
                           f"({da.get('count')} samples), B {db.get('path') or db.get('kind')} ({db.get('count')} "
                           "samples); parity needs the same dataset on both sides")
    samples = int(da.get("count") or len(set(va) | set(vb)))
    failures = [f"{len(missing)} of {samples} samples have no vector on {w} (failed or not run), e.g. {missing[:5]}"
                for w, v in (("A", va), ("B", vb)) if (missing := [i for i in range(samples) if i not in v])]
    dims = {w: sorted({len(x) for x in v.values()}) for w, v in (("A", va), ("B", vb))}
    dim_a = dims["A"][0] if len(dims["A"]) == 1 else None
    dim_b = dims["B"][0] if len(dims["B"]) == 1 else None
    both = sorted(i for i in set(va) & set(vb) if len(va[i]) == len(vb[i]))
    if dims["A"] != dims["B"]:
        failures.append(f"dimension differs: A {dims['A']}, B {dims['B']}")
    cosine_min = cosine_mean = least = None
    if both:
        a = np.stack([va[i] for i in both])
        b = np.stack([vb[i] for i in both])
        norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        cos = np.where(norms > 0, np.einsum("ij,ij->i", a, b) / np.where(norms > 0, norms, 1), 0.0)
        k = int(np.argmin(cos))
        cosine_min, cosine_mean, least = float(cos[k]), float(cos.mean()), both[k]
        if cosine_min < min_cosine:
            below = int((cos < min_cosine).sum())
            failures.append(f"cosine similarity {cosine_min:.9g} at sample {least} is below --min-cosine {min_cosine:g} "
                            f"({below} of {len(both)} samples below)")
    elif not failures:
        failures.append("no sample has a vector on both sides")
    return VectorParityResult(
        run_a=str(run_a), run_b=str(run_b), label_a=la, label_b=lb,
        dataset={k: da.get(k) for k in ("kind", "path", "count", "sha256") if k in da},
        samples=samples, compared=len(both), dimension_a=dim_a, dimension_b=dim_b,
        cosine_min=cosine_min, cosine_mean=cosine_mean, least_sample=least, min_cosine=min_cosine, failures=failures,
    )
