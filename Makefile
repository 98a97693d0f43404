# flashc -- build, test, benchmark, install.
#
#   make            build/libflashc.a, build/libflashc.so (+ the CUDA backend when nvcc is found)
#   make run        set up what is missing, build, run flashc-bench on the best backend present
#   make test       set up what is missing, build, run every test (C sweep, sanitizers, Python)
#   make install    PREFIX=/usr/local: header, libraries, pkg-config file
#
# Sources are picked up by wildcard: src/*.c src/ref/*.c src/cpu/*.c and src/cuda/**/*.cu.
# Files named *_amx.c / *_avx512.c / *_avx2.c get their ISA flags; the library picks one at run time.

CC      ?= cc
VERSION := $(shell awk '/define FLASHC_VERSION_(MAJOR|MINOR|PATCH) /{printf "%s%s", s, $$3; s="."}' include/flashc.h)
PREFIX  ?= /usr/local
BUILD   ?= build
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# sm_80 and sm_90 SASS for the mma.sync kernels (every GPU from the A100 on).
GPU_ARCH ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
# The wgmma kernels (src/cuda/inst/*_sm90.cu) are built for sm_90a alone: a compute_90 pass rejects
# wgmma (HOPPER-NOTES 0). flashc_cuda.cu dispatches to them only on compute capability 9.0.
GPU_ARCH_SM90A ?= -gencode=arch=compute_90a,code=sm_90a

CFLAGS_BASE = -std=c11 -O3 -g -Wall -Wextra -fPIC -fvisibility=hidden -D_POSIX_C_SOURCE=200809L \
              -DFLASHC_BUILD -Iinclude -Isrc
CFLAGS     ?=
LDLIBS      = -lm -lpthread

AVX512_FLAGS = -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AMX_FLAGS    = $(AVX512_FLAGS) -mamx-tile -mamx-bf16

C_SRCS  = $(wildcard src/*.c src/ref/*.c src/cpu/*.c)
C_OBJS  = $(patsubst %.c,$(BUILD)/%.o,$(C_SRCS))
CU_SRCS = $(if $(NVCC),$(wildcard src/cuda/*.cu src/cuda/inst/*.cu))
CU_OBJS = $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRCS))
HDRS    = include/flashc.h $(wildcard src/*.h src/cpu/*.h src/ref/*.h)
CU_HDRS = include/flashc.h $(wildcard src/*.h src/cuda/*.h src/cuda/*.cuh)

ifneq ($(CU_SRCS),)
  CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  CFLAGS_BASE += -DFLASHC_WITH_CUDA
  NVCCFLAGS  ?= -O3 -std=c++17 $(GPU_ARCH) --threads 0 -Xptxas -warn-spills \
                -Xcompiler -fPIC,-fvisibility=hidden -DFLASHC_BUILD -DFLASHC_WITH_CUDA -Iinclude -Isrc
  # static cudart: the library needs only the driver at run time
  LDLIBS     += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -ldl -lrt -lstdc++
endif

.PHONY: all lib run test bench install clean info setup setup-test
all: info lib

info:
	@echo "flashc build: CC=$(CC)"
	@if [ -n "$(NVCC)" ]; then echo "  ✓ nvcc: $(NVCC) ($(words $(CU_SRCS)) CUDA sources)"; \
	 else echo "  ✗ nvcc not found: building without the CUDA backend"; fi

lib: $(BUILD)/libflashc.a $(BUILD)/libflashc.so

# The C objects differ with and without the CUDA backend (-DFLASHC_WITH_CUDA): a stamp named for
# the mode they were built in makes a switch (NVCC= or not) rebuild them, never link stale ones.
MODE_STAMP = $(BUILD)/mode.$(if $(CU_SRCS),cuda,host)
$(MODE_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/mode.* && touch $@

$(BUILD)/%_avx512.o: %_avx512.c $(HDRS) $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AVX512_FLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%_amx.o: %_amx.c $(HDRS) $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AMX_FLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%_avx2.o: %_avx2.c $(HDRS) $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AVX2_FLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.c $(HDRS) $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -c $< -o $@


$(BUILD)/%.o: %.cu $(CU_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/%_sm90.o: %_sm90.cu $(CU_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out $(GPU_ARCH),$(NVCCFLAGS)) $(GPU_ARCH_SM90A) -c $< -o $@

$(BUILD)/libflashc.a: $(C_OBJS) $(CU_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libflashc.so: $(C_OBJS) $(CU_OBJS)
	$(CC) -shared -o $@ $^ $(LDLIBS) -Wl,-soname,libflashc.so.0

# ------------------------------------------------------------------------------------------------
# tools, tests, benchmark

TEST_CFLAGS = -std=c11 -O2 -g -Wall -Wextra -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc

# The benchmark's CPU peer is a naive attention on OpenBLAS, built in (-DFLASHC_BENCH_BLAS) when an
# OpenBLAS cblas.h and library are found (Debian: libopenblas-dev, which scripts/setup.sh installs);
# a netlib cblas.h alone does not count. Recursively expanded, so it is probed only when the bench
# is built, after `make run` has run the setup. -O3 -fno-trapping-math let the peer's softmax loops
# vectorize (they compare against a clamp); the bench does not rely on FP traps.
BLAS_INC_DIRS = /usr/include/*/openblas-pthread /usr/include/*/openblas-openmp /usr/include/*/openblas-serial \
                /usr/include/openblas /usr/local/include /usr/include
BENCH_BLAS = $(shell for d in $(BLAS_INC_DIRS); do [ -e $$d/cblas.h ] || continue; \
               printf '\043include <cblas.h>\nint main(void) { openblas_set_num_threads(1); return 0; }\n' | \
               $(CC) -x c - -I$$d -Werror=implicit-function-declaration -o /dev/null -lopenblas >/dev/null 2>&1 && \
               { echo "-DFLASHC_BENCH_BLAS -I$$d -lopenblas"; break; }; done)

$(BUILD)/flashc-bench: bench/flashc_bench.c bench/bench_util.h $(BUILD)/libflashc.a
	$(CC) $(TEST_CFLAGS) -O3 -fno-trapping-math $< -o $@ $(BUILD)/libflashc.a $(LDLIBS) $(BENCH_BLAS)

# CPU decode (flashc_fwd_kvcache) against the memory bandwidth measured in the same run.
$(BUILD)/flashc-bench-decode: bench/bench_decode.c bench/bench_util.h $(BUILD)/libflashc.a
	$(CC) $(TEST_CFLAGS) -O3 $< -o $@ $(BUILD)/libflashc.a $(LDLIBS)

$(BUILD)/test_%: tests/test_%.c tests/*.h $(BUILD)/libflashc.a
	$(CC) $(TEST_CFLAGS) $(CFLAGS) $< -o $@ $(BUILD)/libflashc.a $(LDFLAGS) $(LDLIBS)

TEST_SRCS = $(wildcard tests/test_*.c)
TEST_BINS = $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRCS))

bench: $(BUILD)/flashc-bench $(BUILD)/flashc-bench-decode

setup:
	@sh scripts/setup.sh

run: setup all $(BUILD)/flashc-bench
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BUILD)/flashc-bench $(BENCH_ARGS)

setup-test:
	@sh scripts/setup.sh test

test: setup-test all $(TEST_BINS)
	@sh tests/run_tests.sh $(BUILD)

# ------------------------------------------------------------------------------------------------
# install

install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/flashc.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libflashc.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libflashc.so $(DESTDIR)$(PREFIX)/lib/libflashc.so.0
	ln -sf libflashc.so.0 $(DESTDIR)$(PREFIX)/lib/libflashc.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LDLIBS)|' \
	    flashc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/flashc.pc

clean:
	rm -rf $(BUILD) build-asan
