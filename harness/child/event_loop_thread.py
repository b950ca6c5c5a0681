"""The event loop the streaming SUT's requests run on, in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from harness.child.schedule import precise_loop


class EventLoopThread:
    """An asyncio loop running forever in a daemon thread, until `close`. `precise`: timers
    fire on time, not up to 1 ms late (harness.child.schedule.PreciseEpollSelector)."""

    def __init__(self, precise: bool = False) -> None:
        self.loop = precise_loop() if precise else asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="event-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
