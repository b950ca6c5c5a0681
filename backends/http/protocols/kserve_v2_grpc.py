"""KServe v2 over gRPC, the Open Inference Protocol's gRPC form (service
`inference.GRPCInferenceService` at `url` = http://host:port, the server's gRPC port):
Triton, KServe, MLServer. Tensors in (ModelInfer), one tensor out; at load, ServerReady
and then ModelMetadata give the model's signature. Options, metadata and the answer's
tensor are those of kserve-v2 over HTTP (backends/http/protocols/kserve_v2.py).

The messages are compiled from kserve_v2_grpc.proto, beside this module (written from the
specification), at load, into a descriptor pool of the protocol's own: see pyproject.toml's
`grpc` extra for why nothing generated is checked in.

gRPC is HTTP/2, not the HTTP/1.1 client's wire, so the protocol brings its own transport
(`GrpcTransport`, a grpc.aio channel made on the SUT's loop): it sends the bytes `encode`
made before the test and hands the answer's bytes to `decode`, so the timed path
serializes nothing. The backend's retry loop and failure reasons work over it:
    grpc_<STATUS>      a status that is not OK, with its details (grpc_NOT_FOUND: no
                       such model; grpc_INVALID_ARGUMENT: the server refused the input)
    connect            UNAVAILABLE because no connection could be made (retried as for HTTP)
    timeout            DEADLINE_EXCEEDED: no answer within connect + read timeout (at most total)
    malformed_protobuf an answer that is not a ModelInferResponse
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from backends.base import Chunk, PromptSample, Sample
from backends.http.protocol import TransportSettings
from backends.http.protocols.kserve_v2 import _NP_TO_V2, _V2_TO_NP, KServeV2, KServeV2Options
from harness.errors import BackendError, ConnectError, DatasetError, RequestFailed

SERVICE = "inference.GRPCInferenceService"
PROTO = Path(__file__).with_name("kserve_v2_grpc.proto")

#: the InferTensorContents field that holds each datatype's values (FP16 has none: raw only)
_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}  # fmt: skip


class KServeV2GrpcOptions(KServeV2Options):
    protocol: Literal["kserve-v2-grpc"] = Field(  # type: ignore[assignment]
        "kserve-v2-grpc",
        description="KServe v2 (Open Inference Protocol) over gRPC, ModelInfer on inference.GRPCInferenceService "
        "(url: http://host:port, the gRPC port; plaintext); tensors in, a tensor out; needs the grpc extra: "
        "pip install 'loadgen-harness[grpc]'",
    )
    model_version: str = Field("", description="the model version asked for ('': the server's choice)")

    @model_validator(mode="after")
    def _grpc_target(self) -> KServeV2GrpcOptions:
        if not self.url.startswith("http://"):
            raise ValueError(f"protocol {self.protocol} speaks plaintext gRPC: url must be http://host:port (TLS is not supported)")
        if self.url.split("://", 1)[1].find("/") >= 0 or "?" in self.url:
            raise ValueError(f"protocol {self.protocol}: url is the server's gRPC address, http://host:port, with no path")
        return self


class KServeV2Grpc(KServeV2):
    name = "kserve-v2-grpc"
    Options = KServeV2GrpcOptions  # type: ignore[assignment]
    options: KServeV2GrpcOptions
    aliases = ("kserve-grpc", "kserve-v2-grpc", "triton-grpc", "grpc")
    url_form = "http://host:port (the gRPC port)"
    content_type = "application/grpc"
    requires: ClassVar[tuple[str, ...]] = ("grpc", "grpc_tools")
    install_hint = "pip install 'loadgen-harness[grpc]'"

    def __init__(self, options: KServeV2GrpcOptions) -> None:
        super().__init__(options)
        self.messages = Messages()

    def endpoint(self, base: str) -> str:
        return base  # one channel to host:port; each call names the model

    def metadata_url(self, base: str) -> str | None:
        return base  # the transport's GET is the probe: ServerReady, then ModelMetadata

    def transport(self, settings: TransportSettings) -> GrpcTransport:
        return GrpcTransport(settings, self.messages, self.options.model_name or "", self.options.model_version)

    def encode(self, sample: Sample) -> bytes:
        if isinstance(sample, PromptSample):
            raise DatasetError(f"protocol {self.name} takes tensors, not prompts: use a tensor dataset")
        request = self.messages.ModelInferRequest(model_name=self.options.model_name, model_version=self.options.model_version)
        # raw contents, one rule for every datatype (FP16 has no typed field): row-major, little-endian
        for key, arr in sample.items():
            datatype = _NP_TO_V2.get(arr.dtype.name)
            if datatype is None:
                raise DatasetError(f"input {key!r}: dtype {arr.dtype} has no KServe v2 datatype")
            request.inputs.add(name=key, datatype=datatype, shape=[1, *arr.shape])
            request.raw_input_contents.append(np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes())
        if self.options.output_name:
            request.outputs.add(name=self.options.output_name)
        return request.SerializeToString()

    def decode(self, raw: bytes) -> list[Chunk]:
        try:
            answer = self.messages.ModelInferResponse.FromString(raw)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, whatever its module
            raise RequestFailed("malformed_protobuf", self.bound.excerpt(f"{type(e).__name__}: {e}")) from e
        return [Chunk(n_tokens=0, output=self._tensor(answer))]

    def _tensor(self, answer: Any) -> np.ndarray:
        outputs = list(answer.outputs)
        name = self.options.output_name
        index = next((i for i, t in enumerate(outputs) if t.name == name), None) if name else (0 if outputs else None)
        if index is None:
            found = ", ".join(t.name for t in outputs)
            raise RequestFailed("empty_output", f"no output {name!r} in the answer (its outputs: {found})" if found
                                else "the answer has no outputs")
        out = outputs[index]
        dtype = _V2_TO_NP.get(out.datatype)
        if dtype is None:
            raise RequestFailed("malformed_protobuf", self.bound.excerpt(f"unsupported datatype {out.datatype!r}"))
        if index < len(answer.raw_output_contents):  # raw answers (MLServer's to raw inputs)
            arr = np.frombuffer(answer.raw_output_contents[index], dtype=np.dtype(dtype).newbyteorder("<"))
        else:  # typed contents
            field = _CONTENTS.get(out.datatype)
            arr = np.asarray(getattr(out.contents, field), dtype=dtype) if field else np.empty(0, dtype)
        if arr.size == 0:
            raise RequestFailed("empty_output", f"output {out.name!r} has no data")
        shape = list(out.shape)
        if int(np.prod(shape)) != arr.size:
            raise RequestFailed("malformed_protobuf", f"output {out.name!r}: {arr.size} values for shape {shape}")
        return arr.astype(dtype).reshape(shape)[0]  # one sample per request: drop the batch dim

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model_version": self.options.model_version}


class Messages:
    """The protocol's messages, compiled from kserve_v2_grpc.proto into a descriptor pool of
    their own (not protobuf's default pool: a process that also loads Triton's or MLServer's
    `inference` package keeps both)."""

    def __init__(self) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from grpc_tools import protoc

        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "kserve_v2_grpc.pb"
            if protoc.main(["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={out}", PROTO.name]) != 0:
                raise BackendError(f"{PROTO} does not compile (grpcio-tools' protoc failed): reinstall the harness")
            files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            pool.Add(file)

        def message(name: str) -> Any:
            return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{name}"))

        self.ServerReadyRequest = message("ServerReadyRequest")
        self.ServerReadyResponse = message("ServerReadyResponse")
        self.ModelMetadataRequest = message("ModelMetadataRequest")
        self.ModelMetadataResponse = message("ModelMetadataResponse")
        self.ModelInferRequest = message("ModelInferRequest")
        self.ModelInferResponse = message("ModelInferResponse")


class Whole:
    """An answer that arrived whole (a unary call): HTTP/2's 200 that gRPC always answers
    with (the call's own status, in its trailers, was OK), no headers the backend reads."""

    status = 200
    headers: Mapping[str, str] = MappingProxyType({})

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def iter_any(self) -> AsyncIterator[bytes]:
        yield self._body

    async def read(self) -> bytes:
        return self._body

    async def text(self, errors: str = "strict") -> str:
        return self._body.decode("utf-8", errors)

    def release(self) -> None:
        pass


class GrpcTransport:
    """One grpc.aio channel (an HTTP/2 connection that multiplexes every request), made on
    the running loop, which it then belongs to. POST sends the bytes of a ModelInferRequest
    and answers the ModelInferResponse's bytes; GET is the probe: ServerReady, then
    ModelMetadata, answered as the JSON that KServe v2 over HTTP gives."""

    resent = 0  # a channel reconnects by itself; nothing is sent twice

    def __init__(self, settings: TransportSettings, messages: Messages, model: str, version: str) -> None:
        import grpc.aio

        self._grpc = grpc
        self._messages = messages
        self._model, self._version = model, version
        # a unary call's answer arrives whole: read_timeout bounds it once connected
        self._deadline = min(settings.total_timeout, settings.connect_timeout + settings.read_timeout)
        self._metadata = tuple((k.lower(), v) for k, v in settings.headers.items() if k.lower() != "content-type")
        target = settings.url.split("://", 1)[1]
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        self._channel = grpc.aio.insecure_channel(target, options=options)
        # bytes in, bytes out: `encode` serialized the request before the test, `decode` parses
        self._infer = self._channel.unary_unary(f"/{SERVICE}/ModelInfer")

    async def request(self, method: str, path: str, body: bytes = b"", headers: bytes = b"") -> Whole:
        if method == "GET":
            return Whole(json.dumps(await self._probe()).encode())
        return Whole(await self._call(self._infer, body))

    async def _call(self, rpc: Any, body: Any, what: str = "") -> Any:
        grpc = self._grpc
        try:
            return await rpc(body, timeout=self._deadline, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            code, details = e.code(), e.details() or ""
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise asyncio.TimeoutError(f"deadline: no answer{what} in {self._deadline:g} s") from e
            if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details.lower():
                raise ConnectError(details) from e
            raise RequestFailed(f"grpc_{code.name}", f"{details}{what}") from e

    async def _probe(self) -> dict[str, Any]:
        m = self._messages
        ready = self._channel.unary_unary(
            f"/{SERVICE}/ServerReady", request_serializer=m.ServerReadyRequest.SerializeToString,
            response_deserializer=m.ServerReadyResponse.FromString,
        )  # fmt: skip
        if not (await self._call(ready, m.ServerReadyRequest(), " (ServerReady)")).ready:
            raise RequestFailed("not_ready", "ServerReady answered ready: false (is the server still loading?)")
        metadata = self._channel.unary_unary(
            f"/{SERVICE}/ModelMetadata", request_serializer=m.ModelMetadataRequest.SerializeToString,
            response_deserializer=m.ModelMetadataResponse.FromString,
        )  # fmt: skip
        request = m.ModelMetadataRequest(name=self._model, version=self._version)
        meta = await self._call(metadata, request, f" (ModelMetadata of {self._model!r}: is model_name right?)")

        def spec(t: Any) -> dict[str, Any]:
            return {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}

        return {
            "name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
            "inputs": [spec(t) for t in meta.inputs], "outputs": [spec(t) for t in meta.outputs],
        }  # fmt: skip

    async def close(self) -> None:
        await self._channel.close()


PROTOCOL = KServeV2Grpc
