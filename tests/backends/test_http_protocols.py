"""The contract of an HTTP protocol, checked for every registered one: a sample encoded by
the protocol, sent by the http backend to a real server on 127.0.0.1 (tests/support),
and the answer decoded to what the test knows the server answered. A protocol this test
has no case for fails here, with what to add: adding a protocol is its module and its case.

Also: an option of another protocol is one line naming the protocol, an unknown protocol
lists the known ones, and a third-party protocol, registered only through the
`harness.http_protocols` entry-point group, is found, listed and run under LoadGen.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import numpy as np
import onnxruntime as ort
import pytest
from aiohttp import web

from backends.base import Chunk, InputKind, LoadContext, OutputKind, PromptSample, RankSample, Sample
from backends.http import HttpBackend, HttpOptions, registry
from harness.config.run_config import RunConfig, validate_backend_options
from harness.data.embedded import digits_test_split
from harness.errors import ConfigError
from harness.run import runner
from tests.support.grpc_servers import KServeGrpcServer
from tests.support.http_servers import ServerThread, Timing, kserve_app, openai_app
from tests.support.rerank_server import planted, rerank_app

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

QUESTION = "What do the two protocols share?"
ANSWER = "one transport and one loop"


@dataclass
class Case:
    """One protocol's round trip: a server, the options that reach it, a sample, and the
    check of the decoded chunks (what the server is known to have answered). The server is
    an aiohttp app (served by ServerThread) or, for another wire, a context manager that
    serves and has a `url` (tests/support/grpc_servers.py)."""

    app: web.Application | AbstractContextManager[Any]
    options: Callable[[str], dict[str, Any]]  # the server's URL -> the protocol's options
    sample: Sample
    check: Callable[[list[Chunk]], None]
    #: option sets tried in turn (e.g. streamed and whole): each must pass the check
    variants: list[dict[str, Any]] = field(default_factory=lambda: [{}])


def _digits(model: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The first digit image as one sample, and ONNX Runtime's answer for it, locally."""
    x, _ = digits_test_split()
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return {"image": x[0]}, session.run(None, {"image": x[:1]})[0][0]


def _answered(chunks: list[Chunk]) -> None:
    text = "".join(c.text for c in chunks)
    assert text == ANSWER
    usage = [c.usage for c in chunks if c.usage is not None]
    assert [(u.output_tokens, u.input_tokens) for u in usage] == [(len(ANSWER.split()), len(QUESTION.split()))]
    assert chunks[0].headers == 200


def _openai(tmp_path: Path, model: Path, sample: Sample) -> Case:
    return Case(openai_app(Timing(), answers={QUESTION: ANSWER}), lambda url: {"url": url + "/v1"}, sample, _answered,
                variants=[{"stream": True}, {"stream": False}])


def _kserve(tmp_path: Path, model: Path) -> Case:
    sample, truth = _digits(model)

    def check(chunks: list[Chunk]) -> None:
        (out,) = [c.output for c in chunks if c.output is not None]
        np.testing.assert_allclose(out, truth, rtol=0, atol=1e-6)

    return Case(kserve_app(model), lambda url: {"url": url, "model_name": "digits"}, sample, check)


def _kserve_grpc(tmp_path: Path, model: Path) -> Case:
    sample, truth = _digits(model)

    def check(chunks: list[Chunk]) -> None:
        (out,) = [c.output for c in chunks if c.output is not None]
        np.testing.assert_allclose(out, truth, rtol=0, atol=1e-6)

    return Case(KServeGrpcServer(model), lambda url: {"url": url, "model_name": "digits"}, sample, check)


def _json(tmp_path: Path, model: Path) -> Case:
    sample, truth = _digits(model)
    template = tmp_path / "v2.json"
    template.write_text(json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": "{{input}}"}]}))

    def check(chunks: list[Chunk]) -> None:
        (out,) = [c.output for c in chunks if c.output is not None]
        np.testing.assert_allclose(out, truth.ravel(), rtol=0, atol=1e-6)

    options = {"request_template": str(template), "response_path": "outputs.0.data", "json_input": "tensor"}
    return Case(kserve_app(model), lambda url: {"url": url + "/v2/models/digits/infer", **options}, sample, check)


def _rerank(tmp_path: Path, model: Path) -> Case:
    scores = [0.25, 0.875, 0.5]
    sample = RankSample("which document?", tuple(f"document {i} {planted(v)}" for i, v in enumerate(scores)))

    def check(chunks: list[Chunk]) -> None:  # the server sends them sorted by score; decoded, in the documents' order
        (out,) = [c.output for c in chunks if c.output is not None]
        assert out.tolist() == scores

    return Case(rerank_app(), lambda url: {"url": url}, sample, check,
                variants=[{"path": "/v1/rerank"}, {"path": "/rerank"}, {"path": "/v2/rerank"}])


def _embeddings(tmp_path: Path, model: Path) -> Case:
    """A server whose vector for a text is [its characters, its words, 1]: known exactly."""

    async def embed(request: web.Request) -> web.Response:
        texts = (await request.json())["input"]
        data = [{"index": i, "embedding": [len(t), len(t.split()), 1.0]} for i, t in enumerate(texts)]
        words = sum(len(t.split()) for t in texts)
        return web.json_response({"data": data, "usage": {"prompt_tokens": words, "total_tokens": words}})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embed)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "embedder"}]})

    app.router.add_get("/v1/models", models)

    def check(chunks: list[Chunk]) -> None:
        (out,) = [c.output for c in chunks if c.output is not None]
        np.testing.assert_array_equal(out, [[len(QUESTION), len(QUESTION.split()), 1.0]])
        assert [c.usage.input_tokens for c in chunks if c.usage is not None] == [len(QUESTION.split())]

    return Case(app, lambda url: {"url": url + "/v1"}, PromptSample(QUESTION), check,
                variants=[{"batch": 1}, {"batch": 8, "encoding_format": "float"}])


def _transcriptions(tmp_path: Path, model: Path) -> Case:
    from harness.data.audio import read_clip
    from tests.support.speech import spoken
    from tests.support.transcription_server import Recognizer, transcription_app

    recognizer = Recognizer()
    clip = read_clip(spoken("Glue the sheet to the dark blue background.", tmp_path / "said.wav"), "", 25)
    heard, seconds = recognizer(clip.sample.data)  # what the model makes of these bytes, here
    assert heard and seconds == clip.sample.seconds

    def check(chunks: list[Chunk]) -> None:
        assert chunks[0].headers == 200
        assert "".join(c.text for c in chunks) == heard
        (usage,) = [c.usage for c in chunks if c.usage is not None]
        # each answer form carries the words' count, the audio's length, or both (verbose_json)
        assert usage.output_tokens in (len(heard.split()), None) and usage.audio_seconds in (seconds, None)
        assert (usage.output_tokens, usage.audio_seconds) != (None, None)

    return Case(transcription_app(recognizer, []), lambda url: {"url": url + "/v1"}, clip.sample, check,
                variants=[{"stream": True}, {"stream": False}, {"response_format": "verbose_json"}])


#: protocol -> its case (tmp_path, the embedded ONNX model -> Case)
CASES: dict[str, Callable[[Path, Path], Case]] = {
    "openai-chat": lambda t, m: _openai(t, m, PromptSample(messages=({"role": "user", "content": QUESTION},))),
    "openai-completions": lambda t, m: _openai(t, m, PromptSample(QUESTION)),
    "kserve-v2": _kserve,
    "kserve-v2-grpc": _kserve_grpc,
    "json": _json,
    "rerank": _rerank,
    "openai-embeddings": _embeddings,
    "openai-transcriptions": _transcriptions,
}


async def _collect(backend: HttpBackend, sample: Sample) -> list[Chunk]:
    try:
        return [c async for c in backend.stream(backend.prepare(sample))]
    finally:
        await backend.aclose()


def round_trip(name: str, case: Case) -> None:
    """The case's sample, encoded, sent and decoded through protocol `name`, each variant."""
    protocol = registry.get(name)
    with ServerThread(case.app) if isinstance(case.app, web.Application) else case.app as srv:
        for variant in case.variants:
            options = HttpOptions(protocol=name, **case.options(srv.url), **variant)
            assert type(options) is protocol.Options  # the union picked the protocol's own options
            backend = HttpBackend(options)
            backend.load(LoadContext(None, 1, "Offline"))
            # what it takes and gives is declared as data the SUT reads
            assert backend.input_kind in protocol.takes and set(protocol.takes) <= set(get_args(InputKind))
            assert backend.output_kind in get_args(OutputKind)
            chunks = asyncio.run(_collect(backend, case.sample))
            case.check(chunks)


@pytest.mark.parametrize("name", registry.names())
def test_each_protocol_encodes_a_sample_a_server_answers_and_decodes_the_answer(name, tmp_path, embedded_model):
    make = CASES.get(name)
    assert make is not None, (
        f"protocol {name} has no case in {Path(__file__).name}: add one to CASES (a server from tests/support, "
        "the options that reach it, a sample, and the check of the answer it is known to give)"
    )
    round_trip(name, make(tmp_path, embedded_model))


def _foreign_option(name: str) -> tuple[str, Any]:
    """An option of another protocol that `name` has not, with a valid value of its own."""
    mine = registry.get(name).Options.model_fields
    for other, protocol in registry.protocols().items():
        for key, f in protocol.Options.model_fields.items():
            if key not in mine:
                return key, f.get_default(call_default_factory=True) if not f.is_required() else "x"
    raise AssertionError(f"every option of every protocol is one of {name}'s: nothing to test")


@pytest.mark.parametrize("name", registry.names())
def test_an_option_of_another_protocol_is_one_line_naming_the_protocol(name):
    key, value = _foreign_option(name)
    config = RunConfig(backend="http", backend_options={"protocol": name, "url": "http://127.0.0.1:9/v1", key: value})
    with pytest.raises(ConfigError) as e:
        validate_backend_options(config, HttpOptions)
    msg = str(e.value)
    assert "\n" not in msg and f"{key} is not an option of protocol {name}" in msg, msg


def test_an_unknown_protocol_lists_the_known_ones_and_an_alias_says_which_it_means():
    config = RunConfig(backend="http", backend_options={"protocol": "vllm", "url": "http://127.0.0.1:9/v1"})
    with pytest.raises(ConfigError) as e:
        validate_backend_options(config, HttpOptions)
    msg = str(e.value)
    assert "\n" not in msg and "unknown protocol 'vllm' (a vllm server speaks openai-chat)" in msg
    assert all(n in msg for n in registry.names())


# --- a third-party protocol, through the entry-point group only ---------------------------

MODULE = "thirdparty_protocols"

SOURCE = '''
"""A pretend third-party protocol: plain text in and out, importing only the public parts."""

from typing import Literal

from pydantic import Field

from backends.base import Chunk, PromptSample, Usage
from backends.http.options import BaseHttpOptions
from backends.http.protocol import HttpProtocol
from harness.errors import RequestFailed


class ShoutOptions(BaseHttpOptions):
    protocol: Literal["tp-shout"] = Field("tp-shout", description="a server that shouts the prompt back")
    times: int = Field(1, ge=1, description="how many times the server shouts it")


class Shout(HttpProtocol):
    name = "tp-shout"
    Options = ShoutOptions
    takes = ("prompt",)
    gives = "text"
    content_type = "text/plain; charset=utf-8"

    def endpoint(self, base):
        return f"{base}/shout?times={self.options.times}"

    def encode(self, sample):
        return sample.text().encode()

    def decode(self, raw):
        text = raw.decode()
        if not text:
            raise RequestFailed("empty_output", "the server said nothing")
        return [Chunk(n_tokens=0, output=text), Chunk(n_tokens=0, usage=Usage(output_tokens=len(text.split())))]


class NotAProtocol:
    name = "tp-broken"
'''


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The pretend package's folder (a module and its dist-info), on the path of this
    process and of the child: nothing is installed."""
    site = tmp_path / "site"
    dist = site / "thirdparty_protocols-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{MODULE}.py").write_text(SOURCE)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-protocols\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[harness.http_protocols]\ntp-shout = {MODULE}:Shout\ntp-broken = {MODULE}:NotAProtocol\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    yield site
    sys.modules.pop(MODULE, None)


def _shout_app(received: list[str]) -> web.Application:
    async def shout(request: web.Request) -> web.Response:
        assert request.content_type == "text/plain"
        text = await request.text()
        received.append(text)
        return web.Response(text=" ".join([text.upper()] * int(request.query["times"])), content_type="text/plain")

    app = web.Application()
    app.router.add_post("/shout", shout)
    return app


def test_a_third_party_protocol_is_found_through_its_entry_point_and_round_trips(third_party, tmp_path):
    assert "tp-shout" in registry.names() and "tp-shout" in HttpOptions.variants()
    received: list[str] = []

    def check(chunks: list[Chunk]) -> None:
        assert [c.output for c in chunks if c.output is not None] == ["HELLO THERE HELLO THERE"]
        assert [c.usage.output_tokens for c in chunks if c.usage is not None] == [4]

    round_trip("tp-shout", Case(_shout_app(received), lambda url: {"url": url, "times": 2}, PromptSample("hello there"), check))
    assert received == ["hello there"]
    # a broken entry point is named, with what is wrong, only where it is asked for
    with pytest.raises(ConfigError, match="tp-broken.*not a subclass of backends.http.protocol.HttpProtocol"):
        validate_backend_options(RunConfig(backend="http", backend_options={"protocol": "tp-broken", "url": "http://x"}),
                                 HttpOptions)
    with pytest.raises(ConfigError, match="times is not an option of protocol openai-chat \\(it is tp-shout's\\)"):
        validate_backend_options(RunConfig(backend="http", backend_options={"protocol": "openai-chat", "url": "http://x/v1",
                                                                            "times": 2}), HttpOptions)


def test_a_third_party_protocol_runs_under_loadgen(third_party, tmp_path):
    """The SUT and the summary ask the protocol, never its name: a protocol they never
    heard of runs, its answers and usage recorded."""
    received: list[str] = []
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"request {i}"}) + "\n" for i in range(4)))
    with ServerThread(_shout_app(received)) as srv:
        outcome = runner.run(RunConfig(backend="http", scenario="Offline", dataset=str(prompts), min_duration_s=0,
                                       min_query_count=8, backend_options={"protocol": "tp-shout", "url": srv.url}),
                             tmp_path / "results")
    s = outcome.summary
    assert s["status"] == "complete" and s["harness"]["failed"] == 0 and s["harness"]["samples"] >= 8
    assert s["backend"]["protocol"] == "tp-shout" and s["backend"]["stream"] is False
    assert {r for r in received if not r.startswith("Warm-up")} == {f"request {i}" for i in range(4)}

