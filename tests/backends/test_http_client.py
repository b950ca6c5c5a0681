"""The HTTP backend's own client (backends/http/client.py) against real servers on
127.0.0.1: pooling and keep-alive, bodies of every framing, failures, timeouts and TLS.
The backend-level failure kinds are in test_http_failures.py."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trustme
from aiohttp import web

from backends.http.client import ConnectError, Disconnected, HttpClient, PayloadError
from tests.support.http_servers import ServerThread
from tests.support.raw_server import RawServer


class Peers:
    """Counts the connections an aiohttp app saw, and how many were open at once."""

    def __init__(self) -> None:
        self.ports: set[int] = set()
        self.open_now = 0
        self.most_open = 0


def counting_app(peers: Peers, delay_s: float = 0.0, **app_kw: Any) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        peers.ports.add(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        peers.open_now += 1
        peers.most_open = max(peers.most_open, peers.open_now)
        try:
            await asyncio.sleep(delay_s)
            return web.Response(body=await request.read())
        finally:
            peers.open_now -= 1

    app = web.Application(**app_kw)
    app.router.add_post("/echo", handler)
    return app


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coro_fn())


async def echo(client: HttpClient, body: bytes) -> bytes:
    r = await client.request("POST", "/echo", body)
    try:
        assert r.status == 200
        return await r.read()
    finally:
        r.release()


def test_pool_holds_the_limit_and_reuses_connections():
    peers = Peers()
    with ServerThread(counting_app(peers, delay_s=0.05)) as server:

        async def main() -> list[bytes]:
            client = HttpClient(server.url, limit=4)
            try:
                first = await asyncio.gather(*(echo(client, b"req %d" % i) for i in range(16)))
                second = await asyncio.gather(*(echo(client, b"again %d" % i) for i in range(16)))
                return first + second
            finally:
                await client.close()

        answers = run(main)
    assert answers == [b"req %d" % i for i in range(16)] + [b"again %d" % i for i in range(16)]
    assert peers.most_open == 4  # 16 at once through a pool of 4
    assert len(peers.ports) == 4  # the second round reused the first round's connections


def test_a_stale_keep_alive_connection_is_replaced_without_losing_the_request():
    peers = Peers()
    # The server drops idle connections after 0.1 s; the client's next request finds its
    # pooled connection closed and must go out again on a fresh one.
    with ServerThread(counting_app(peers, handler_args={"keepalive_timeout": 0.1})) as server:

        async def main() -> tuple[bytes, bytes]:
            client = HttpClient(server.url, limit=1)
            try:
                a = await echo(client, b"one")
                await asyncio.sleep(0.4)
                return a, await echo(client, b"two")
            finally:
                await client.close()

        assert run(main) == (b"one", b"two")
    assert len(peers.ports) == 2


def test_a_request_the_server_drops_on_a_reused_connection_goes_out_once_more():
    # The server answers the first request of each connection and drops the second
    # unanswered (a keep-alive connection closed just as the request went out). The client
    # must send it once more on a fresh connection, and not a third time.
    connections = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\nanswer %d" % (8, len(connections)))
        await writer.drain()
        await read_request(reader)
        writer.close()

    async def main() -> tuple[list[bytes], int]:
        async with RawServer(handle) as url:
            client = HttpClient(url, limit=1)
            try:
                return [await echo(client, b"x") for _ in range(3)], client.resent
            finally:
                await client.close()

    assert run(main) == ([b"answer 1", b"answer 2", b"answer 3"], 2)
    assert len(connections) == 3


async def read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    await reader.readexactly(length)


def test_chunked_body_arrives_in_pieces_as_sent():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"alpha", b"beta", b"gamma"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def main() -> list[tuple[float, bytes]]:
        async with RawServer(handle) as url:
            client = HttpClient(url)
            r = await client.request("POST", "/", b"x")
            t0 = time.perf_counter()
            got = [(time.perf_counter() - t0, piece) async for piece in r.iter_any()]
            r.release()
            await client.close()
            return got

    got = run(main)
    assert b"".join(p for _, p in got) == b"alphabetagamma"
    assert len(got) == 3 and got[0][0] < 0.05 and got[2][0] >= 0.18  # each piece when it was sent


@pytest.mark.parametrize(
    ("response", "outcome"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end", b"to the end"),  # delimited by the close
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", PayloadError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", PayloadError),
        (b"", Disconnected),  # closed before a status line
        (b"NOT HTTP AT ALL\r\n\r\n", PayloadError),
    ],
    ids=["close-delimited", "short-content-length", "unfinished-chunks", "no-answer", "not-http"],
)
def test_bodies_that_end_with_the_connection(response, outcome):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response)
        await writer.drain()
        writer.close()

    async def main() -> bytes:
        async with RawServer(handle) as url:
            client = HttpClient(url)
            try:
                r = await client.request("POST", "/", b"x")
                try:
                    return await r.read()
                finally:
                    r.release()
            finally:
                await client.close()

    if isinstance(outcome, bytes):
        assert run(main) == outcome
    else:
        with pytest.raises(outcome):
            run(main)


def test_read_and_total_timeouts_say_which():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        for _ in range(50):  # a byte every 0.1 s: never silent for long, never finished
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)

    async def main(read_s: float, total_s: float) -> tuple[str, float]:
        async with RawServer(handle) as url:
            client = HttpClient(url, read_timeout=read_s, total_timeout=total_s)
            t0 = time.perf_counter()
            r = await client.request("POST", "/", b"x")
            try:
                await r.read()
            except asyncio.TimeoutError as e:
                return str(e), time.perf_counter() - t0
            finally:
                r.release()
                await client.close()
            return "no timeout", 0.0

    text, took = run(lambda: main(read_s=5.0, total_s=0.6))
    assert text.startswith("total timeout") and 0.6 <= took < 1.5
    text, took = run(lambda: main(read_s=0.05, total_s=30.0))
    assert text.startswith("read timeout: no bytes for 0.05 s") and took < 1.0


def test_connection_refused_is_a_connect_error():
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = HttpClient(f"http://127.0.0.1:{port}")
        try:
            await client.request("POST", "/", b"x")
        finally:
            await client.close()

    with pytest.raises(ConnectError, match="cannot connect to 127.0.0.1"):
        run(main)


class TlsServerThread(ServerThread):
    def __init__(self, app: web.Application, context: ssl.SSLContext) -> None:
        super().__init__(app)
        self.context = context

    async def _start(self) -> int:
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.context)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def test_tls_verifies_the_certificate_unless_told_not_to():
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    peers = Peers()
    with TlsServerThread(counting_app(peers), context) as server:
        url = f"https://127.0.0.1:{server.port}"

        async def main(verify: bool) -> bytes:
            client = HttpClient(url, verify_tls=verify)
            try:
                return await echo(client, b"secret")
            finally:
                await client.close()

        with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            run(lambda: main(verify=True))  # a private CA is not in the system's trust store
        assert run(lambda: main(verify=False)) == b"secret"
    assert peers.ports  # the unverified request did arrive, over TLS
