# anec — developer entry points. `make demo` and `make test` work on a fresh
# Linux machine with only Python 3 (and a C compiler for the runtime).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
ANEC   := $(VENV)/bin/anec
# torch 2.13.0 CPU is installed before anything that depends on torch, so pip
# never pulls a CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: all demo test test-fast lint check-c bench clean distclean help

all: help

help:
	@echo "make demo      set up .venv, compile and run examples/gpt2_mlp.ir on the simulator"
	@echo "make test      set up .venv with the test references and run the whole test suite in parallel"
	@echo "make lint      ruff over anec/, tests/, benchmarks/, tools/ and mypy (strict on anec/ir/, anec/passes/)"
	@echo "make check-c   sanitizer (ASan/UBSan) C tests, fuzz smoke run, macOS-target syntax check"
	@echo "make check-simd the sim's AVX2/F16C paths against its portable kernels, bit for bit"
	@echo "make check-arm64 the runtime built for aarch64 and its C tests (NEON paths) under qemu-user"
	@echo "make test-asan the Python runtime tests on the extension built with ASan/UBSan"
	@echo "make fuzz      longer libFuzzer runs (MIL parser, BLOBFILE reader, manifest path; FUZZ_RUNS=N)"
	@echo "make bench     run the benchmarks (results in benchmarks/results/)"
	@echo "make mutate    mutation testing by hand: mutmut + scripted C mutants (tools/mutation/REPORT.md)"

# (an extension built in place by .ext below would shadow the one the install builds)
$(VENV)/.core: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	rm -f anec/runtime/_native.cpython-*.so
	$(PIP) install -q -e .
	@touch $@ $(VENV)/.ext

# The runtime extension built again in place when its C sources or its build script
# changed since (the editable install above built it first)
$(VENV)/.ext: $(VENV)/.core $(wildcard csrc/*.c csrc/*.h) anec/runtime/_ffi_build.py
	$(PY) anec/runtime/_ffi_build.py >/dev/null
	@touch $@

$(VENV)/.test: $(VENV)/.core
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[test,ref]"
	@touch $@

# make bench also draws its PNG plots (benchmarks/results/*.png): matplotlib, the plots extra
$(VENV)/.bench: $(VENV)/.test
	$(PIP) install -q -e ".[plots]"
	@touch $@

demo: $(VENV)/.core
	$(ANEC) check examples/gpt2_mlp.ir
	$(ANEC) compile examples/gpt2_mlp.ir --random-weights 0 -o build/demo
	$(ANEC) run build/demo/mlp --random-inputs 0 --compare-interp

# one pytest-xdist worker per CPU (the test extra installs pytest-xdist); tests/README.md
# says what keeps a test safe to run beside the others
test: $(VENV)/.test $(VENV)/.ext
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal tests

# ruff's rules and mypy's scope are in pyproject.toml ([tool.ruff], [tool.mypy]); the
# test extra pins both
$(VENV)/.lint: $(VENV)/.core
	$(PIP) install -q -e ".[test]"
	@touch $@

lint: $(VENV)/.lint
	$(PY) -m ruff check anec tests benchmarks tools
	$(PY) -m mypy

test-fast: $(VENV)/.test
	$(PY) -m pytest -q -x -m "not slow" tests

bench: $(VENV)/.bench
	$(PY) benchmarks/run_all.py

clean:
	rm -rf build out .pytest_cache .hypothesis .mypy_cache .ruff_cache
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info anec/runtime/_native*.so anec/runtime/_native.c

# C sanitizer/fuzz targets and the macOS driver build checks.
-include mk/c.mk
-include mk/ane.mk
-include mk/asan.mk
-include mk/mutate.mk
-include mk/simd.mk

check-c: c-asan fuzz-smoke ane-protocol-test ane-macos-syntax
