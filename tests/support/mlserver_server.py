"""A real MLServer (KServe v2; `mlserver` + `mlserver-sklearn` 1.7.1 in their own venv)
serving tests/support/mlserver_digits.py's classifier on 127.0.0.1, metrics on their own port.

`make test` builds the venv (.mlserver-venv) and names its Python in HARNESS_MLSERVER_PYTHON.
`parallel_workers` 0 serves in the server's own process: MLServer's worker pool needs
`uvloop<0.22` (pinned by the Makefile) and costs a process a core here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

READY_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mlserver(python: str, work: Path) -> Iterator[tuple[str, str]]:
    """(the KServe v2 base URL, the metrics URL) once the model is ready; stopped after."""
    models = work / "models"
    subprocess.run([python, "-m", "tests.support.mlserver_digits", str(models)], check=True,
                   cwd=Path(__file__).resolve().parents[2])
    http, grpc, metrics = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "MLSERVER_HOST": "127.0.0.1", "MLSERVER_HTTP_PORT": str(http),
           "MLSERVER_GRPC_PORT": str(grpc), "MLSERVER_METRICS_PORT": str(metrics), "MLSERVER_PARALLEL_WORKERS": "0"}
    mlserver_exe = str(Path(python).with_name("mlserver"))
    log = work / "mlserver.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([mlserver_exe, "start", str(models)], stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"MLServer exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{base}/v2/models/digits/ready", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"MLServer not ready after {READY_TIMEOUT_S} s:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield base, f"http://127.0.0.1:{metrics}/metrics"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
