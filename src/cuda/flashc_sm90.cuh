// flashc_sm90.cuh -- Hopper (sm_90a) PTX helpers shared by the wgmma kernels: warpgroup matrix
// multiply (wgmma.mma_async), its fences and waits, shared-memory matrix descriptors with the
// 128-byte swizzle, the async-proxy fence, named barriers and mbarriers. Every fact used here is in
// /work/shared/HOPPER-NOTES.md (section numbers below) and was checked on the H200.
//
// Compile only with -gencode=arch=compute_90a,code=sm_90a (HOPPER-NOTES 0): a plain compute_90
// pass rejects wgmma. Files that include this are the inst/*_sm90.cu instances, which the
// Makefile builds for sm_90a alone.
//
// The one smem layout of every operand tile: rows of a tile are split into 64-element column
// blocks (128 bytes of bf16/f16); column block cb of a ROWS-row tile is ROWS * 128 contiguous
// bytes, row r at r * 128, its 16-byte chunk j stored at chunk j ^ (r & 7) (the 128B swizzle,
// HOPPER-NOTES 2.2; tiles 1024-byte aligned so the absolute-address pattern matches). The same
// tile serves wgmma as K-major (Q, K: rows = M or N, columns = k) and as MN-major (V: rows = k,
// columns = N), see sm90_desc_kmajor / sm90_desc_mnmajor.
#ifndef FLASHC_SM90_CUH
#define FLASHC_SM90_CUH

#include <cudaTypedefs.h> // CUtensorMap, PFN_cuTensorMapEncodeTiled (no -lcuda: HOPPER-NOTES 3.1)

#include "flashc_cuda_common.cuh"

// ------------------------------------------------------------------------------------------------
// swizzled tile addressing

// Byte offset of element (r, c) (c a multiple of 8: a 16-byte chunk) in a ROWS-row swizzled tile.
static __device__ __forceinline__ uint32_t sw128_offset(int rows, int r, int c) {
    return (uint32_t)((c >> 6) * rows * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4));
}

// Rows r0 .. r0 + 63 of a ROWS x D tile (swizzled) as a warpgroup's wgmma A fragments, one
// ldmatrix.x4 per k-step: lanes 0-15 address rows 0-15 of the warp's 16, lanes 16-31 the same rows
// 8 columns on (the forward's Q_i, the dQ kernel's Q_i and dO_i).
template <int D, int ROWS>
static __device__ __forceinline__ void sm90_load_afrag(uint32_t (*A)[4], uint32_t tile, int r0, int warp, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldmatrix_x4(A[kk], tile + sw128_offset(ROWS, r0 + 16 * warp + (lane & 15), 16 * kk + 8 * (lane >> 4)));
}

// ------------------------------------------------------------------------------------------------
// shared-memory matrix descriptors (HOPPER-NOTES 2.1, 2.3): 128B swizzle, base_offset 0

// The descriptor's two words: low = start address | LBO << 16, high = SBO | the swizzle (bit 62).
// Built from 32-bit halves so that a k-step's offset is one 32-bit add to the low word (shared
// memory < 256 KB: the 14-bit start field never carries into LBO) and the constant high word stays
// out of it. Rebuilt per wgmma from the address as one 64-bit value (masks, shifts, ORs, then both
// words moved to uniform registers), the D = 128 forward's wgmma turn took 182 instructions a key
// block, 132 now (SASS); H200, one process against that (dev/cuda/ab.py,
// bench/results/h200-2026-12-02-s11.txt): forward 1.00-1.04x, backward D = 256 1.03-1.07x.
static __device__ __forceinline__ uint64_t sm90_desc_words(uint32_t lo, uint32_t hi) {
    uint64_t d;
    asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"(hi));
    return d;
}
// The high word of every descriptor here: SBO = 8 rows * 128 B, the 128-byte swizzle.
static constexpr uint32_t SM90_DESC_HI = (1024 >> 4) | (1u << 30);

// The 14-bit start field of a shared-memory address, and a descriptor from it plus a byte offset
// (`off`, a multiple of 16) and LBO: one add per operand where the field is computed once (the
// backward's tiles; tile + offset stays below 256 KB, so the field never carries into LBO).
static __device__ __forceinline__ uint32_t sm90_afield(uint32_t saddr) { return (saddr & 0x3FFFF) >> 4; }
static __device__ __forceinline__ uint64_t sm90_desc_f(uint32_t afield, uint32_t off, uint32_t lbo) {
    return sm90_desc_words(afield + (off >> 4) + ((lbo >> 4) << 16), SM90_DESC_HI);
}

// K-major operand (A = Q rows, or B = K rows) of a tile with `rows` rows, starting at row r0 and
// k-step kk (16 elements): the k-step lies in column block kk / 4, at +32 bytes per step inside
// the 128-byte row; LBO is unused with the swizzle, SBO = 8 rows * 128 B.
static __device__ __forceinline__ uint64_t sm90_desc_kmajor(uint32_t tile, int rows, int r0, int kk) {
    return sm90_desc_words(sm90_afield(tile) + (uint32_t)((kk >> 2) * rows * 8 + r0 * 8 + (kk & 3) * 2 + (1 << 16)),
                           SM90_DESC_HI);
}

// The same for a tile in the 64-byte swizzle (rows of 64 bytes, 2 k-steps a row; HOPPER-NOTES 2.3:
// SBO = 8 rows * 64 B): the e4m3 V^T's last 64 keys where BN is an odd multiple of 64.
static constexpr uint32_t SM90_DESC_HI_SW64 = (512 >> 4) | (2u << 30);
static __device__ __forceinline__ uint64_t sm90_desc_kmajor_sw64(uint32_t tile, int kk) {
    return sm90_desc_words(sm90_afield(tile) + (uint32_t)(kk * 2 + (1 << 16)), SM90_DESC_HI_SW64);
}

// MN-major B operand (V: rows = k, columns = N) of a tile with `rows` rows, k-step kk (rows
// 16 kk .. 16 kk + 15): LBO = distance between 64-column blocks (rows * 128 B), SBO = 8 rows * 128 B,
// +2048 B per k-step. Use with tnspB = 1 (wgmma_rs).
static __device__ __forceinline__ uint64_t sm90_desc_mnmajor(uint32_t tile, int rows, int kk) {
    return sm90_desc_words(sm90_afield(tile) + (uint32_t)(kk * 128) | ((uint32_t)(rows * 8) << 16), SM90_DESC_HI);
}

// The calling thread's warpgroup (threadIdx.x / 128, minus `first`), through a shuffle from lane 0:
// the same value, but one ptxas knows is warp-uniform, so that descriptors derived from it stay
// in uniform registers (R2UR in the backward kernels: 123 / 215 / 412 -> 49 / 70 / 278 at D = 64
// / 128 / 256). H200, one process (bench/results/h200-2026-12-02-s11.txt): backward 1.00-1.04x,
// forward 0.99-1.02x (D = 128, S = 16384: 1.013-1.016x).
static __device__ __forceinline__ int warpgroup_uniform(int first) {
    return __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7) - first, 0);
}

// ------------------------------------------------------------------------------------------------
// wgmma protocol (HOPPER-NOTES 1.4): fence before the first wgmma and after any register write
// to its operands, commit a batch, wait until at most N batches are in flight

static __device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

static __device__ __forceinline__ void wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of an accumulator register across a wgmma
// fence / wait (CUTLASS warpgroup_fence_operand).
static __device__ __forceinline__ void reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }
static __device__ __forceinline__ void reg_fence(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }
template <int N>
static __device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(d[i]);
}

// Generic-proxy shared-memory writes (st.shared, cp.async) -> visible to wgmma (async proxy).
// Every writing thread runs it after its writes landed, before the barrier (HOPPER-NOTES 7.2).
static __device__ __forceinline__ void fence_proxy_async_smem(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// bar.sync on named barrier id (1..15; 0 is __syncthreads) for nthreads (a multiple of 32).
static __device__ __forceinline__ void bar_sync(int id, int nthreads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

// bar.arrive: counts toward named barrier id without waiting (the producer half of a bar.sync pair).
static __device__ __forceinline__ void bar_arrive(int id, int nthreads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

// ------------------------------------------------------------------------------------------------
// bulk reduction shared -> global through a tensor map (cp.reduce.async.bulk.tensor, PTX ISA 8.0,
// sm_90): the async proxy adds the box at element coordinates (c0 innermost, c1, 0, 0) of an
// sm90_tma_map of fp32 from shared memory, where it lies in the map's swizzled layout, into global
// memory elementwise, in whole L2 lines instead of one atomic per thread. The writers of the
// source run fence_proxy_async_smem and a barrier before the issuing thread starts it; the issuing
// thread waits (bulk_wait_read) before anyone overwrites the source.
static __device__ __forceinline__ void tma_reduce_add_f32(const CUtensorMap *map, uint32_t ssrc, int c0, int c1) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3, %3}], [%4];\n" ::"l"(
                     (uint64_t)map),
                 "r"(c0), "r"(c1), "r"(0), "r"(ssrc)
                 : "memory");
}

// One box of a 4-d tensor map from shared memory (the map's swizzled layout) to global memory at
// element coordinates (c0 innermost, ..., c3), as a bulk async-group of the issuing thread
// (HOPPER-NOTES 3.6); elements outside the tensor are not written.
static __device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, uint32_t ssrc, int c0, int c1, int c2,
                                                    int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                     (uint64_t)map),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(ssrc)
                 : "memory");
}

// stmatrix.m8n8.x4 (b16): register i of every thread is matrix i, whose row j lane 8 i + j addresses.
static __device__ __forceinline__ void stmatrix_x4(uint32_t saddr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}

static __device__ __forceinline__ void bulk_commit(void) { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// This thread's bulk groups have finished reading shared memory (all but the newest N).
template <int N>
static __device__ __forceinline__ void bulk_wait_read(void) {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// This thread's bulk groups are complete, their global writes performed.
static __device__ __forceinline__ void bulk_wait_all(void) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ------------------------------------------------------------------------------------------------
// mbarrier (HOPPER-NOTES 4): init on one thread, then fence_mbarrier_init and a CTA barrier

static __device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void fence_mbarrier_init(void) {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on bar once every cp.async this thread issued so far has landed; .noinc: the arrival
// counts against the count given at init (one per thread and phase).
static __device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// The same without .noinc: the pending count is raised by one now and lowered when the loads land,
// so the phase still waits for the arrivals it was initialised with (and for these loads).
static __device__ __forceinline__ void cp_async_mbar_arrive_inc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Blocks until the phase with parity `parity` has completed (try_wait may time out: loop).
static __device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// Arms bar for `bytes` more (the TMA loads that complete on it) and arrives once (HOPPER-NOTES 4.1).
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// A ring of `stages` slots that a TMA producer fills and consumers release: full barrier of slot
// i at full0 + 8 i (one arrival: the producer's, plus the loads' bytes), empty at empty0 + 8 i
// (`consumers` arrivals). The caller runs fence_mbarrier_init once all its barriers are set.
static __device__ __forceinline__ void ring_init(uint32_t full0, uint32_t empty0, int stages, int consumers) {
    for (int i = 0; i < stages; i++) {
        mbar_init(full0 + 8 * i, 1);
        mbar_init(empty0 + 8 * i, consumers);
    }
}

// The producer's load u (u = 0, 1, ... through the ring): wait until the consumers released its slot
// (after load u - stages; the first round passes at once), arm the slot's full barrier for `bytes`,
// and return it: the loads of u complete on it. The consumers wait for load u with
// mbar_wait(full0 + 8 (u % stages), (u / stages) & 1).
static __device__ __forceinline__ uint32_t ring_acquire(uint32_t full0, uint32_t empty0, int u, int stages,
                                                        uint32_t bytes) {
    const int st = u % stages;
    mbar_wait(empty0 + 8 * st, ((u / stages) & 1) ^ 1);
    mbar_expect_tx(full0 + 8 * st, bytes);
    return full0 + 8 * st;
}

// ------------------------------------------------------------------------------------------------
// TMA (HOPPER-NOTES 3) and register reallocation (HOPPER-NOTES 5)

// One box of a 4-d tensor map at element coordinates (c0 innermost) into shared memory at dst,
// completing on bar; out-of-bounds elements arrive as zeros and count toward the bytes.
static __device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                   int c3, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory by the
// bulk-copy engine, completing on bar like a TMA load.
static __device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

static __device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}

// Rows r0 .. r0 + ROWS - 1 of (head c2, batch c3) of an sm90_tma_map with (ES-byte elements, 128-byte column
// blocks): one box per column block, written ROWS * 128 bytes apart (the layout of sw128_offset).
template <int ROWS, int BYTES_PER_ROW, int ES>
static __device__ __forceinline__ void sm90_tma_rows(uint32_t tile, const CUtensorMap *map, int c0, int r0, int c2,
                                                     int c3, uint32_t bar) {
#pragma unroll
    for (int cb = 0; cb < BYTES_PER_ROW / 128; cb++)
        tma_load_4d(tile + cb * ROWS * 128, map, c0 + cb * (128 / ES), r0, c2, c3, bar);
}

// Every warp of the warpgroup runs the same one (.aligned); the kernel needs __launch_bounds__.
template <int N>
static __device__ __forceinline__ void reg_alloc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
static __device__ __forceinline__ void reg_dealloc(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Host: a rank-4 map (dim 0 contiguous, strides in bytes) of 1-, 2- or 4-byte (fp32) elements, 128-byte
// swizzle, box {128 bytes, box_rows, 1, 1}: one 128-byte column block of box_rows rows, written
// in the layout of sw128_offset. A dimension of extent 1 gets stride 16 (never used). False when
// the driver refuses (strides not multiples of 16 or >= 2^40, ...): the caller falls back.
// swz = 64: the 64-byte swizzle and boxes 64 bytes wide (the e4m3 V^T's last 64 keys at BN = 192).
static inline bool sm90_tma_map(CUtensorMap *map, const void *base, int es, const uint64_t dim[4],
                                const int64_t stride_bytes[3], int box_rows, int swz = 128) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL; // a benign race: every thread stores the same pointer
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn) {
            cudaGetLastError();
            return false;
        }
        encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    cuuint64_t d[4], st[3];
    for (int i = 0; i < 4; i++) {
        if (dim[i] == 0) return false;
        d[i] = dim[i];
    }
    for (int i = 0; i < 3; i++) {
        if (dim[i + 1] > 1 && (stride_bytes[i] <= 0 || stride_bytes[i] % 16)) return false;
        st[i] = dim[i + 1] > 1 ? (cuuint64_t)stride_bytes[i] : 16;
    }
    const cuuint32_t box[4] = {(cuuint32_t)(swz / es), (cuuint32_t)box_rows, 1, 1}, estr[4] = {1, 1, 1, 1};
    return encode(map, es == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                       : es == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                  4, (void *)base, d, st,
                  box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, swz == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// ------------------------------------------------------------------------------------------------
// wgmma.mma_async m64nNk16, f32 accumulator d[N / 2] (layout HOPPER-NOTES 1.6: thread t of the
// warpgroup, register i -> row 16 (t / 32) + (t % 32) / 4 + 8 ((i >> 1) & 1),
// column 8 (i >> 2) + 2 (t % 4) + (i & 1)). scale_d = 0: d = A B (old d ignored), else d += A B.

// A, B from smem by descriptor, both K-major.
template <typename T, int N>
static __device__ __forceinline__ void wgmma_ss(float *d, uint64_t da, uint64_t db, int scale_d);

// A, B from smem, TA / TB = 1: A M-major / B N-major (the 16-bit types only).
template <typename T, int N, int TA, int TB>
static __device__ __forceinline__ void wgmma_ss_t(float *d, uint64_t da, uint64_t db, int scale_d);

// A from 4 registers (the accumulator layout of a 64 x 16 tile, HOPPER-NOTES 1.7), B MN-major;
// for e4m3 (k32): A of a 64 x 32 tile (4 consecutive k per register), B K-major.
template <typename T, int N>
static __device__ __forceinline__ void wgmma_rs(float *d, const uint32_t *a, uint64_t db, int scale_d);
// A from 4 registers as for wgmma_rs, B K-major (the 16-bit types only): S = Q_i K_j^T with Q_i held.
template <typename T, int N>
static __device__ __forceinline__ void wgmma_rs_k(float *d, const uint32_t *a, uint64_t db, int scale_d);

#include "flashc_sm90_wgmma.h"

// X Y^T for N columns, one commit group, X's 64 rows held as A fragments (sm90_load_afrag) and Y
// rows y0 .. y0 + N - 1 of the YR-row tile at sY (K-major) from shared memory, K = D in steps of 16:
// the forward's S = Q_i K_j^T with Q_i held, the dQ kernel's S_w and dP_w.
template <typename T, int D, int N>
static __device__ __forceinline__ void sm90_issue_rs_k(float *acc, const uint32_t (*Xa)[4], uint32_t sY, int YR, int y0) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) wgmma_rs_k<T, N>(acc, Xa[kk], sm90_desc_kmajor(sY, YR, y0, kk), kk);
    wgmma_commit();
}

// ------------------------------------------------------------------------------------------------
// tile loads (cp.async, generic proxy: the reader runs fence_proxy_async_smem before its wgmma)

// ROWS x D tile from rows 0..nrows-1 of g (row stride rs), columns 0..Dact-1 (zero elsewhere),
// into the swizzled layout at shared address tile; cp.async by NTHREADS threads, the caller
// commits. Needs 16-byte aligned pointers and strides (the dispatch checks). With NTHREADS / (D / 8)
// a multiple of 8, a thread's rows all have the same r & 7, so its swizzled chunk is fixed; else (one
// warp) it is found per row.
template <int ROWS, int D, int NTHREADS>
static __device__ __forceinline__ void sm90_load_tile(uint32_t tile, const uint16_t *g, int64_t rs, int nrows,
                                                      int Dact, const void *safe, int tid) {
    constexpr int CPR = D / 8, RSTEP = NTHREADS / CPR;
    static_assert(NTHREADS % CPR == 0, "thread shape");
    const int r0 = tid / CPR, c = tid % CPR;
    const bool col_ok = c * 8 < Dact;
    const uint16_t *src = g + (int64_t)r0 * rs + c * 8;
    const int64_t step = (int64_t)RSTEP * rs;
    uint32_t dst = tile + sw128_offset(ROWS, r0, c * 8);
#pragma unroll 1
    for (int r = r0; r < ROWS; r += RSTEP) {
        const bool ok = col_ok && r < nrows;
        cp_async_16(RSTEP % 8 == 0 ? dst : tile + sw128_offset(ROWS, r, c * 8), ok ? (const void *)src : safe, ok ? 16 : 0);
        src += step;
        dst += RSTEP * 128;
    }
}

#endif // FLASHC_SM90_CUH
