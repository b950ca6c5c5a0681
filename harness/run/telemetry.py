"""Telemetry sampled beside the test, in the parent process: never on the request path.

Three sources (docs/telemetry.md), each on its own daemon thread, every `interval_s` from
the child's start until it has exited (so the samples bracket the timed test):

    server  a Prometheus text endpoint (/metrics), parsed with prometheus_client's parser
    host    the test process (CPU time, per thread; RSS) and the machine (per-core CPU
            time, available memory), with psutil
    gpu     NVIDIA GPUs through NVML (nvidia-ml-py): utilisation, memory, power, energy

Each sample is one JSON line of `telemetry.jsonl`, stamped with `time.perf_counter_ns()`,
the records' clock (CLOCK_MONOTONIC, shared by the processes of one machine), and wall
time. A scrape that fails during the run is a line with `ok: false`: a gap, never a crash.
Counters are stored as read (cumulative); harness.results.telemetry takes the window's deltas.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from harness.config.run_config import Telemetry
from harness.errors import ConfigError
from harness.results import folder

SCRAPE_TIMEOUT_S = 5.0


def parse_metrics(text: str) -> list[list[Any]]:
    """Prometheus text as stored: [[family, type, [[sample name, labels, value], ...]], ...]."""
    from prometheus_client.parser import text_string_to_metric_families

    # `_created` series (a counter's creation time, prometheus_client's) carry no figure: dropped.
    return [[f.name, f.type, [[s.name, s.labels, s.value] for s in f.samples if not s.name.endswith("_created")]]
            for f in text_string_to_metric_families(text) if not f.name.endswith("_created")]


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> list[list[Any]]:
    """One scrape of a /metrics endpoint, parsed."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - the user's own endpoint
        return parse_metrics(resp.read().decode("utf-8", "replace"))


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(getattr(exc.reason, "strerror", None) or exc.reason)
    return f"{type(exc).__name__}: {exc}"


def check_endpoints(telemetry: Telemetry) -> list[str]:
    """Scrape each endpoint once before the test: one that does not answer, or answers with
    no metrics, is a ConfigError (or, with `optional`, a warning returned for the caller)."""
    warnings: list[str] = []
    for url in telemetry.server:
        try:
            families = scrape(url)
            problem = None if families else "it answered with no Prometheus metrics"
        except Exception as e:  # noqa: BLE001 - any failure is the same answer: not usable
            problem = f"no answer ({_why(e)})"
        if problem is None:
            continue
        line = f"telemetry server {url}: {problem}"
        if not telemetry.optional:
            raise ConfigError(f"{line}; start the server, fix the URL, or pass --telemetry-optional to run without it")
        warnings.append(line)
    return warnings


class _Gpu:
    """NVML handles, or the reason there are none (no driver, no GPU): never an error."""

    def __init__(self) -> None:
        self.error: str | None = None
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            if not self.handles:
                self.error = "NVML sees no GPU"
        except ImportError:
            self.error = "nvidia-ml-py is not installed"
        except Exception as e:  # noqa: BLE001 - pynvml.NVMLError and its many subclasses
            self.error = f"no NVIDIA GPU here (NVML: {e})"

    def sample(self) -> dict[str, Any]:
        import pynvml

        def read(fn: Callable[[], Any]) -> Any:
            try:
                return fn()
            except pynvml.NVMLError:  # e.g. energy on a GPU older than Volta: that figure only
                return None

        devices = []
        for i, h in enumerate(self.handles):
            mem = read(lambda h=h: pynvml.nvmlDeviceGetMemoryInfo(h))
            devices.append({
                "index": i,
                "name": read(lambda h=h: pynvml.nvmlDeviceGetName(h)),
                "util_pct": read(lambda h=h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                "mem_used_bytes": mem.used if mem else None,
                "mem_total_bytes": mem.total if mem else None,
                "power_w": (lambda mw: mw / 1e3 if mw is not None else None)(read(lambda h=h: pynvml.nvmlDeviceGetPowerUsage(h))),
                "energy_j": (lambda mj: mj / 1e3 if mj is not None else None)(
                    read(lambda h=h: pynvml.nvmlDeviceGetTotalEnergyConsumption(h))),
            })
        return {"devices": devices}

    def close(self) -> None:
        if self.handles:
            import pynvml

            pynvml.nvmlShutdown()


def _host(pid: int) -> Callable[[], dict[str, Any]]:
    import psutil

    proc = psutil.Process(pid)
    shards: dict[int, Any] = {}  # the test's client shards (harness.child.shard), by pid

    def sample() -> dict[str, Any]:
        with proc.oneshot():
            cpu = proc.cpu_times()
            rss = proc.memory_info().rss
            threads = {str(t.id): round(t.user_time + t.system_time, 4) for t in proc.threads()}
        cpu_s = cpu.user + cpu.system
        # Client shards on this host are the test process's own children: their threads
        # (each shard's event loop) and CPU count as the client's. Thread ids are the
        # kernel's, unique across processes; child.json names them.
        for child in proc.children():
            if child.pid not in shards:
                try:
                    shards[child.pid] = child if "harness.child.shard" in child.cmdline() else None
                except psutil.Error:
                    continue
            shard = shards[child.pid]
            if shard is None:
                continue
            try:
                with shard.oneshot():
                    c = shard.cpu_times()
                    cpu_s += c.user + c.system
                    rss += shard.memory_info().rss
                    threads.update({str(t.id): round(t.user_time + t.system_time, 4) for t in shard.threads()})
            except psutil.Error:  # a shard that just ended
                continue
        cores = [[round(c.user + c.nice + c.system + getattr(c, "irq", 0) + getattr(c, "softirq", 0)
                        + getattr(c, "steal", 0), 3), round(sum(c), 3)] for c in psutil.cpu_times(percpu=True)]
        return {
            "process": {"cpu_s": round(cpu_s, 4), "rss_bytes": rss, "threads_cpu_s": threads},
            "machine": {"cores_busy_total_s": cores, "mem_available_bytes": psutil.virtual_memory().available},
        }

    return sample


class Sampler:
    """The telemetry threads of one run; `stop()` takes a last sample of each and joins them."""

    def __init__(self, run_dir: Path, telemetry: Telemetry, pid: int, notes: list[str] | None = None) -> None:
        self._path = run_dir / folder.TELEMETRY
        self._interval = telemetry.interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        for note in notes or []:
            self._write({"source": "note", "ok": False, "error": note})
        self._gpu: _Gpu | None = None
        #: why the run has no GPU figures (no driver, no GPU), for the caller to say; None: none asked or found
        self.gpu_error: str | None = None
        sources: list[tuple[dict[str, Any], Callable[[], dict[str, Any]]]] = []
        for url in telemetry.server:
            sources.append(({"source": "server", "url": url}, lambda url=url: {"families": scrape(url)}))
        if telemetry.host:
            sources.append(({"source": "host", "pid": pid}, _host(pid)))
        if telemetry.gpu:
            self._gpu = _Gpu()
            self.gpu_error = self._gpu.error
            if self._gpu.error:
                self._write({"source": "gpu", "ok": False, "error": self._gpu.error})
            else:
                sources.append(({"source": "gpu"}, self._gpu.sample))
        self._threads = [threading.Thread(target=self._loop, args=s, name=f"telemetry-{s[0]['source']}", daemon=True)
                         for s in sources]
        for t in self._threads:
            t.start()

    def _write(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(text)
            self._file.flush()  # a parent killed mid-run keeps what it sampled

    def _loop(self, head: dict[str, Any], sample: Callable[[], dict[str, Any]]) -> None:
        next_at = time.perf_counter()
        while True:
            last = self._stop.is_set()  # one more sample after stop: the test's end is bracketed
            t0 = time.perf_counter_ns()
            wall = time.time()
            try:
                body: dict[str, Any] = {"ok": True, **sample()}
            except Exception as e:  # noqa: BLE001 - a failed sample is a gap in the record
                body = {"ok": False, "error": _why(e)}
            t1 = time.perf_counter_ns()
            # Stamped at the middle of the read: a scrape takes milliseconds.
            self._write({**head, "t_ns": (t0 + t1) // 2, "wall": wall, "read_ms": round((t1 - t0) / 1e6, 3), **body})
            if last:
                return
            next_at += self._interval
            self._stop.wait(max(0.0, next_at - time.perf_counter()))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(SCRAPE_TIMEOUT_S + 5)
        if self._gpu is not None:
            self._gpu.close()
        with self._lock:
            self._file.close()
