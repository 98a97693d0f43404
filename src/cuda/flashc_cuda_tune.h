// flashc_cuda_tune.h -- the tuning table of the CUDA backend: (head dim, direction) -> tile shape.
//
// One constexpr lookup (no commented-out alternatives in the kernels): the runners-up and their
// measurements live in the comments of each row. Both dtypes use the same row (bf16 and f16 run
// the same mma.sync shape at the same rate).
//
// Head dims: the kernels are compiled for D in FLASHC_CUDA_HEAD_DIMS; a problem's head_dim (any
// multiple of 8 up to 256) runs on the smallest compiled D >= head_dim, with the extra columns
// zero-filled by the loaders (exact: they add 0 to every dot product and are never stored).
#ifndef FLASHC_CUDA_TUNE_H
#define FLASHC_CUDA_TUNE_H

typedef struct flashc_cuda_tile {
    int bm;      // query rows per CTA (BR)
    int bn;      // key rows per CTA / per inner step (BC)
    int nwarps;
    int stages;  // forward: K/V buffers (1 or 2); backward dkdv: Q/dO buffers (1 or 2)
    int wm_sdp;  // backward dkdv: warps along the query rows of S and dP (the rest along keys)
    int wn_kv;   // backward dkdv: warps along the keys of dK, dV (the rest along the head dim)
    int wm_dq;   // backward dkdv: warps along the query rows of dQ (the rest along the head dim)
    int pingpong; // sm90 forward: warpgroup ping-pong loop (flashc_sm90_fwd.cuh PP), else lockstep
} flashc_cuda_tile;

// The compiled head dims, ascending (gen_inst.py writes one instance file per entry and dtype).
#define FLASHC_CUDA_HEAD_DIMS {64, 128, 256}

// Every row below was measured by dev/cuda/attn_lab.cu on the H200 (2026-11-29), bf16, non-causal,
// S = 4096, B * S = 16k, hidden 2048; TFLOP/s of the tuned row, then of the runners-up.

// Forward (FA2 Alg. 1). Warps split the BM query rows (BM / nwarps rows each).
static constexpr flashc_cuda_tile flashc_cuda_tune_fwd(int D) {
    return D <= 64 ? flashc_cuda_tile{128, 64, 4, 2, 0, 0, 0}   //  64: 293; 128x128x4: 274, 1 K/V buffer: 260
                                                                 //      (capped at 168 regs for 3 CTAs/SM: 304 B of spills)
         : D <= 128 ? flashc_cuda_tile{128, 64, 4, 2, 0, 0, 0}  // 128: 345; 1 K/V buffer: 312, 128x32x4: 287
                    : flashc_cuda_tile{128, 64, 8, 2, 0, 0, 0}; // 256: 293 (Q in registers; 273 without);
                                                                 //      64x64x4 1 K/V buffer (2 CTAs/SM): 264
}

// Hopper forward (flashc_sm90_fwd.cuh, wgmma): bm = 64 query rows per consumer warpgroup,
// nwarps = 4 per warpgroup, bn keys per step, stages K and stages V buffers, pingpong: the
// FA3 ping-pong loop (else both warpgroups step in lockstep behind one CTA barrier per block).
// Limits: registers S (bn / 2) + P (bn / 4) + O (D / 2) per thread, at most 255 with 2 warpgroups
// and 168 with 3; smem Q + 2 * stages K/V tiles <= 227 KB (D = 256, bn = 80, 2 stages: 225 KB).
// Measured by dev/cuda/fwd90_lab.cu on the H200 (2026-11-29), bf16, S = 4096, B * S = 16k, hidden
// 2048, TFLOP/s non-causal / causal (noise ~3%); "s3" = 3 stages, "pp" = ping-pong:
// e4m3 (fp8, compiled for D = 128 and 256 only: an fp8 tile row of the head dim must fill the
// 128-byte swizzle row; bn a multiple of 128 for the same reason on V^T). H200, dev/cuda/bench_fp8.py
// (bench/results/h200-2026-11-29-fp8-lab.txt),
// D = 128 non-causal S = 4096 / 8192: ping-pong 588 / 633 TFLOP/s, lockstep 538 / 574 (bf16 in the
// same runs 465 / 484 and 399 / 413). D = 256 keeps the bf16 row's lockstep loop; at bn = 128 it
// spills 28-32 bytes (ptxas), a smaller bn would need the 64-byte swizzle for V^T. Not tuned further.
static constexpr flashc_cuda_tile flashc_cuda_tune_fwd_sm90(int D, bool fp8 = false) {
    return fp8 ? (D <= 128 ? flashc_cuda_tile{128, 128, 8, 3, 0, 0, 0, 1}
                           : flashc_cuda_tile{128, 128, 8, 2, 0, 0, 0, 0})
         : D <= 64 ? flashc_cuda_tile{128, 128, 8, 3, 0, 0, 0, 1}   //  64: 313/288; 2x192 s3 pp 313/287,
                                                                     //      3x128 s2 312/270 (spills), 2x128 s3 281/260
         : D <= 128 ? flashc_cuda_tile{128, 128, 8, 3, 0, 0, 0, 1}  // 128: 460/419; 2x128 s3 389/358,
                                                                     //      2x128 s2 pp 353/355, 2x176 s2 371/336, 2x64 s4 pp 378/348
                    : flashc_cuda_tile{128, 80, 8, 2, 0, 0, 0, 0};  // 256: 467/406; 2x64 s2 465/407,
                                                                     //      2x48 s3 pp 464/402, 2x80 s2 pp 398/387
}

// Backward dK/dV main kernel (FA2 Alg. 2 over key blocks), with its three warp grids.
static constexpr flashc_cuda_tile flashc_cuda_tune_bwd(int D) {
    return D <= 64 ? flashc_cuda_tile{128, 128, 8, 2, 4, 4, 4}   //  64: 226; dQ grid 4x2: 217; 64x128x8: 192
         : D <= 128 ? flashc_cuda_tile{64, 128, 8, 2, 2, 4, 2}  // 128: 246; m2kv4q4: 242, m4kv4q2: 236,
                                                                 //      1 Q/dO buffer: 209, 64x64x4: 164
                    : flashc_cuda_tile{64, 64, 8, 2, 4, 2, 2};   // 256: 188 (217 KB smem); m2kv4q4: 177, m4kv4q2: 178,
                                                                 //      1 Q/dO buffer (151 KB): 158
}

// Backward dQ kernel of the deterministic mode (over query blocks, like the forward). With it the
// whole backward takes 1.14x (D = 256) to 1.26x (D = 64) the time of the atomic one.
static constexpr flashc_cuda_tile flashc_cuda_tune_bwd_dq(int) { return flashc_cuda_tile{64, 64, 4, 2, 0, 0, 0}; }

// Dynamic shared memory (bytes) of each kernel; rows are padded to D + 8 elements.
static constexpr int flashc_cuda_fwd_smem(int D) {
    return (flashc_cuda_tune_fwd(D).bm + 2 * flashc_cuda_tune_fwd(D).stages * flashc_cuda_tune_fwd(D).bn) * (D + 8) * 2;
}

// + 1024: manual 1024-byte alignment, + 64: mbarriers; the Q region is 2 bytes per element for
// every input type (it stages the bf16/f16 O_i)
static constexpr int flashc_cuda_fwd_sm90_smem(int D, bool fp8 = false) {
    return 1024 + flashc_cuda_tune_fwd_sm90(D, fp8).bm * D * 2 +
           2 * flashc_cuda_tune_fwd_sm90(D, fp8).stages * flashc_cuda_tune_fwd_sm90(D, fp8).bn * D * (fp8 ? 1 : 2) + 64;
}

static constexpr int flashc_cuda_bwd_smem(int D) {
    return (2 * flashc_cuda_tune_bwd(D).stages * flashc_cuda_tune_bwd(D).bm * (D + 8)
            + 2 * flashc_cuda_tune_bwd(D).bn * (D + 8)
            + 2 * flashc_cuda_tune_bwd(D).bm * (flashc_cuda_tune_bwd(D).bn + 8)) * 2
         + 2 * flashc_cuda_tune_bwd(D).stages * flashc_cuda_tune_bwd(D).bm * 4;
}

static constexpr int flashc_cuda_bwd_dq_smem(int D) {
    return (2 * flashc_cuda_tune_bwd_dq(D).bm + 4 * flashc_cuda_tune_bwd_dq(D).bn) * (D + 8) * 2;
}

#endif // FLASHC_CUDA_TUNE_H
