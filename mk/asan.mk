# mk/asan.mk - the Python runtime tests on the extension built with sanitizers.
#
#   make test-asan   build anec.runtime._native with -fsanitize=address,undefined
#                    into build/asan (a copy of the anec package holding that
#                    extension; the in-place extension that `make test` uses is
#                    left alone), then run tests/runtime (the thread tests
#                    included) against it with libasan preloaded. Any ASan or
#                    UBSan finding aborts the run and fails the target.
#
# Python itself leaks by design, so leak detection is off (the C unit tests
# check leaks: make c-asan), and so are the RSS-based leak checks (ASan keeps
# freed memory in quarantine). The state machine runs ASAN_STEPS steps here
# (1000 in make test). The C unit-test suite is left out: make c-asan runs it.
# Reports go to build/asan/report.<pid> (pytest captures stderr) and are
# printed when the run fails. Included from the top Makefile (it provides
# $(PY) and the venv).

ASAN_DIR    ?= build/asan
ASAN_CC     ?= gcc
ASAN_STEPS  ?= 300
ASAN_TESTS  ?= tests/runtime
ASAN_CFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g
ASAN_ABS    := $(abspath $(ASAN_DIR))
ASAN_ENV     = LD_PRELOAD=$$($(ASAN_CC) -print-file-name=libasan.so) \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$(ASAN_ABS)/report \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONPATH=$(ASAN_ABS):$(CURDIR)

.PHONY: test-asan

# The extension alone (rebuilt when the runtime sources change): the cffi build
# of anec/runtime/_ffi_build.py, with the sanitizers added through CFLAGS/LDFLAGS.
$(ASAN_DIR)/ext.stamp: $(wildcard csrc/*.c csrc/*.h) anec/runtime/_ffi_build.py mk/asan.mk $(VENV)/.test
	rm -rf $(ASAN_DIR)/cffi && mkdir -p $(ASAN_DIR)/cffi
	CFLAGS="$(ASAN_CFLAGS)" LDFLAGS="$(ASAN_CFLAGS)" $(PY) -c 'import sys; sys.path.insert(0, "anec/runtime"); \
		import _ffi_build as b; print(b.make_builder(absolute=True).compile(tmpdir="$(ASAN_DIR)/cffi"))'
	@touch $@

test-asan: $(ASAN_DIR)/ext.stamp
	rm -rf $(ASAN_DIR)/anec && cp -r anec $(ASAN_DIR)/anec
	find $(ASAN_DIR)/anec \( -name __pycache__ -prune -o -name '_native*.so' -o -name _native.c \) -exec rm -rf {} +
	cp $$(find $(ASAN_DIR)/cffi -name '_native*.so') $(ASAN_DIR)/anec/runtime/
	@# the tests must import this copy: check it from a neutral directory, as pytest will
	cd / && $(ASAN_ENV) $(abspath $(PY)) -c 'import anec.runtime._native as m; print("test-asan:", m.__file__); \
		raise SystemExit(not m.__file__.startswith("$(ASAN_ABS)/"))'
	@# the pytest script, not python -m: the working directory (this project's anec) stays off
	@# sys.path, and the project root comes after build/asan (for the tests package)
	rm -f $(ASAN_DIR)/report.*
	$(ASAN_ENV) ANEC_THREAD_STEPS=$(ASAN_STEPS) $(VENV)/bin/pytest -q -p no:cacheprovider \
		--ignore=tests/runtime/test_rt_c_suite.py \
		--deselect=tests/runtime/test_rt_reload.py::test_1000_data_patch_reloads_do_not_leak $(ASAN_TESTS) \
		|| { cat $(ASAN_DIR)/report.* 2>/dev/null; exit 1; }
	@if ls $(ASAN_DIR)/report.* >/dev/null 2>&1; then cat $(ASAN_DIR)/report.*; exit 1; fi
	@echo "test-asan: 0 findings"
