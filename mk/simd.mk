# mk/simd.mk - the sim's vector paths against its portable code, on x86 and on arm64.
#
#   make check-simd    tests/c/test_simd.c natively, twice: with the vector paths this CPU has
#                      (AVX2, F16C) and with csrc/sim_kernels.c built -DANEC_SIM_SCALAR (its
#                      portable kernels only)
#   make check-arm64   the runtime (every csrc/*.c) cross-compiled for aarch64 Linux with
#                      -Wall -Wextra -Werror, then run under qemu-aarch64: the C unit tests
#                      (mk/c.mk's list: test_simd there checks the NEON paths), test_simd
#                      with the portable kernels, and test_simd built by clang (the compiler
#                      of macOS, with its own arm_neon.h and contraction default)
#
# check-arm64 needs clang, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user
# (Debian packages; .ci/run installs them): without them it stops with an error naming them.
# These targets check bits only: a time measured under qemu says nothing about arm64 speed.
# Included from the top Makefile after mk/c.mk, whose source and test lists it uses.

A64_CC     ?= aarch64-linux-gnu-gcc
A64_CLANG  ?= clang --target=aarch64-linux-gnu
A64_QEMU   ?= qemu-aarch64
A64_ROOT   ?= /usr/aarch64-linux-gnu
A64_BUILD  ?= build/arm64
A64_PKGS   := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
A64_FLAGS  := $(C_WARN) -O2 $(C_DEFS) $(C_INC)
A64_OBJ    := $(patsubst csrc/%.c,$(A64_BUILD)/obj/%.o,$(C_RT_SRC))
A64_TESTS  := test_simd_portable test_simd_clang $(C_TESTS)
SIMD_SRC   := csrc/sim_kernels.c csrc/sim_pool.c

.PHONY: check-simd check-arm64 arm64-tools

# test_simd needs the kernels and their thread pool only: built with the vector paths, and without them
$(C_BUILD)/simd/test_simd: tests/c/test_simd.c $(SIMD_SRC) $(C_RT_HDR)
	@mkdir -p $(@D)
	$(C_CC) $(C_FLAGS_opt) tests/c/test_simd.c $(SIMD_SRC) -o $@ $(C_LIBS)

$(C_BUILD)/simd/test_simd_portable: tests/c/test_simd.c $(SIMD_SRC) $(C_RT_HDR)
	@mkdir -p $(@D)
	$(C_CC) $(C_FLAGS_opt) -DANEC_SIM_SCALAR tests/c/test_simd.c $(SIMD_SRC) -o $@ $(C_LIBS)

check-simd: $(C_BUILD)/simd/test_simd $(C_BUILD)/simd/test_simd_portable
	@set -e; for t in $^; do $$t; done

arm64-tools:
	@for t in $(A64_CC) $(A64_QEMU) $(firstword $(A64_CLANG)); do command -v $$t >/dev/null 2>&1 || { \
		echo "check-arm64: $$t not found; it needs clang and $(A64_PKGS) (Debian: apt-get install clang $(A64_PKGS))" >&2; exit 1; }; done
	@test -e $(A64_ROOT)/lib/ld-linux-aarch64.so.1 || { \
		echo "check-arm64: no aarch64 C library under $(A64_ROOT); install libc6-dev-arm64-cross (or set A64_ROOT)" >&2; exit 1; }

$(A64_BUILD)/obj/%.o: csrc/%.c $(C_RT_HDR) | arm64-tools
	@mkdir -p $(@D)
	$(A64_CC) $(A64_FLAGS) -c $< -o $@

$(A64_BUILD)/test_simd_portable: tests/c/test_simd.c $(SIMD_SRC) $(C_RT_HDR) | arm64-tools
	@mkdir -p $(@D)
	$(A64_CC) $(A64_FLAGS) -DANEC_SIM_SCALAR tests/c/test_simd.c $(SIMD_SRC) -o $@ $(C_LIBS)

# the product's flags (anec/runtime/_ffi_build.py: -ffp-contract=off)
$(A64_BUILD)/test_simd_clang: tests/c/test_simd.c $(SIMD_SRC) $(C_RT_HDR) | arm64-tools
	@mkdir -p $(@D)
	$(A64_CLANG) $(A64_FLAGS) -ffp-contract=off tests/c/test_simd.c $(SIMD_SRC) -o $@ $(C_LIBS)

$(A64_BUILD)/%: tests/c/%.c $(A64_OBJ) $(C_RT_HDR) | arm64-tools
	$(A64_CC) $(A64_FLAGS) $< $(A64_OBJ) -o $@ $(C_LIBS)

check-arm64: $(addprefix $(A64_BUILD)/,$(A64_TESTS)) | arm64-tools
	@set -e; for t in $(A64_TESTS); do $(A64_QEMU) -L $(A64_ROOT) $(A64_BUILD)/$$t; done
