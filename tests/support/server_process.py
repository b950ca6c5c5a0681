"""A real server as a child process on 127.0.0.1: a free port, ready when a URL answers, and
a stop that cannot hang (terminate, then kill)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server_process(cmd: list[str], ready_url: str, log: Path, timeout_s: float, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> Iterator[subprocess.Popen]:
    """The process, once `ready_url` answers; its output goes to `log`, quoted in the error
    when it exits or is not ready within `timeout_s`."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode} before it was ready:\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(ready_url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[0]} not ready after {timeout_s:g} s:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.3)
        yield proc
        if proc.poll() is not None:
            # It died while the tests used it: they saw closed connections; this says why.
            raise RuntimeError(f"{cmd[0]} died during the tests with exit code {proc.returncode}"
                               f"{_signal_name(proc.returncode)}:\n{log.read_text()[-3000:]}")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _signal_name(returncode: int) -> str:
    """' (SIGILL)' for a process killed by a signal: an instruction the CPU lacks, a crash."""
    try:
        return f" ({signal.Signals(-returncode).name})" if returncode < 0 else ""
    except ValueError:
        return ""
