# mk/ane.mk - build checks for the macOS ANE driver (csrc/driver_ane.c).
#
#   make ane-protocol-test   the driver's call protocol against a recording fake
#                            of the Objective-C runtime, CF and IOSurface
#                            (tests/ane_protocol/): the driver alone, then the
#                            runtime core on the ane driver; gcc -Wall -Wextra
#                            -Werror, ASan + UBSan
#   make ane-macos-syntax    type-check driver_ane.c for arm64-apple-macos14 with
#                            clang (no SDK: tests/ane_protocol/macos_sdk declares
#                            the few libc functions it uses), then compile it to
#                            a Mach-O object and check that it links against
#                            libc/libdl/libpthread only (every Apple symbol is
#                            resolved at run time)
#
# Included from the top Makefile; also usable alone: make -f mk/ane.mk <target>.

ANE_CC      ?= gcc
ANE_CLANG   ?= clang
ANE_NM      ?= llvm-nm
ANE_BUILD   ?= build/ane
ANE_CFLAGS  ?= -std=c11 -O1 -g -Wall -Wextra -Werror
ANE_SAN     ?= -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ANE_TARGET  ?= arm64-apple-macos14
ANE_SDK     := tests/ane_protocol/macos_sdk

ANE_PROTO_SRC := csrc/driver_ane.c tests/ane_protocol/fake_apple.c tests/ane_protocol/test_ane_protocol.c
ANE_PROTO_HDR := csrc/ane_syms.h csrc/anec_driver.h csrc/anec_rt.h tests/ane_protocol/fake_apple.h
ANE_PROTO_BIN := $(ANE_BUILD)/test_ane_protocol
# The runtime core on the ane driver: every runtime source (as in the cffi
# build) except fuzz harnesses, with the fake of the Apple side.
ANE_CORE_SRC  := $(filter-out csrc/driver_ane.c csrc/fuzz_%,$(wildcard csrc/*.c)) csrc/driver_ane.c \
	tests/ane_protocol/fake_apple.c tests/ane_protocol/test_ane_core.c
ANE_CORE_BIN  := $(ANE_BUILD)/test_ane_core

# Undefined symbols the macOS object may reference (Mach-O names).
ANE_ALLOWED_UNDEF := _calloc _free _malloc _realloc _memcmp _memcpy _memset _bzero _strchr _strcmp \
	_strlen _strncmp _strrchr _strstr _snprintf _vsnprintf ___snprintf_chk ___vsnprintf_chk \
	___memcpy_chk ___memset_chk ___stack_chk_fail ___stack_chk_guard _dlopen _dlsym _dlerror \
	_pthread_mutex_init _pthread_mutex_destroy _pthread_mutex_lock _pthread_mutex_unlock

.PHONY: ane-protocol-test ane-macos-syntax

$(ANE_PROTO_BIN): $(ANE_PROTO_SRC) $(ANE_PROTO_HDR) mk/ane.mk
	@mkdir -p $(dir $@)
	$(ANE_CC) $(ANE_CFLAGS) $(ANE_SAN) -DANEC_ANE_TESTING -Icsrc -Itests/ane_protocol \
		-o $@ $(ANE_PROTO_SRC) -ldl -lpthread

$(ANE_CORE_BIN): $(ANE_CORE_SRC) $(wildcard csrc/*.h) tests/ane_protocol/fake_apple.h mk/ane.mk
	@mkdir -p $(dir $@)
	$(ANE_CC) $(ANE_CFLAGS) $(ANE_SAN) -DANEC_ANE_TESTING -Icsrc -Itests/ane_protocol \
		-o $@ $(ANE_CORE_SRC) -lm -ldl -lpthread

ane-protocol-test: $(ANE_PROTO_BIN) $(ANE_CORE_BIN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(abspath $(ANE_PROTO_BIN))
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(abspath $(ANE_CORE_BIN))

ane-macos-syntax:
	@command -v $(ANE_CLANG) >/dev/null 2>&1 || { \
		echo "ane-macos-syntax: $(ANE_CLANG) not found (apt-get install -y clang)"; exit 1; }
	$(ANE_CLANG) --target=$(ANE_TARGET) -isysroot $(ANE_SDK) -fsyntax-only \
		-std=c11 -Wall -Wextra -Werror -Icsrc csrc/driver_ane.c
	@mkdir -p $(ANE_BUILD)
	$(ANE_CLANG) --target=$(ANE_TARGET) -isysroot $(ANE_SDK) -c -O2 \
		-std=c11 -Wall -Wextra -Werror -Icsrc csrc/driver_ane.c -o $(ANE_BUILD)/driver_ane.macos.o
	@if command -v $(ANE_NM) >/dev/null 2>&1; then \
		bad=$$($(ANE_NM) -u $(ANE_BUILD)/driver_ane.macos.o | awk '{print $$NF}' | \
			grep -vxF $(foreach s,$(ANE_ALLOWED_UNDEF),-e $(s)) || true); \
		if [ -n "$$bad" ]; then \
			echo "driver_ane.c links symbols that must be resolved at run time:"; \
			echo "$$bad"; exit 1; \
		fi; \
		echo "driver_ane.macos.o: only libc/libdl/libpthread symbols are linked"; \
	else \
		echo "ane-macos-syntax: $(ANE_NM) not found, skipped the undefined-symbol check"; \
	fi
