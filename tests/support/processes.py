"""Waiting on processes in tests: a bounded wait for a condition, a process's children, and
whether one has exited."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path


def wait_for(probe, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout} s")


def children(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:  # /proc: field 4 of /proc/PID/stat is the parent's pid
        found = []
        for entry in os.listdir("/proc"):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if entry.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
        return found
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie (reparented, waiting for a reaper that may never come)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def kill_when_placed(root: Path, members: str, index: int, after_s: float, killed: list[int]) -> threading.Thread:
    """A thread that waits for a run under `root` to write cluster.json, then SIGKILLs its
    `members` ("replicas" or "shards") entry `index` `after_s` later (inside the timed
    test), and appends the pid to `killed`."""
    def kill() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for cluster in root.glob("*/cluster.json"):
                try:
                    pid = json.loads(cluster.read_text())[members][index]["pid"]
                except (ValueError, KeyError, IndexError):
                    continue
                time.sleep(after_s)
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread
