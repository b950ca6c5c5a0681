"""A KServe v2 gRPC server (the Open Inference Protocol's `inference.GRPCInferenceService`)
around the embedded ONNX model, on 127.0.0.1: the gRPC twin of http_servers.kserve_app.
A grpc.aio server on a loop in a daemon thread, like http_servers.ServerThread.

It answers ServerReady, ModelMetadata and ModelInfer, with typed contents (fp32_contents)
where MLServer answers raw bytes, so that the two servers cover both forms of an answer.
Faults on purpose: `fail_every` k aborts every k-th ModelInfer with INVALID_ARGUMENT;
`delay_s` holds each answer that long; another model's name is NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from backends.http.protocols.kserve_v2 import _NP_TO_V2, _V2_TO_NP
from backends.http.protocols.kserve_v2_grpc import SERVICE, Messages


class KServeGrpcServer:
    """`with KServeGrpcServer(model) as srv:` serves until the block ends; `srv.url` is the
    protocol's url (http://127.0.0.1:PORT), `srv.infers` the ModelInfer calls answered or refused."""

    def __init__(self, model_path: Path, name: str = "digits", fail_every: int = 0, delay_s: float = 0.0) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(model_path), sess_options=so, providers=["CPUExecutionProvider"])
        self.name, self.fail_every, self.delay_s = name, fail_every, delay_s
        self.infers = 0
        self.m = Messages()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> KServeGrpcServer:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(0.5), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    async def _start(self) -> int:
        m = self.m

        def unary(fn: Any, request: Any, response: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=request.FromString, response_serializer=response.SerializeToString
            )

        handlers = {
            "ServerReady": unary(self._ready, m.ServerReadyRequest, m.ServerReadyResponse),
            "ModelMetadata": unary(self._metadata, m.ModelMetadataRequest, m.ModelMetadataResponse),
            "ModelInfer": unary(self._infer, m.ModelInferRequest, m.ModelInferResponse),
        }
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return port

    # --- the three calls --------------------------------------------------------------------
    async def _ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return self.m.ServerReadyResponse(ready=True)

    async def _metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._known(request.name, context)

        def spec(node: Any) -> dict[str, Any]:
            dtype = {"tensor(float)": "float32", "tensor(int64)": "int64"}[node.type]
            return {"name": node.name, "datatype": _NP_TO_V2[dtype], "shape": [d if isinstance(d, int) else -1 for d in node.shape]}

        return self.m.ModelMetadataResponse(
            name=self.name, versions=["1"], platform="onnxruntime_onnx",
            inputs=[spec(i) for i in self.session.get_inputs()], outputs=[spec(o) for o in self.session.get_outputs()],
        )  # fmt: skip

    async def _infer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._known(request.model_name, context)
        self.infers += 1
        if self.fail_every and self.infers % self.fail_every == 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request {self.infers} refused on purpose")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        feeds = {}
        for i, t in enumerate(request.inputs):
            dtype = np.dtype(_V2_TO_NP[t.datatype]).newbyteorder("<")
            if request.raw_input_contents:
                data = np.frombuffer(request.raw_input_contents[i], dtype=dtype)
            else:
                data = np.asarray(t.contents.fp32_contents if t.datatype == "FP32" else t.contents.int64_contents, dtype)
            feeds[t.name] = data.astype(dtype.newbyteorder("=")).reshape(list(t.shape))
        outs = self.session.run(None, feeds)
        answer = self.m.ModelInferResponse(model_name=self.name, model_version="1", id=request.id)
        for node, value in zip(self.session.get_outputs(), outs, strict=True):
            out = answer.outputs.add(name=node.name, datatype="FP32", shape=list(value.shape))
            out.contents.fp32_contents.extend(value.ravel().tolist())
        return answer

    async def _known(self, model: str, context: grpc.aio.ServicerContext) -> None:
        if model != self.name:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Model {model} not found")
