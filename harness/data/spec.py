"""The one grammar of `--dataset` specs, for tensor datasets and prompt sets alike.

    synthetic[:KEY=VALUE,...]                  generated: tensors shaped by the model's inputs
                                               (n, seed) or prompts (isl, osl, n, seed, prefix_*)
    digits                                     scikit-learn's digits, labelled
    npy:PATH, or PATH of a folder              .npy/.npz samples, optional labels.npy
    jsonl:PATH[,validator=KIND], or PATH.jsonl prompts, one JSON object a line (images, video)
    sharegpt:PATH[,n=N,seed=S,validator=KIND]  ShareGPT conversations
    chat-sessions:PATH, sharegpt-sessions:PATH[,n=N,seed=S], synthetic-sessions[:KEY=VALUE,...]
                                               multi-turn sessions (harness.data.sessions)
    trace:PATH[,format=F,time_scale=X,...]     a timestamped request trace (Mooncake, Azure,
                                               BurstGPT), replayed at its times (harness.data.traces)
    rerank:PATH[,metric=M,k=K], synthetic-rerank[:KEY=VALUE,...]
                                               a query and its documents a sample (harness.data.rerank)
    images:DIR, visionarena:PATH, sharegpt4v:PATH, synthetic-images[:KEY=VALUE,...]
                                               prompts with images (harness.data.media_sets)
    audio:PATH, librispeech:DIR, synthetic-speech[:KEY=VALUE,...]
                                               audio for speech to text (harness.data.audio)
    mlperf:SET:PATH                            MLPerf's processed LLM file, as shipped, with
                                               its references (SET: a benchmark record's
                                               dataset, harness.data.benchmarks.DATASETS;
                                               harness.data.mlperf_llm)

A value may hold commas inside parentheses (`isl=lognormal(1024,0.5)`). A PATH may hold
commas too, so after a path only trailing KEY=VALUE items whose key its kind knows are
parameters. Which reader takes a spec, and which parameters it accepts, is for the reader
(harness.data.datasets, harness.data.prompts) to say; this module only splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.data.benchmarks import DATASETS
from harness.errors import DatasetError

#: kinds whose first item is a path, with the parameters that may follow it
PATH_KINDS: dict[str, tuple[str, ...]] = {"npy": (), "jsonl": ("validator", "max_media_bytes"),
                                          "sharegpt": ("n", "seed", "validator"),
                                          "chat-sessions": (), "sharegpt-sessions": ("n", "seed"),
                                          "trace": ("format", "time_scale", "start_s", "end_s", "max_idle_s",
                                                    "block_size", "seed"),
                                          "rerank": ("metric", "k"),
                                          # prompt sets with images (harness.data.media_sets)
                                          "images": ("prompt", "images_per_request", "osl", "max_media_bytes"),
                                          "visionarena": ("n", "seed", "osl", "max_media_bytes"),
                                          "sharegpt4v": ("image_root", "n", "seed", "osl", "max_media_bytes"),
                                          # audio (harness.data.audio)
                                          "audio": ("max_mb", "wrong_above"), "librispeech": ("n", "max_mb", "wrong_above")}
#: MLPerf's LLM sets: the benchmark records' datasets
MLPERF_SETS = DATASETS
#: kinds named by a word alone; anything else bare that looks like a path is one
NAMED_KINDS = ("synthetic", "digits", "synthetic-sessions", "synthetic-rerank", "synthetic-images", "synthetic-speech")


@dataclass(frozen=True)
class DatasetSpec:
    kind: str
    path: Path | None = None
    params: dict[str, str] = field(default_factory=dict)

    def with_path(self, path: Path) -> DatasetSpec:
        return replace(self, path=path)

    def __str__(self) -> str:
        """The spec written out again, explicitly (`npy:/abs/dir`): what run.yaml records."""
        if self.kind == "mlperf":
            return f"mlperf:{self.params.get('set', '')}:{self.path}"
        items = [str(self.path)] if self.path is not None else []
        items += [f"{k}={v}" for k, v in self.params.items()]
        return f"{self.kind}:{','.join(items)}" if items else self.kind


def parse_dataset_spec(spec: str) -> DatasetSpec:
    kind, colon, rest = spec.partition(":")
    if kind == "mlperf":
        name, _, path = rest.partition(":")
        if name not in MLPERF_SETS or not path:
            raise DatasetError(f"dataset spec {spec!r}: write mlperf:SET:PATH with SET one of {', '.join(MLPERF_SETS)}")
        return DatasetSpec("mlperf", Path(path), {"set": name})
    if kind in PATH_KINDS:
        path, params = _path_and_params(rest, PATH_KINDS[kind], spec)
        return DatasetSpec(kind, path, params)
    if not colon:
        if spec.endswith(".jsonl"):
            return DatasetSpec("jsonl", Path(spec))
        if kind not in NAMED_KINDS and ("/" in spec or Path(spec).exists()):
            return DatasetSpec("npy", Path(spec))
        return DatasetSpec(kind)
    return DatasetSpec(kind, None, _key_values(rest, spec))


def _key_values(rest: str, spec: str) -> dict[str, str]:
    """'n=8,isl=lognormal(1024,0.5)' -> {'n': '8', 'isl': 'lognormal(1024,0.5)'}."""
    params: dict[str, str] = {}
    depth = 0
    key_val = ""
    for ch in rest + ",":  # split on commas outside parentheses
        if ch == "," and depth == 0:
            if key_val:
                k, eq, v = key_val.partition("=")
                if not eq:
                    raise DatasetError(f"dataset spec {spec!r}: {key_val!r} is not KEY=VALUE")
                params[k.strip()] = v.strip()
            key_val = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        key_val += ch
    return params


def _path_and_params(rest: str, known: tuple[str, ...], spec: str) -> tuple[Path, dict[str, str]]:
    """'data/x.json,n=8,seed=1' -> (Path('data/x.json'), {'n': '8', 'seed': '1'})."""
    parts = rest.split(",")
    params: dict[str, str] = {}
    while len(parts) > 1:
        key, eq, value = parts[-1].partition("=")
        if not eq or key.strip() not in known:
            break
        params[key.strip()] = value.strip()
        parts.pop()
    path = ",".join(parts)
    if not path:
        raise DatasetError(f"dataset spec {spec!r}: no file given")
    return Path(path), dict(reversed(params.items()))  # in the order written
