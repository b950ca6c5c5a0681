"""Hostile and careless servers against the HTTP backend (issue #20): raw asyncio servers
on 127.0.0.1 that write exact bytes.

- informational answers (103, 100) before the real one, redirects, compressed bodies;
- a server that echoes the API key (and other credentials) in every place it can: error
  pages, 200-stream errors, malformed events, the generated text itself;
- credentials in the options (URL userinfo, query parameters, headers) refused without
  echoing them;
- a pool wait bounded by the total timeout: a request past its deadline is never sent,
  and the pool serves requests first come, first served.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from backends.base import Chunk, LoadContext
from backends.http import HttpBackend, HttpOptions, PreparedRequest
from backends.http.client import HttpClient
from harness.config.run_config import RunConfig
from harness.errors import ConfigError, RequestFailed
from harness.results.records import read_records
from harness.run import runner
from tests.support.raw_server import Handler, RawServer

# --- raw servers ---------------------------------------------------------------------------


class RawServerThread:
    """A raw asyncio server on a loop of its own, for runs in a child process."""

    def __init__(self, handle: Handler) -> None:
        self.handle = handle
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()

        async def start() -> Any:
            return await asyncio.start_server(self.handle, "127.0.0.1", 0)

        self.server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def __exit__(self, *exc: Any) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(the head, the body) of one request."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head, await reader.readexactly(length)


def reply(status: str, body: bytes, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def delta(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def backend(url: str, **options: Any) -> HttpBackend:
    b = HttpBackend(HttpOptions(protocol="openai-chat", url=url + "/v1", check_server=False, **options))
    b.load(LoadContext(model=None, max_batch=1, scenario="Offline"))
    return b


async def outcome(b: HttpBackend) -> list[Chunk] | RequestFailed:
    try:
        return [c async for c in b.stream(PreparedRequest(b'{"stream": true}', 0))]
    except RequestFailed as e:
        return e


# --- item 2: informational answers, redirects, encodings -----------------------------------


@pytest.mark.parallel
def test_informational_answers_are_skipped_and_each_request_gets_its_own_answer():
    # 103 Early Hints and 100 Continue before every real answer, on one reused connection:
    # taken as the answer, they shift every later request onto the previous one's answer.
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(1, 4):
            await read_request(reader)
            writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            writer.write(reply("200 OK", b"answer %d" % i))
            await writer.drain()

    async def main() -> list[tuple[int, bytes, str | None]]:
        async with RawServer(handle) as url:
            client = HttpClient(url, limit=1)
            got = []
            try:
                for _ in range(3):
                    r = await client.request("POST", "/", b"x")
                    try:
                        got.append((r.status, await r.read(), r.headers.get("link")))
                    finally:
                        r.release()
            finally:
                await client.close()
            return got

    assert asyncio.run(main()) == [(200, b"answer 1", None), (200, b"answer 2", None), (200, b"answer 3", None)]


async def one_request(handle: Any) -> list[Chunk] | RequestFailed:
    """One request of a fresh backend against a raw server running `handle`."""
    async with RawServer(handle) as url:
        b = backend(url)
        try:
            return await outcome(b)
        finally:
            await b.aclose()


@pytest.mark.parallel
def test_a_redirect_is_a_failure_that_names_its_location():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply("302 Found", b"moved", "Location: https://elsewhere.example/v1/chat/completions"))
        await writer.drain()

    failure = asyncio.run(one_request(handle))
    assert isinstance(failure, RequestFailed) and failure.reason == "http_3xx"
    assert "302" in failure.detail and "https://elsewhere.example/v1/chat/completions" in failure.detail


@pytest.mark.parallel
def test_a_compressed_body_is_a_failure_named_for_its_encoding():
    import gzip

    heads: list[bytes] = []
    body = gzip.compress(sse(delta("hi", "stop"), b"[DONE]"))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        heads.append(head)
        writer.write(reply("200 OK", body, "Content-Type: text/event-stream", "Content-Encoding: gzip"))
        await writer.drain()

    failure = asyncio.run(one_request(handle))
    assert isinstance(failure, RequestFailed) and failure.reason == "unsupported_encoding"
    assert "gzip" in failure.detail
    assert b"accept-encoding" not in heads[0].lower()  # the client asks for no compression


# --- item 4: every stored text is redacted, before any cut ---------------------------------

KEY = "sk-hostile-Zq7/Xw+Vb9=Kp3Lm5Nn8Rr2Tt4Yy6Uu1Ii0Oo9Pp"  # 51 characters, URL- and base64-unsafe
TOKEN = "tok-Hq2Jw8Lx5Mz3Nc7Vb1"  # a second credential, sent through headers_env
PAD = "x" * 150  # the key starts past character 160 of the excerpt, and ends past its 200


def _forms(secret: str) -> list[bytes]:
    return [secret.encode(), secret[:8].encode(), quote(secret, safe="").encode(), base64.b64encode(secret.encode())]


def _echoing_server(seen: list[bytes]) -> Handler:
    """Echoes the key wherever a careless server might, chosen by the prompt's keyword."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, body = await read_request(reader)
                seen.append(head)
                req = json.loads(body)
                text = req["messages"][-1]["content"]
                if "/v1/models" in head.split(b"\r\n")[0].decode():
                    writer.write(reply("200 OK", json.dumps({"data": [{"id": "m"}]}).encode()))
                elif "@http_401" in text:
                    page = f"<html><body>{PAD} invalid key {KEY} for token {TOKEN}</body></html>"
                    writer.write(reply("401 Unauthorized", page.encode(), "Content-Type: text/html"))
                elif not req.get("stream"):
                    if "@malformed_json" in text:
                        writer.write(reply("200 OK", f"<html>{PAD} {KEY} {quote(KEY, safe='')}</html>".encode()))
                    else:
                        answer = {"choices": [{"message": {"content": f"the key is {KEY} and {TOKEN}"}, "finish_reason": "stop"}]}
                        writer.write(reply("200 OK", json.dumps(answer).encode()))
                else:
                    if "@server_error" in text:
                        events = sse(delta("a"), {"error": {"message": f"{PAD} rejected {KEY}", "token": TOKEN}})
                    elif "@malformed_sse" in text:
                        events = sse(delta("a"), f"{{not json {PAD} {KEY}".encode())
                    else:  # the key in the generated text, split across events, and encoded
                        b64 = base64.b64encode(KEY.encode()).decode()
                        events = sse(
                            delta("key: " + KEY[:20]), delta(KEY[20:] + " url "), delta(quote(KEY, safe="") + " b64 " + b64),
                            delta(" tok " + TOKEN, "stop"), b"[DONE]",
                        )  # fmt: skip
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                    writer.write(chunked(*[e + b"\n\n" for e in events.split(b"\n\n") if e]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    return handle


def _grep(folder: Path, *texts: str) -> list[str]:
    leaks = []
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            for secret in texts:
                leaks += [f"{f.name}: {form!r}" for form in _forms(secret) if form in data]
    return leaks


@pytest.mark.parallel
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_no_credential_reaches_the_results_folder_or_the_terminal(tmp_path, monkeypatch, capfd, stream):
    monkeypatch.setenv("HOSTILE_API_KEY", KEY)
    monkeypatch.setenv("HOSTILE_TOKEN", TOKEN)
    behaviours = ["@ok", "@http_401", "@server_error", "@malformed_sse"] if stream else ["@ok", "@http_401", "@malformed_json"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"request {i} {b}"}) + "\n" for i, b in enumerate(behaviours)))
    seen: list[bytes] = []
    with RawServerThread(_echoing_server(seen)) as url:
        outcome_ = runner.run(
            RunConfig(
                backend="http", scenario="Offline", dataset=str(prompts), min_duration_s=0.1,
                min_query_count=len(behaviours), offline_expected_qps=1,
                use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000,
                backend_options={
                    "protocol": "openai-chat", "url": url + "/v1", "stream": stream, "check_server": False,
                    "warmup_requests": 0, "api_key_env": "HOSTILE_API_KEY", "headers_env": {"X-Auth-Token": "HOSTILE_TOKEN"},
                },
            ),
            tmp_path / "results",
        )  # fmt: skip
    run_dir, s = outcome_.run_dir, outcome_.summary
    # the credentials were sent
    assert all(f"Authorization: Bearer {KEY}".encode() in h and f"X-Auth-Token: {TOKEN}".encode() in h for h in seen)
    want = {"@http_401": "http_401", "@server_error": "server_error", "@malformed_sse": "malformed_sse", "@malformed_json": "malformed_json"}
    assert s["harness"]["failures_by_reason"] == {r: s["harness"]["samples"] // len(behaviours) for b, r in want.items() if b in behaviours}
    errors = [e for e in read_records(run_dir).columns["error"] if e]
    assert errors and all("***" in e for e in errors)  # redacted, then cut: the mark survives
    texts = [json.loads(line)["text"] for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    assert any("***" in t for t in texts)
    out, err = capfd.readouterr()
    assert _grep(run_dir, KEY, TOKEN) == []
    assert [secret for secret in (KEY, TOKEN, KEY[:8]) if secret in out + err] == []


# --- item 5: credentials in the options are refused, never echoed ---------------------------


SECRET = "s3cr3t-Vx9Qw2Er7Ty4"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"url": f"http://bench:{SECRET}@127.0.0.1:1/v1"}, "url"),
        ({"headers": {"Authorization": f"Bearer {SECRET}"}}, "Authorization"),
        ({"headers": {"Cookie": f"session={SECRET}"}}, "Cookie"),
        ({"headers": {"X-Auth-Token": SECRET}}, "X-Auth-Token"),
        ({"headers": {"x-goog-api-key": SECRET}}, "x-goog-api-key"),
        ({"headers": {"Ocp-Apim-Subscription-Key": SECRET}}, "Ocp-Apim-Subscription-Key"),
        ({"url": f"http://127.0.0.1:1/v1?key={SECRET}"}, "key"),
        ({"url": f"http://127.0.0.1:1/v1?x=1&api_key={SECRET}"}, "api_key"),
        ({"url": f"http://127.0.0.1:1/v1?access_token={SECRET}"}, "access_token"),
        ({"url": f"http://127.0.0.1:1/v1?token={SECRET}"}, "token"),
        ({"url": f"http://127.0.0.1:1/deploy?sv=2022&sig={SECRET}"}, "sig"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else v,
)
@pytest.mark.parallel
def test_credentials_in_the_options_are_refused_without_echoing_them(tmp_path, options, named):
    opts = {"protocol": "openai-chat", "url": "http://127.0.0.1:1/v1", "check_server": False, **options}
    with pytest.raises(ConfigError) as info:
        runner.run(RunConfig(backend="http", backend_options=opts), tmp_path / "results")
    message = str(info.value)
    assert named in message and ("headers_env" in message or "api_key_env" in message)
    assert SECRET not in message and SECRET[:8] not in message
    assert _grep(tmp_path, SECRET) == []


@pytest.mark.parallel
def test_the_command_line_never_prints_a_refused_credential(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for value in (f"url=http://bench:{SECRET}@127.0.0.1:1/v1", f'headers={{"Cookie": "sid={SECRET}"}}'):
        proc = subprocess.run(
            [sys.executable, "-m", "harness", "run", "--backend", "http", "--output-dir", str(tmp_path / "results"),
             "--set", "protocol=openai-chat", "--set", "url=http://127.0.0.1:1/v1", "--set", value],
            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert SECRET not in proc.stdout + proc.stderr and SECRET[:8] not in proc.stdout + proc.stderr
    assert _grep(tmp_path, SECRET) == []


@pytest.mark.parallel
def test_headers_env_takes_a_credential_header_from_the_environment(monkeypatch):
    monkeypatch.setenv("HOSTILE_COOKIE", f"sid={SECRET}")
    opts = HttpOptions(protocol="openai-chat", url="http://127.0.0.1:1/v1", check_server=False, headers_env={"Cookie": "HOSTILE_COOKIE"})
    b = HttpBackend(opts)
    b.load(LoadContext(model=None, max_batch=1, scenario="Offline"))
    assert b._headers()["Cookie"] == f"sid={SECRET}"
    assert SECRET not in json.dumps(b.describe()) and "Cookie" in b.describe()["header_names"]
    monkeypatch.setenv("HOSTILE_SIG", SECRET)
    q = HttpBackend(HttpOptions(protocol="openai-chat", url="http://127.0.0.1:1/v1?sv=1", check_server=False, query_env={"sig": "HOSTILE_SIG"}))
    q.load(LoadContext(model=None, max_batch=1, scenario="Offline"))
    assert q._path == f"/v1/chat/completions?sv=1&sig={SECRET}" and SECRET not in json.dumps(q.describe())
    assert q.redact_text is not None and q.redact_text(f"echo {SECRET}") == "echo ***"
    monkeypatch.delenv("HOSTILE_COOKIE")
    with pytest.raises(ConfigError, match="HOSTILE_COOKIE"):
        HttpBackend(opts).load(LoadContext(model=None, max_batch=1, scenario="Offline"))


# --- item 11: the total timeout bounds the pool wait; first come, first served -------------


def test_a_request_past_its_deadline_is_never_sent():
    # One pooled connection, a 300 ms server and a 1 s total timeout: about three requests
    # fit; the others must time out in the pool wait, at their deadline, unsent.
    arrivals: list[float] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_request(reader)
                arrivals.append(time.monotonic())
                await asyncio.sleep(0.3)
                writer.write(reply("200 OK", b"ok"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def one(client: HttpClient) -> tuple[str, float]:
        t = time.monotonic()
        try:
            r = await client.request("POST", "/", b"x")
            try:
                await r.read()
            finally:
                r.release()
            return "ok", time.monotonic() - t
        except asyncio.TimeoutError as e:
            return str(e), time.monotonic() - t

    async def main() -> tuple[float, list[tuple[str, float]]]:
        async with RawServer(handle) as url:
            client = HttpClient(url, limit=1, total_timeout=1.0)
            try:
                t0 = time.monotonic()
                got = await asyncio.gather(*(one(client) for _ in range(12)))
                await asyncio.sleep(0.4)  # anything sent late would arrive meanwhile
                return t0, got
            finally:
                await client.close()

    t0, got = asyncio.run(main())
    timed_out = [(text, took) for text, took in got if text != "ok"]
    assert 2 <= sum(text == "ok" for text, _ in got) <= 4  # a loaded machine may fit one fewer
    assert all(text.startswith("total timeout") and took < 1.5 for text, took in timed_out), timed_out
    assert len(arrivals) <= 4  # the server never saw the requests that timed out waiting (today: all 12)
    assert all(t - t0 < 1.1 for t in arrivals)  # nothing was sent after its deadline


@pytest.mark.parallel
def test_the_pool_serves_requests_first_come_first_served():
    # One connection; A sends four requests one after another, B and C queue behind A's
    # first. A must not jump the queue each time it gets the connection back.
    order: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                _, body = await read_request(reader)
                order.append(body)
                await asyncio.sleep(0.05)
                writer.write(reply("200 OK", body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def send(client: HttpClient, body: bytes) -> None:
        r = await client.request("POST", "/", body)
        try:
            assert await r.read() == body
        finally:
            r.release()

    async def main() -> None:
        async with RawServer(handle) as url:
            client = HttpClient(url, limit=1)
            try:

                async def a() -> None:
                    for i in range(4):
                        await send(client, b"a%d" % i)

                async def later(body: bytes) -> None:
                    await asyncio.sleep(0.01)
                    await send(client, body)

                await asyncio.gather(a(), later(b"b"), later(b"c"))
            finally:
                await client.close()

    asyncio.run(main())
    assert order == [b"a0", b"b", b"c", b"a1", b"a2", b"a3"]


# --- wrongly typed fields, reasoning and tool calls: every failure is a documented kind ------


def documented_reasons() -> set[str]:
    """The failure kinds backends/http/__init__.py's docstring lists (its table's first column)."""
    import re

    import backends.http as http_module

    table = http_module.__doc__.split("summary groups failures by reason:", 1)[1].split("\n\n", 2)[1]
    return {m.group(1) for m in re.finditer(r"^    (\w+)", table, re.M)}


@pytest.mark.parallel
def test_every_failure_reason_the_backend_raises_is_documented():
    import re

    raised: set[str] = set()
    for module in sorted((Path(__file__).parents[2] / "backends" / "http").rglob("*.py")):
        raised |= set(re.findall(r'RequestFailed\(\s*f?"(\w+)', module.read_text()))
    # f"http_{status}" reads as "http_", as the table's "http_<status>" does
    assert "malformed_sse" in raised and "http_" in raised
    assert raised - documented_reasons() == set()


def _stream_of(*events: object) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(chunked(*[sse(e) for e in events]))
        await writer.drain()

    return handle


def _tools(*calls: object) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": list(calls)}, "finish_reason": None}]}


HOSTILE_EVENTS = {
    "choices a string": {"choices": "abc"},
    "choices[0] a string": {"choices": ["abc"]},
    "choices[0] a number": {"choices": [7]},
    "delta a string": {"choices": [{"index": 0, "delta": "abc"}]},
    "delta a list": {"choices": [{"index": 0, "delta": ["abc"]}]},
    "event a list": [1, 2],
    "content an object": {"choices": [{"index": 0, "delta": {"content": {"a": 1}}}]},
    "reasoning_content a number": {"choices": [{"index": 0, "delta": {"reasoning_content": 5}}]},
    "reasoning a list": {"choices": [{"index": 0, "delta": {"reasoning": ["x"]}}]},
    "tool_calls an object": {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
    "tool_calls a string": {"choices": [{"index": 0, "delta": {"tool_calls": "f()"}}]},
    "a tool call a string": _tools("f()"),
    "index a string": _tools({"index": "0", "function": {"name": "f"}}),
    "function a string": _tools({"index": 0, "function": "f"}),
    "name a number": _tools({"index": 0, "function": {"name": 3}}),
    "arguments an object": _tools({"index": 0, "function": {"name": "f", "arguments": {"city": "Paris"}}}),
    "id a number": _tools({"index": 0, "id": 9, "function": {"name": "f"}}),
    "usage a list": {"choices": [], "usage": [1, 2]},
}


@pytest.mark.parallel
@pytest.mark.parametrize("event", list(HOSTILE_EVENTS.values()), ids=list(HOSTILE_EVENTS))
def test_a_wrongly_typed_field_fails_its_request_as_malformed_sse(event):
    # after a good first token: the failure comes mid-stream, as a careless server sends it
    failure = asyncio.run(one_request(_stream_of(delta("a"), event, delta("b", "stop"), b"[DONE]")))
    assert isinstance(failure, RequestFailed), failure
    assert failure.reason == "malformed_sse" and failure.reason in documented_reasons()
    assert failure.detail  # says what was wrong: the field and the event


@pytest.mark.parallel
def test_tool_call_arguments_that_are_not_json_fail_as_malformed_tool_call():
    events = (_tools({"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": '{"city": '}}),
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}, b"[DONE]")
    failure = asyncio.run(one_request(_stream_of(*events)))
    assert isinstance(failure, RequestFailed) and failure.reason == "malformed_tool_call"
    assert failure.reason in documented_reasons()
    assert "get_weather" in failure.detail and "not JSON" in failure.detail and "\n" not in failure.detail


@pytest.mark.parallel
def test_hostile_events_in_a_run_are_recorded_as_documented_kinds(tmp_path):
    # the run's records hold reasons, never a Python exception's name (AttributeError was seen)
    kinds = ["choices a string", "delta a string", "reasoning_content a number", "tool_calls an object", "arguments an object"]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                _, body = await read_request(reader)
                i = int(json.loads(body)["messages"][-1]["content"].split()[1])
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                writer.write(chunked(*[sse(e) for e in (delta("a"), HOSTILE_EVENTS[kinds[i]], delta("b", "stop"), b"[DONE]")]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"request {i}"}) + "\n" for i in range(len(kinds))))
    with RawServerThread(handle) as url:
        s = runner.run(
            RunConfig(backend="http", scenario="Offline", dataset=str(prompts), min_duration_s=0.1,
                      min_query_count=len(kinds), offline_expected_qps=1,
                      use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000,
                      backend_options={"protocol": "openai-chat", "url": url + "/v1", "check_server": False,
                                       "warmup_requests": 0}),
            tmp_path / "results",
        ).summary  # fmt: skip
    assert s["harness"]["failures_by_reason"] == {"malformed_sse": s["harness"]["samples"]}


def _whole_answer(message: dict[str, Any]) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        body = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
        writer.write(reply("200 OK", body, "Content-Type: application/json"))
        await writer.drain()

    return handle


async def _one_whole(message: dict[str, Any]) -> list[Chunk] | RequestFailed:
    async with RawServer(_whole_answer(message)) as url:
        b = backend(url, stream=False)
        try:
            return [c async for c in b.stream(PreparedRequest(b'{"stream": false}', 0))]
        except RequestFailed as e:
            return e
        finally:
            await b.aclose()


@pytest.mark.parallel
def test_a_whole_answer_keeps_its_reasoning_and_tool_calls_apart():
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    chunks = asyncio.run(_one_whole({"role": "assistant", "reasoning_content": "think", "content": "", "tool_calls": [call]}))
    assert not isinstance(chunks, RequestFailed), chunks
    assert [(c.text, c.reasoning) for c in chunks if c.text] == [("think", True)]
    (calls,) = [c.tool_calls for c in chunks if c.tool_calls]
    assert calls == [{"index": 0, "id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}', "tokens": 1, "json": True}]
    answer = asyncio.run(_one_whole({"role": "assistant", "reasoning": "hm", "content": "42"}))
    assert [(c.text, c.reasoning) for c in answer if c.text] == [("hm", True), ("42", False)]


@pytest.mark.parametrize(("message", "reason"), [
    ({"content": "x", "reasoning_content": 5}, "malformed_json"),
    ({"content": "x", "tool_calls": "f()"}, "malformed_json"),
    ({"content": "x", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}, "malformed_json"),
    ({"content": "", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": '}}]}, "malformed_tool_call"),
    ({"content": ""}, "empty_output"),
], ids=["reasoning a number", "tool_calls a string", "arguments an object", "arguments not JSON", "nothing"])
@pytest.mark.parallel
def test_a_whole_answer_with_a_wrong_field_fails_as_a_documented_kind(message, reason):
    failure = asyncio.run(_one_whole(message))
    assert isinstance(failure, RequestFailed) and failure.reason == reason and reason in documented_reasons()
