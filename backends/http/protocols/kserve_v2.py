"""KServe v2, the Open Inference Protocol over HTTP (`POST {url}/v2/models/NAME/infer`):
Triton, KServe, MLServer. Tensors in, one tensor out; the model's signature is read
from `GET {url}/v2/models/NAME` at load."""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from backends.base import Chunk, InputKind, OutputKind, PromptSample, ResponseFormat, Sample, TensorSpec
from backends.http.options import BaseHttpOptions
from backends.http.protocol import HttpProtocol, ServerInfo
from harness.errors import DatasetError, RequestFailed

# KServe v2 datatypes <-> numpy dtype names
_V2_TO_NP = {
    "FP32": "float32", "FP16": "float16", "FP64": "float64", "INT64": "int64", "INT32": "int32",
    "INT16": "int16", "INT8": "int8", "UINT8": "uint8", "BOOL": "bool",
}  # fmt: skip
_NP_TO_V2 = {v: k for k, v in _V2_TO_NP.items()}


class KServeV2Options(BaseHttpOptions):
    protocol: Literal["kserve-v2"] = Field("kserve-v2", description="KServe v2 (Open Inference Protocol) over HTTP, POST {url}/v2/models/{model_name}/infer (url: http://host:port); tensors in, a tensor out")
    output_name: str | None = Field(None, description="the output to return (default: the first)")

    @model_validator(mode="after")
    def _model_named(self) -> KServeV2Options:
        if not self.model_name:
            raise ValueError(f"protocol {self.protocol} needs model_name")
        return self


class KServeV2(HttpProtocol):
    name = "kserve-v2"
    Options = KServeV2Options
    options: KServeV2Options
    aliases = ("kserve", "kserve-v2", "triton", "v2")
    takes: ClassVar[tuple[InputKind, ...]] = ("tensor",)
    gives: ClassVar[OutputKind] = "tensor"

    def endpoint(self, base: str) -> str:
        return f"{base}/v2/models/{self.options.model_name}/infer"

    def metadata_url(self, base: str) -> str | None:
        return f"{base}/v2/models/{self.options.model_name}"

    def read_metadata(self, meta: Any) -> ServerInfo:
        return ServerInfo(
            server={k: meta.get(k) for k in ("name", "versions", "platform")},
            inputs=[_v2_spec(t) for t in meta.get("inputs", [])],
            outputs=[_v2_spec(t) for t in meta.get("outputs", [])],
        )

    def encode(self, sample: Sample) -> bytes:
        if isinstance(sample, PromptSample):
            raise DatasetError("protocol kserve-v2 takes tensors, not prompts: use a tensor dataset")
        return json.dumps({"inputs": [_v2_tensor(k, v) for k, v in sample.items()]}).encode()

    def decode(self, raw: bytes) -> list[Chunk]:
        obj = self.json_body(raw)
        try:
            return [Chunk(n_tokens=0, output=self._output(obj))]
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise RequestFailed("malformed_json", self.bound.excerpt(f"missing {e} in {json.dumps(obj)}")) from e

    def _output(self, obj: dict[str, Any]) -> np.ndarray:
        outputs = obj["outputs"]
        name = self.options.output_name
        out = next(t for t in outputs if t["name"] == name) if name else outputs[0]
        dtype = _V2_TO_NP.get(out["datatype"])
        if dtype is None:
            raise RequestFailed("malformed_json", self.bound.excerpt(f"unsupported datatype {out['datatype']}"))
        arr = np.asarray(out["data"], dtype=dtype)
        if arr.size == 0:
            raise RequestFailed("empty_output", f"output {out['name']!r} has no data")
        return arr.reshape(out["shape"])[0]  # one sample per request: drop the batch dim

    def response_format(self, outputs: list[TensorSpec]) -> ResponseFormat | None:
        if not outputs:
            return None
        spec = next((s for s in outputs if s.name == self.options.output_name), outputs[0])
        return {"dtype": spec.dtype, "shape": list(spec.sample_shape())}


def _v2_spec(t: dict[str, Any]) -> TensorSpec:
    shape = tuple(None if d is None or d < 0 else int(d) for d in t.get("shape", []))
    return TensorSpec(t["name"], shape, _V2_TO_NP.get(t.get("datatype", ""), t.get("datatype", "")))


def _v2_tensor(name: str, arr: np.ndarray) -> dict[str, Any]:
    dt = _NP_TO_V2.get(arr.dtype.name)
    if dt is None:
        raise DatasetError(f"input {name!r}: dtype {arr.dtype} has no KServe v2 datatype")
    return {"name": name, "shape": [1, *arr.shape], "datatype": dt, "data": arr.ravel().tolist()}


PROTOCOL = KServeV2
