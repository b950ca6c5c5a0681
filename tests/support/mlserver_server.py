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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from tests.support.server_process import free_port, server_process

READY_TIMEOUT_S = 120


class MLServer(NamedTuple):
    base: str  # KServe v2 over HTTP: http://127.0.0.1:PORT
    metrics: str  # its Prometheus /metrics URL
    grpc: str  # KServe v2 over gRPC, in the kserve-v2-grpc protocol's url form: http://127.0.0.1:PORT
    models: Path  # the folder it serves (digits/model.joblib)


@contextmanager
def mlserver(python: str, work: Path) -> Iterator[MLServer]:
    """The server's addresses once the model is ready on both ports; stopped after."""
    models = work / "models"
    subprocess.run([python, "-m", "tests.support.mlserver_digits", str(models)], check=True,
                   cwd=Path(__file__).resolve().parents[2])
    http, grpc, metrics = free_port(), free_port(), free_port()
    env = {**os.environ, "MLSERVER_HOST": "127.0.0.1", "MLSERVER_HTTP_PORT": str(http),
           "MLSERVER_GRPC_PORT": str(grpc), "MLSERVER_METRICS_PORT": str(metrics), "MLSERVER_PARALLEL_WORKERS": "0"}
    base = f"http://127.0.0.1:{http}"
    cmd = [str(Path(python).with_name("mlserver")), "start", str(models)]
    with server_process(cmd, f"{base}/v2/models/digits/ready", work / "mlserver.log", READY_TIMEOUT_S, env=env):
        # the gRPC port opens just after the HTTP one answers
        _wait_for_port(grpc, READY_TIMEOUT_S)
        yield MLServer(base, f"http://127.0.0.1:{metrics}/metrics", f"http://127.0.0.1:{grpc}", models)


def _wait_for_port(port: int, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > end:
                raise TimeoutError(f"MLServer's gRPC port {port} did not open in {timeout_s:g} s") from None
            time.sleep(0.05)
