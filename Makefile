# specpilot: set-up and entry points. `make demo` and `make test` work from a clean clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_CPU := torch==2.13.0
# the tests spread over two processes (pytest-xdist, a dev dependency), a file's tests in one process so
# its module fixtures (tiny models, GGUF files, sampled distributions) are built once; PYTEST_ARGS= runs them in one
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: demo test test-slow bench-draft clean install

define COMPILE_STARTUP
import importlib
for name in ("agent.cli.main", "agent.brains.local", "agent.brains.constrained", "agent.mcp_server", "llguidance",
             "llama_cpp"):
    try:
        importlib.import_module(name)
    except ImportError:  # an optional engine not installed: nothing of it to compile
        pass
endef
export COMPILE_STARTUP

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	# one resolve for everything: this machine's CPU torch (pinned: a newer one is a multi-GB CUDA build),
	# specpilot with its test tools, and the llama.cpp backend (llama-cpp-python builds from its sdist
	# once with cmake and a C++ compiler; pip keeps the built wheel in its cache, so later installs take seconds).
	# --no-compile: Python compiles a module when it is first imported; pip compiling every file of torch
	# and transformers up front took 70 of the install's 107 seconds here
	$(BIN)/python -m pip install --quiet --no-compile "$(TORCH_CPU)" -e ".[dev,llamacpp]"
	# the bytecode of what `ask`, `chat` and `mcp` import, written once here (about 4 s): where the caller's
	# environment says not to write bytecode (PYTHONDONTWRITEBYTECODE, set in many containers), every one of
	# those processes compiled these ~1,300 modules again, about 2 s of each command on a 2-core CPU
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "$$COMPILE_STARTUP"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/specpilot models fetch
	$(BIN)/specpilot demo

# the first process to import a module writes its bytecode for the others (the install leaves that to
# them), even where the caller's environment says not to write any (PYTHONDONTWRITEBYTECODE)
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -m slow

bench-draft: $(STAMP)
	$(BIN)/python benchmarks/scripts/draft.py

clean:
	rm -rf $(VENV) build *.egg-info
