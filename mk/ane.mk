# mk/ane.mk - build checks for the macOS ANE driver (csrc/driver_ane.c and
# csrc/ane_*.c).
#
#   make ane-protocol-test   the driver's call protocol against a recording fake
#                            of the Objective-C runtime, CF and IOSurface
#                            (tests/ane_protocol/): the driver alone, then the
#                            runtime core on the ane driver; gcc -Wall -Wextra
#                            -Werror, ASan + UBSan
#   make ane-macos-syntax    type-check the driver's files for arm64-apple-macos14
#                            with clang (no SDK: tests/ane_protocol/macos_sdk
#                            declares the few libc functions it uses), then
#                            compile them to Mach-O objects and check that
#                            together they link against libc/libdl/libpthread
#                            only (every Apple symbol is resolved at run time);
#                            and that the runtime's SHA-256 (csrc/rt_sha256.c)
#                            is CommonCrypto's there
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

# The driver: its entry points and the files they use (ane_driver.h).
ANE_DRV_SRC   := csrc/driver_ane.c $(sort $(wildcard csrc/ane_*.c))
ANE_TAP       := tests/ane_protocol/fake_apple.c tests/ane_protocol/tap_runner.c
ANE_PROTO_SRC := $(ANE_DRV_SRC) $(ANE_TAP) tests/ane_protocol/test_ane_protocol.c
ANE_PROTO_HDR := csrc/ane_syms.h csrc/ane_driver.h csrc/anec_driver.h csrc/anec_rt.h tests/ane_protocol/fake_apple.h \
	tests/ane_protocol/tap_runner.h
ANE_PROTO_BIN := $(ANE_BUILD)/test_ane_protocol
# The runtime core on the ane driver: every runtime source (as in the cffi
# build) except fuzz harnesses, with the fake of the Apple side.
ANE_CORE_SRC  := $(filter-out csrc/fuzz_%,$(sort $(wildcard csrc/*.c))) \
	$(ANE_TAP) tests/ane_protocol/test_ane_core.c
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

$(ANE_CORE_BIN): $(ANE_CORE_SRC) $(wildcard csrc/*.h) tests/ane_protocol/fake_apple.h tests/ane_protocol/tap_runner.h \
		mk/ane.mk
	@mkdir -p $(dir $@)
	$(ANE_CC) $(ANE_CFLAGS) $(ANE_SAN) -DANEC_ANE_TESTING -Icsrc -Itests/ane_protocol \
		-o $@ $(ANE_CORE_SRC) -lm -ldl -lpthread

ane-protocol-test: $(ANE_PROTO_BIN) $(ANE_CORE_BIN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(abspath $(ANE_PROTO_BIN))
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(abspath $(ANE_CORE_BIN))

ANE_MACOS_FLAGS := --target=$(ANE_TARGET) -isysroot $(ANE_SDK) -std=c11 -Wall -Wextra -Werror -Icsrc
# Mach-O names of the CommonCrypto functions rt_sha256.c must call on Apple platforms.
ANE_SHA_UNDEF := _CC_SHA256_Init _CC_SHA256_Update _CC_SHA256_Final

ane-macos-syntax:
	@command -v $(ANE_CLANG) >/dev/null 2>&1 || { \
		echo "ane-macos-syntax: $(ANE_CLANG) not found (apt-get install -y clang)"; exit 1; }
	$(ANE_CLANG) $(ANE_MACOS_FLAGS) -fsyntax-only $(ANE_DRV_SRC) csrc/rt_sha256.c
	@mkdir -p $(ANE_BUILD)
	@set -e; for f in $(ANE_DRV_SRC) csrc/rt_sha256.c; do \
		echo "$(ANE_CLANG) -c -O2 $$f"; \
		$(ANE_CLANG) $(ANE_MACOS_FLAGS) -c -O2 $$f -o $(ANE_BUILD)/$$(basename $$f .c).macos.o; \
	done
	@if command -v $(ANE_NM) >/dev/null 2>&1; then \
		objs="$(foreach f,$(ANE_DRV_SRC),$(ANE_BUILD)/$(basename $(notdir $(f))).macos.o)"; \
		$(ANE_NM) --defined-only $$objs | awk 'NF == 3 {print $$3}' | sort -u > $(ANE_BUILD)/macos.defined; \
		bad=$$($(ANE_NM) -u $$objs | awk 'NF && !/:$$/ {print $$NF}' | sort -u | \
			grep -vxF -f $(ANE_BUILD)/macos.defined | \
			grep -vxF $(foreach s,$(ANE_ALLOWED_UNDEF),-e $(s)) || true); \
		if [ -n "$$bad" ]; then \
			echo "the ane driver links symbols that must be resolved at run time:"; \
			echo "$$bad"; exit 1; \
		fi; \
		echo "the ane driver's macOS objects: only libc/libdl/libpthread symbols are linked"; \
		sha=$$($(ANE_NM) -u $(ANE_BUILD)/rt_sha256.macos.o | awk '{print $$NF}'); \
		for s in $(ANE_SHA_UNDEF); do \
			echo "$$sha" | grep -qxF $$s || { echo "rt_sha256.c does not call $$s on macOS"; exit 1; }; \
		done; \
		echo "rt_sha256.macos.o: SHA-256 from CommonCrypto"; \
	else \
		echo "ane-macos-syntax: $(ANE_NM) not found, skipped the undefined-symbol checks"; \
	fi
