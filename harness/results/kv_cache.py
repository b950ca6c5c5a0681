"""KV-cache memory: how much a request's cache takes and how many fit beside the weights.

    bytes = 2 (K and V) x layers x kv_heads x head_dim x tokens x bytes per value

`kv_heads` is the number of *key/value* heads: with grouped-query attention it is smaller
than the number of attention heads, and assuming they are equal overstates the cache by
the group factor. Left out, and said so in every result: activations and temporary
buffers, allocator fragmentation and paging granularity (e.g. vLLM blocks), framework
metadata, sliding-window or MLA compression (the formula is for full attention).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

BYTES_PER_VALUE = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
_TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
LEFT_OUT = (
    "activations and temporary buffers",
    "allocator fragmentation and paging granularity",
    "framework metadata",
    "sliding-window or compressed (MLA) attention: full attention assumed",
)
GB = 1e9


@dataclass(frozen=True)
class KvShape:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str = "fp16"

    def __post_init__(self) -> None:
        for name in ("layers", "kv_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"kv-cache: {name} must be a positive integer, got {getattr(self, name)}")
        if self.dtype not in BYTES_PER_VALUE:
            raise ConfigError(f"kv-cache: unknown dtype {self.dtype!r}; use one of {', '.join(BYTES_PER_VALUE)}")

    def bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_VALUE[self.dtype]


def from_hf_config(path: Path, dtype: str | None = None) -> KvShape:
    """Read a Hugging Face config.json; never assumes kv heads equal attention heads unless absent."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read model config {path}: {e}") from e
    cfg = cfg.get("text_config", cfg)  # multimodal configs nest the language model
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except KeyError as e:
        raise ConfigError(f"{path}: missing {e.args[0]!r}; pass --layers/--kv-heads/--head-dim instead") from e
    # Absent num_key_value_heads means multi-head attention (one KV head per head), as in HF.
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    if dtype is None:
        dtype, _ = config_dtype(cfg)
    return KvShape(layers, kv_heads, head_dim, dtype)


DEFAULT_DTYPE = "fp16"


def config_dtype(cfg: dict[str, Any]) -> tuple[str, str]:
    """The cache's dtype from a Hugging Face config (`torch_dtype`, or `dtype` in newer
    transformers) and where it came from, so a default is never silent: a model run in
    fp32 has twice the cache an fp16 guess says."""
    cfg = cfg.get("text_config", cfg)
    raw = cfg.get("torch_dtype") or cfg.get("dtype")
    if raw is None:
        return DEFAULT_DTYPE, f"{DEFAULT_DTYPE} by default: the config has no torch_dtype; pass --dtype for the dtype the model runs in"
    known = _TORCH_DTYPES.get(str(raw))
    if known is None:
        return DEFAULT_DTYPE, f"{DEFAULT_DTYPE} by default: the config's torch_dtype {raw!r} is not one of {', '.join(_TORCH_DTYPES)}; pass --dtype"
    return known, f"{known} from the config's torch_dtype {raw!r}"


def hf_config_dtype(path: Path) -> tuple[str, str]:
    """`config_dtype` of a config.json file."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read model config {path}: {e}") from e
    return config_dtype(cfg)


@dataclass(frozen=True)
class KvEstimate:
    shape: dict[str, Any]
    seq_len: int
    batch: int
    bytes_per_token: float
    bytes_per_sequence: float
    bytes_for_batch: float
    memory_bytes: float | None
    weights_bytes: float | None
    max_concurrent_sequences: int | None
    left_out: tuple[str, ...] = LEFT_OUT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(
    shape: KvShape, seq_len: int, batch: int = 1, memory_gb: float | None = None, weights_gb: float = 0.0
) -> KvEstimate:
    if seq_len <= 0 or batch <= 0:
        raise ConfigError("kv-cache: --seq-len and --batch must be positive")
    per_token = shape.bytes_per_token()
    per_seq = per_token * seq_len
    max_seqs = None
    memory = weights = None
    if memory_gb is not None:
        memory, weights = memory_gb * GB, weights_gb * GB
        if weights >= memory:
            raise ConfigError(f"kv-cache: weights ({weights_gb} GB) leave no room in {memory_gb} GB")
        max_seqs = int((memory - weights) // per_seq)
    return KvEstimate(asdict(shape), seq_len, batch, per_token, per_seq, per_seq * batch, memory, weights, max_seqs)
