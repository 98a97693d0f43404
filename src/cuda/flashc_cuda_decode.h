// flashc_cuda_decode.h -- the CUDA KV-cache (decode) path and the merge, as flashc_cuda.cu calls
// them: plain functions of the validated problem that return a cudaError_t (flashc_cuda.cu turns it
// into a status and a message). Kernels and launchers in flashc_cuda_decode.cu.
#ifndef FLASHC_CUDA_DECODE_H
#define FLASHC_CUDA_DECODE_H

#include <cuda_runtime.h>

#include "flashc_internal.h"

// The last decode kernel planned for (its shared-memory attribute set) and its CTAs per SM: a ctx
// keeps one, so that a decode step's plan is not an occupancy query and two attribute calls on the
// host each time. fn NULL: nothing cached.
typedef struct flashc_dec_occ {
    const void *fn;
    int occ;
} flashc_dec_occ;

// Workspace bytes of flashc_fwd_kvcache: the fp32 split partials (0 when one split suffices).
// sm_count and smem_optin (max dynamic shared memory per block) describe the device; oc may be NULL.
FLASHC_INTERNAL size_t flashc__cuda_kvcache_ws(const flashc_problem *p, const flashc_kvcache_args *a, int sm_count,
                                               int smem_optin, flashc_dec_occ *oc);

// Append k_new / v_new (rotated) at c_b, then attention of q (rotated) over the first c_b +
// seqlen_new keys, split-KV into a->ws and merged when the split count is > 1. The splits count
// themselves in on int counters that each call leaves zero: zeroed_counters, when given, is such a
// buffer of flashc__cuda_kvcache_counters(p) ints, zero now (the ctx keeps one: no memset per
// call); NULL takes them from a->ws and zeroes them first.
FLASHC_INTERNAL cudaError_t flashc__cuda_kvcache(const flashc_problem *p, const flashc_kvcache_args *a, int sm_count,
                                                 int smem_optin, flashc_dec_occ *oc, int *zeroed_counters);
FLASHC_INTERNAL size_t flashc__cuda_kvcache_counters(const flashc_problem *p);

// flashc_merge on device tensors.
FLASHC_INTERNAL cudaError_t flashc__cuda_merge(const flashc_merge_problem *m, const flashc_merge_args *a);

#endif // FLASHC_CUDA_DECODE_H
