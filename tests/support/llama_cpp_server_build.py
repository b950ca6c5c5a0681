"""llama.cpp's own C++ server (`llama-server`), built once from the source llama-cpp-python
vendors, and cached: parallel slots, continuous batching and a per-slot prompt cache, which
llama-cpp-python's Python server (one request at a time) does not have.

    python -m tests.support.llama_cpp_server_build     # builds if needed, prints the binary

No registry package ships the binary for Linux that we would call well kept, and llama.cpp's
own releases are out of reach here; llama-cpp-python's sdist (the version the Makefile pins)
carries the whole llama.cpp tree, so the server is the same code the suite's bindings run.

Built for this CPU (GGML_NATIVE: AVX-512 where the CPU has it) into .cache/, in a folder
named by the pinned version and a hash of the CPU's instruction-set flags: a cache moved to
a CPU with other flags is rebuilt, never run into an illegal instruction. (llama.cpp can
instead build every x86 variant and pick one at load, GGML_CPU_ALL_VARIANTS: thirteen
compiles of its CPU backend, too slow for 2 cores.) The compile takes ~10 min on 2 cores;
it is written to a .tmp folder and renamed, so a half-built binary is never taken.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the llama-cpp-python release whose vendored llama.cpp is built (the Makefile's LLAMA_CPP_PIN)
VERSION = re.search(r"^LLAMA_CPP_PIN := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)  # type: ignore[union-attr]
CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF",
                 "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF"]


def cpu_key() -> str:
    """A short hash of the CPU's instruction-set flags (what -march=native compiles for)."""
    flags = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = " ".join(sorted(line.split(":", 1)[1].split()))
            break
    return hashlib.sha256(flags.encode()).hexdigest()[:12]


def llama_server(cache: Path = ROOT / ".cache", log=sys.stderr) -> Path:
    """The path of a `llama-server` built for this CPU, building it first if the cache has none."""
    home = cache / f"llama-server-{VERSION}-{cpu_key()}"
    binary = home / "llama-server"
    if binary.exists():
        return binary
    work = home.with_name(home.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    def run(*cmd: str) -> None:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)

    run(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(work),
        f"llama-cpp-python=={VERSION}")
    with tarfile.open(next(work.glob("llama_cpp_python-*.tar.gz"))) as sdist:
        sdist.extractall(work, filter="data")
    source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    run("cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_OPTIONS)
    run("cmake", "--build", str(work / "build"), "--target", "llama-server", "-j", str(os.cpu_count() or 1))
    built = work / "llama-server"
    shutil.copy2(work / "build" / "bin" / "llama-server", built)
    for junk in work.iterdir():  # keep the binary only (the build tree is ~1 GB)
        if junk != built:
            shutil.rmtree(junk) if junk.is_dir() else junk.unlink()
    work.rename(home)
    return binary


if __name__ == "__main__":
    print(llama_server())
