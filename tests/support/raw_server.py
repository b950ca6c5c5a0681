"""A raw asyncio HTTP server on 127.0.0.1 whose handler writes exactly the bytes a test needs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """`async with RawServer(handle) as url`: a server on the test's own loop, on a free port."""

    def __init__(self, handle: Handler) -> None:
        self.handle = handle

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()
