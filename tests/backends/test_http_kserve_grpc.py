"""KServe v2 over gRPC (protocol kserve-v2-grpc) against the in-test gRPC server around the
embedded digits model (tests/support/grpc_servers.py): accuracy equals ONNX Runtime's,
scored locally; a status that is not OK is one line at load or a failure counted by its
reason, with every sample kept; a server that is not there is `connect`, one that is too
slow `timeout`; the proto compiled at load is the specification's wire contract."""

from __future__ import annotations

import asyncio
import sys

import numpy as np
import onnxruntime as ort
import pytest

from backends.base import LoadContext
from backends.http import HttpBackend, HttpOptions
from backends.http.protocols.kserve_v2_grpc import Messages
from harness.config.run_config import RunConfig, validate_backend_options
from harness.data.embedded import digits_test_split
from harness.errors import BackendError, ConfigError, RequestFailed
from tests.support.grpc_servers import KServeGrpcServer
from tests.support.server_process import free_port

pytestmark = pytest.mark.parallel  # no verdict depends on speed (the timeout case waits 20x its deadline)


@pytest.fixture(scope="module")
def local_top1(embedded_model) -> float:
    x, y = digits_test_split()
    session = ort.InferenceSession(str(embedded_model), providers=["CPUExecutionProvider"])
    return float((session.run(None, {"image": x})[0].argmax(axis=1) == y).mean())


def _backend(url: str, **options) -> HttpBackend:
    return HttpBackend(HttpOptions(protocol="kserve-v2-grpc", url=url, model_name="digits", **options))


async def _send(backend: HttpBackend, n: int = 1) -> list[RequestFailed | None]:
    """n samples, one after another: None for each that answered, else its failure."""
    x, _ = digits_test_split()
    found: list[RequestFailed | None] = []
    try:
        for i in range(n):
            try:
                [c async for c in backend.stream(backend.prepare({"image": x[i]}))]
                found.append(None)
            except RequestFailed as e:
                found.append(e)
    finally:
        await backend.aclose()
    return found


def test_accuracy_over_grpc_equals_onnx_runtime_locally(run_harness, embedded_model, local_top1):
    with KServeGrpcServer(embedded_model) as srv:
        _, s = run_harness(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset="digits",
            backend_options={"protocol": "kserve-v2-grpc", "url": srv.url, "model_name": "digits", "max_in_flight": 16},
        )  # fmt: skip
        answered = srv.infers
    n = len(digits_test_split()[1])
    acc = s["accuracy"]
    assert s["harness"]["success_rate"] == 1.0 and s["harness"]["samples"] == n
    assert acc["scored_samples"] == n and acc["value"] == pytest.approx(local_top1, abs=1e-9) and acc["value"] > 0.9
    assert answered == n + 1  # every sample, and the one warm-up request
    described = s["backend"]
    assert described["protocol"] == "kserve-v2-grpc" and described["model_version"] == ""
    assert described["server"] == {"name": "digits", "versions": ["1"], "platform": "onnxruntime_onnx"}
    assert described["inputs"][0] == {"name": "image", "shape": [None, 1, 8, 8], "dtype": "float32"}


def test_a_status_that_is_not_ok_is_counted_by_its_reason_and_no_sample_is_lost(run_harness, embedded_model):
    k = 4
    with KServeGrpcServer(embedded_model, fail_every=k) as srv:
        _, s = run_harness(
            backend="http", scenario="Offline", dataset="digits", min_query_count=40, min_duration_s=0,
            backend_options={"protocol": "kserve-v2-grpc", "url": srv.url, "model_name": "digits", "max_in_flight": 4,
                             "warmup_requests": 0},
        )  # fmt: skip
        answered = srv.infers
    ours = s["harness"]
    assert ours["samples"] == answered >= 40  # every request the server saw is a sample, and the reverse
    assert ours["failures_by_reason"] == {"grpc_INVALID_ARGUMENT": answered // k}
    assert ours["succeeded"] == answered - answered // k


def test_an_unknown_model_is_one_line_at_load(embedded_model):
    with KServeGrpcServer(embedded_model) as srv:
        backend = HttpBackend(HttpOptions(protocol="kserve-v2-grpc", url=srv.url, model_name="nope"))
        with pytest.raises(BackendError) as e:
            backend.load(LoadContext(None, 1, "Offline"))
        msg = str(e.value)
        assert "\n" not in msg and f"server at {srv.url} answered grpc_NOT_FOUND: Model nope not found" in msg
        assert "is model_name right?" in msg
        # without the probe, each request fails by the same reason
        unchecked = HttpBackend(HttpOptions(protocol="kserve-v2-grpc", url=srv.url, model_name="nope", check_server=False))
        unchecked.load(LoadContext(None, 1, "Offline"))
        (failure,) = asyncio.run(_send(unchecked))
        assert failure is not None and failure.reason == "grpc_NOT_FOUND" and "Model nope not found" in failure.detail


def test_a_server_that_is_not_listening_is_connect():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(BackendError, match=r"^cannot read model metadata from .*: ConnectError: failed to connect"):
        _backend(url).load(LoadContext(None, 1, "Offline"))
    backend = _backend(url, check_server=False, retries=2)
    backend.load(LoadContext(None, 1, "Offline"))
    (failure,) = asyncio.run(_send(backend))
    assert failure is not None and failure.reason == "connect"
    assert backend.retries_total == 2  # retried, as a refused HTTP connection is


def test_an_answer_later_than_the_deadline_is_timeout(embedded_model):
    # deadline: connect + read timeout = 0.1 s; the server holds each answer 20 times as long
    with KServeGrpcServer(embedded_model, delay_s=2.0) as srv:
        backend = _backend(srv.url, connect_timeout_s=0.05, read_timeout_s=0.05)
        backend.load(LoadContext(None, 1, "Offline"))
        (failure,) = asyncio.run(_send(backend))
    assert failure is not None and failure.reason == "timeout" and "no answer in 0.1 s" in failure.detail


def test_a_malformed_answer_is_malformed_protobuf(embedded_model):
    backend = _backend("http://127.0.0.1:9", check_server=False)
    backend.load(LoadContext(None, 1, "Offline"))
    with pytest.raises(RequestFailed) as e:
        backend._protocol.decode(b"\xff\xff\xff")
    assert e.value.reason == "malformed_protobuf"
    m = backend._protocol.messages
    with pytest.raises(RequestFailed, match="empty_output: the answer has no outputs"):
        backend._protocol.decode(m.ModelInferResponse(model_name="digits").SerializeToString())


def test_options_name_the_protocol_and_the_grpc_form_of_url():
    for options, wanted in [
        ({"url": "http://127.0.0.1:8081"}, "protocol kserve-v2-grpc needs model_name"),
        ({"url": "https://127.0.0.1:8081", "model_name": "m"}, "speaks plaintext gRPC: url must be http://host:port"),
        ({"url": "http://127.0.0.1:8081/v2", "model_name": "m"}, "url is the server's gRPC address, http://host:port, with no path"),
    ]:  # fmt: skip
        config = RunConfig(backend="http", backend_options={"protocol": "kserve-v2-grpc", **options})
        with pytest.raises(ConfigError) as e:
            validate_backend_options(config, HttpOptions)
        assert "\n" not in str(e.value) and wanted in str(e.value), str(e.value)


def test_without_the_grpc_extra_the_backend_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc_tools", None)  # find_spec reports a None entry as not installed
    with pytest.raises(BackendError) as e:
        _backend("http://127.0.0.1:9")
    assert str(e.value) == (
        "protocol kserve-v2-grpc needs grpc_tools, which is not installed: pip install 'loadgen-harness[grpc]'"
    )


def test_the_compiled_messages_keep_the_specifications_field_numbers():
    """The wire contract (Open Inference Protocol, open_inference_grpc.proto): a changed
    number would still compile and silently talk past every server."""
    m = Messages()

    def numbers(cls) -> dict[str, int]:
        return {f.name: f.number for f in cls.DESCRIPTOR.fields}

    assert numbers(m.ServerReadyResponse) == {"ready": 1}
    assert numbers(m.ModelMetadataRequest) == {"name": 1, "version": 2}
    assert numbers(m.ModelMetadataResponse) == {"name": 1, "versions": 2, "platform": 3, "inputs": 4, "outputs": 5}
    tensor = m.ModelMetadataResponse.DESCRIPTOR.nested_types_by_name["TensorMetadata"]
    assert {f.name: f.number for f in tensor.fields} == {"name": 1, "datatype": 2, "shape": 3}
    assert numbers(m.ModelInferRequest) == {
        "model_name": 1, "model_version": 2, "id": 3, "inputs": 5, "outputs": 6, "raw_input_contents": 7}  # fmt: skip
    assert numbers(m.ModelInferResponse) == {
        "model_name": 1, "model_version": 2, "id": 3, "outputs": 5, "raw_output_contents": 6}  # fmt: skip
    for message, nested in ((m.ModelInferRequest, "InferInputTensor"), (m.ModelInferResponse, "InferOutputTensor")):
        t = message.DESCRIPTOR.nested_types_by_name[nested]
        assert {f.name: f.number for f in t.fields} == {"name": 1, "datatype": 2, "shape": 3, "contents": 5}
    contents = m.ModelInferResponse.DESCRIPTOR.nested_types_by_name["InferOutputTensor"].fields_by_name["contents"]
    assert {f.name: f.number for f in contents.message_type.fields} == {
        "bool_contents": 1, "int_contents": 2, "int64_contents": 3, "uint_contents": 4, "uint64_contents": 5,
        "fp32_contents": 6, "fp64_contents": 7, "bytes_contents": 8}  # fmt: skip
    assert m.ModelInferRequest.DESCRIPTOR.full_name == "inference.ModelInferRequest"
    service = m.ModelInferRequest.DESCRIPTOR.file.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    assert {x.name for x in service.methods} == {"ServerReady", "ModelMetadata", "ModelInfer"}


def test_raw_contents_round_trip_every_datatype_little_endian(embedded_model):
    """What `encode` sends is what the server reads back: each dtype, row-major, little-endian."""
    backend = _backend("http://127.0.0.1:9", check_server=False)
    backend.load(LoadContext(None, 1, "Offline"))
    m = backend._protocol.messages
    for dtype in ("float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"):
        arr = (np.arange(12).reshape(3, 4) % 2 == 0) if dtype == "bool" else np.arange(12, dtype=dtype).reshape(3, 4)
        request = m.ModelInferRequest.FromString(backend.prepare({"x": arr.astype(dtype)}).body)
        (t,) = request.inputs
        assert request.model_name == "digits" and list(t.shape) == [1, 3, 4]
        back = np.frombuffer(request.raw_input_contents[0], dtype=np.dtype(dtype).newbyteorder("<")).reshape(3, 4)
        assert np.array_equal(back, arr.astype(dtype))
