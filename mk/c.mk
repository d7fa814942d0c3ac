# mk/c.mk - C unit tests, sanitizers and fuzzing of the runtime (csrc/).
#
#   make c-test       the C unit tests (tests/c/test_*.c), -O2, -Wall -Wextra -Werror
#   make c-asan       the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz-smoke   libFuzzer on the MIL parser, the BLOBFILE reader and the manifest
#                     path (limits + weight files + MIL through anec_compile), ~45 s total
#   make fuzz         the same, longer: FUZZ_TIME seconds per target (default 600), or
#                     until FUZZ_RUNS executions when set (make fuzz FUZZ_RUNS=1000000
#                     FUZZ_TIME=14400: at least a million inputs per target)
#
# Fuzzing needs clang with libFuzzer (Debian: apt-get install -y clang).
# Included from the top Makefile; also usable alone: make -f mk/c.mk <target>.

C_CC        ?= gcc
C_CLANG     ?= clang
C_BUILD     ?= build/c
C_WARN      := -std=c11 -Wall -Wextra -Werror
C_INC       := -Icsrc -Itests/c
C_LIBS      := -lm -lpthread -ldl
C_ASAN      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
FUZZ_TIME   ?= 600
FUZZ_SMOKE  ?= 15
FUZZ_RUNS   ?=

# The runtime sources: every csrc/*.c, as in anec/runtime/_ffi_build.py; without
# driver_ane.c the build falls back to the sim only.
C_RT_SRC    := $(sort $(wildcard csrc/*.c))
ifneq ($(wildcard csrc/driver_ane.c),)
C_DEFS      :=
else
C_DEFS      := -DANEC_NO_ANE_DRIVER
endif
C_RT_HDR    := $(wildcard csrc/*.h) tests/c/tharness.h
C_TESTS     := test_mil test_blob test_kernels test_rt test_simd
C_FUZZERS   := fuzz_mil fuzz_blob fuzz_manifest

.PHONY: c-test c-asan fuzz-smoke fuzz c-clean
# the runtime objects are kept between runs (make would delete them as intermediates)
.SECONDARY:

# Runtime objects are built once per flavour (opt, asan, fuzz) and linked into every test.
C_RT_OBJ     = $(patsubst csrc/%.c,$(C_BUILD)/$(1)/obj/%.o,$(C_RT_SRC))
C_FLAGS_opt  := $(C_WARN) -O2 $(C_DEFS) $(C_INC)
C_FLAGS_asan := $(C_WARN) $(C_ASAN) $(C_DEFS) $(C_INC)
C_FLAGS_fuzz := $(C_WARN) -O1 -g -fsanitize=fuzzer-no-link,address,undefined $(C_DEFS) $(C_INC)

$(C_BUILD)/opt/obj/%.o: csrc/%.c $(C_RT_HDR)
	@mkdir -p $(@D)
	$(C_CC) $(C_FLAGS_opt) -c $< -o $@

$(C_BUILD)/asan/obj/%.o: csrc/%.c $(C_RT_HDR)
	@mkdir -p $(@D)
	$(C_CC) $(C_FLAGS_asan) -c $< -o $@

$(C_BUILD)/fuzz/obj/%.o: csrc/%.c $(C_RT_HDR)
	@mkdir -p $(@D)
	$(C_CLANG) $(C_FLAGS_fuzz) -c $< -o $@

$(C_BUILD)/opt/%: tests/c/%.c $(call C_RT_OBJ,opt) $(C_RT_HDR)
	$(C_CC) $(C_FLAGS_opt) $< $(call C_RT_OBJ,opt) -o $@ $(C_LIBS)

$(C_BUILD)/asan/%: tests/c/%.c $(call C_RT_OBJ,asan) $(C_RT_HDR)
	$(C_CC) $(C_FLAGS_asan) $< $(call C_RT_OBJ,asan) -o $@ $(C_LIBS)

$(C_BUILD)/fuzz/%: tests/c/%.c $(call C_RT_OBJ,fuzz) $(C_RT_HDR)
	$(C_CLANG) $(C_WARN) -O1 -g -fsanitize=fuzzer,address,undefined $(C_DEFS) $(C_INC) $< $(call C_RT_OBJ,fuzz) -o $@ $(C_LIBS)

c-test: $(addprefix $(C_BUILD)/opt/,$(C_TESTS))
	@set -e; for t in $^; do $$t; done

c-asan: $(addprefix $(C_BUILD)/asan/,$(C_TESTS))
	@set -e; for t in $^; do ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 $$t; done

# Each fuzzer starts from its seed corpus (tests/c/corpus/<name>/) and writes
# what it finds to a scratch copy, so the checked-in seeds stay small.
# $(1): target, $(2): seconds, $(3): max input length, $(4): runs (empty: no cap).
define run_fuzzer
	@rm -rf $(C_BUILD)/corpus/$(1) && mkdir -p $(C_BUILD)/corpus/$(1) && cp tests/c/corpus/$(1)/* $(C_BUILD)/corpus/$(1)/
	@echo "fuzz_$(1): $(2) s$(if $(4), or $(4) runs)"; $(C_BUILD)/fuzz/fuzz_$(1) -max_total_time=$(2) -max_len=$(3) -timeout=10 \
		$(if $(4),-runs=$(4)) -print_final_stats=1 -artifact_prefix=$(C_BUILD)/fuzz/crash-$(1)- $(C_BUILD)/corpus/$(1) \
		> $(C_BUILD)/fuzz/fuzz_$(1).log 2>&1; rc=$$?; grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb))' \
		$(C_BUILD)/fuzz/fuzz_$(1).log; if [ $$rc -ne 0 ]; then tail -n 40 $(C_BUILD)/fuzz/fuzz_$(1).log; fi; exit $$rc
endef

fuzz-smoke: $(addprefix $(C_BUILD)/fuzz/,$(C_FUZZERS))
	$(call run_fuzzer,mil,$(FUZZ_SMOKE),4096,)
	$(call run_fuzzer,blob,$(FUZZ_SMOKE),4096,)
	$(call run_fuzzer,manifest,$(FUZZ_SMOKE),16384,)

fuzz: $(addprefix $(C_BUILD)/fuzz/,$(C_FUZZERS))
	$(call run_fuzzer,mil,$(FUZZ_TIME),4096,$(FUZZ_RUNS))
	$(call run_fuzzer,blob,$(FUZZ_TIME),4096,$(FUZZ_RUNS))
	$(call run_fuzzer,manifest,$(FUZZ_TIME),16384,$(FUZZ_RUNS))

c-clean:
	rm -rf $(C_BUILD)
