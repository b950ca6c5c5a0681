"""An OpenAI-compatible server that costs almost nothing per request, in its own process.

Every POST gets the same streamed completion of N one-token SSE events, written in one
piece: the server's work is a sendall of a prepared body, the client's is parsing and
timestamping N events. So the client (the harness's event loop) is what saturates first,
which is what the "client saturated" verdict must then say.

    python -m tests.support.burst_server PORT_FILE N_EVENTS
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


def response(n_events: int) -> bytes:
    events = b"".join(
        b"data: " + json.dumps({"choices": [{"index": 0, "text": f"t{i} ", "finish_reason": None}]}).encode() + b"\n\n"
        for i in range(n_events)
    )
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n_events}}).encode()
    body = events + b"data: " + usage + b"\n\ndata: [DONE]\n\n"
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    return head + body


class Burst(asyncio.Protocol):
    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            length = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            self.transport.write(self.answer)  # type: ignore[attr-defined]


async def main(port_file: Path, n_events: int) -> None:
    loop = asyncio.get_running_loop()
    answer = response(n_events)
    server = await loop.create_server(lambda: Burst(answer), "127.0.0.1", 0)
    port_file.write_text(str(server.sockets[0].getsockname()[1]))
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
