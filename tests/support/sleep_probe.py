"""How late this machine wakes a sleeping thread, measured beside a test while it runs.

A sleep's overshoot belongs to the machine (a core shared with other work, timer slack), so
a test that bounds a sleep-made time (the synthetic backend's service time) allows what
this probe saw over the same seconds, rather than a figure that held on one machine.
The probe only sleeps: it takes no core from the run it measures.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from harness.results.stats import distribution


class SleepProbe:
    """A daemon thread sleeping `period_s` at a time and logging how late each wake-up was;
    use as a context manager around the run, then read `lateness_ms()`."""

    def __init__(self, period_s: float = 0.002) -> None:
        self.period_ns = int(period_s * 1e9)
        self.late_ns: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sleep-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter_ns()
            time.sleep(self.period_ns / 1e9)
            self.late_ns.append(time.perf_counter_ns() - start - self.period_ns)

    def __enter__(self) -> SleepProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def lateness_ms(self) -> dict[str, float | None]:
        """Percentiles, mean, min and max of the wake-ups' lateness, ms."""
        return distribution(np.array(self.late_ns, dtype=np.int64), unit=1e6)
