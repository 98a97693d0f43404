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
    int pingpong; // sm90 forward loop: 0 lockstep, 1 ping-pong (cp.async), 2 warp-specialized (TMA
                  // producer warpgroup + nwarps / 4 consumer warpgroups), flashc_sm90_fwd.cuh
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
// nwarps = 4 per consumer warpgroup, bn keys per step, stages K and stages V buffers, pingpong =
// the loop: 2 = warp-specialized (a TMA producer warpgroup besides the consumers, registers
// 240 / 160 per consumer thread with 2 / 3 consumer warpgroups), 1 = ping-pong with cp.async by
// every thread, 0 = lockstep. Limits: registers S (bn / 2) + P (bn / 4) + O (D / 2) per consumer
// thread; smem Q + 2 * stages K/V tiles <= 227 KB (D = 256, bn = 80, 2 stages: 225 KB). The
// problems the TMA kernel does not take (bases not 128-byte aligned) run the same tile on loop
// flashc_cuda_fwd_sm90_fallback(D).
// Measured by dev/cuda/fwd90_lab.cu on the H200 (2026-12-01, bench/results/h200-2026-12-01-ws-lab.txt),
// bf16, B * S = 16k, hidden 2048, TFLOP/s at S = 1024 / 4096 / 16384, "NWGxBN sSTAGES", ws = loop 2:
//   D =  64 non-causal: 3x128 s3 ws 348/459/476; 2x128 s3 ws 329/417/439, 3x128 s2 ws 346/458/474,
//                       2x192 s2 ws 295/422/474, 2x128 s3 ping-pong 269/294/330
//           causal:     2x128 s3 ws 202/347/414; 3x128 s3 ws 195/330/446, 2x128 s2 ws 202/340/386
//   D = 128 non-causal: 2x128 s3 ws 511/549-605/612-674 (two runs of the same tile); 2x128 s2 ws
//                       513/572/581, 2x176 s2 ws 455/562/619, 2x192 s2 ws 421/549/610, ping-pong 399/360/435
//           causal:     2x128 s3 ws 326/478-524/611-631; 2x128 s2 ws 320/486/576, 2x176 s2 ws 285/452/552
//   D = 256 non-causal: 2x80 s2 ws 594/736/758; 2x64 s2 ws 580/715/625, 2x48 s3 ws 509/512/594,
//                       2x80 s2 lockstep 394/418/490
//           causal:     2x80 s2 ws 331/648/766; 2x64 s2 ws 347/641/647, 2x80 s2 lockstep 286/421/480
// The TMA kernel is persistent (one CTA per SM); against one CTA per tile, same lab, tuned tiles,
// bench/results/h200-2026-12-01-persistent-lab.txt, S = 512 / 4096 / 16384 non-causal: D = 64
// 322/458/532 vs 278/421/496, D = 128 397/647/627 vs 374/567/570, D = 256 405/733/816 vs
// 412/648/688; causal D = 128 218/518/616 vs 214/510/527, D = 256 204/566/681 vs 219/614/663
// (the one clear loss: a static stride over heaviest-first tiles balances causal D = 256 worse
// than the hardware's dynamic block order).
// e4m3 (fp8, compiled for D = 128 and 256 only: an fp8 tile row of the head dim must fill the
// 128-byte swizzle row; V^T rows of bn bytes are 128-byte swizzle column blocks and at most one
// 64-byte block): D = 256 2x128 ws, 2 stages; D = 128 2x192 ws, 3 stages (registers: S 96 + P 24 +
// O 64 per consumer thread; 2x256 spilled 96 bytes and ptxas serialised its wgmmas). H200, one
// process, 2x192 s3 against 2x128 s3 (dev/cuda/ab.py, bench/results/h200-2026-12-02-s20.txt call 1),
// S = 512 / 1024 / 2048 / 4096 / 8192 / 16384: 0.89 / 0.93 / 1.02 / 1.04 / 1.07 / 1.08x, causal
// 0.90 / 0.92 / 1.00 / 1.03 / 1.06 / 1.08x (946 against 879 TFLOP/s at 16384): the short rows
// keep 2x128 (a 192-key block wastes more of a short row's last block, and fewer blocks pipeline).
// So tuned, against the 2x128 of before (call 4): 1.00 / 1.00 / 1.02 / 1.04 / 1.08 / 1.08x, causal
// 1.00 / 1.00 / 1.00 / 1.04 / 1.06 / 1.08x. 2x224 s2 (a 32-byte swizzle block on V^T) against 2x192
// s3 (call 2): 0.94 / 0.99 / 0.99 / 1.00x at S = 2048-16384, causal 0.91-0.99x.
// Rows that see fewer keys than flashc_cuda_fwd_sm90_short_keys (a row's span: Sk, or wl + wr + 1
// where the window bounds both sides) take the short-row tile:
// - D = 64, causal only (or a bounded right window): 2x128 instead of 3x128. H200, 2026-12-02
//   (dev/cuda/ab.py, bench/results/h200-2026-12-02-s12.txt), causal on 3x128 s3 against 2x128 s3:
//   S = 512 / 1024 / 2048 0.71 / 0.88 / 0.93x, S = 4096 / 8192 / 16384 1.07 / 1.10 / 1.13x (the
//   192-row tiles waste more of the diagonal and balance worse while tiles are few and short).
//   Windows: not measured.
// - D = 128: 2 stages instead of 3, so that the CTA has room for the O tile of the TMA-store
//   epilogue (flashc_cuda_fwd_sm90_o_bytes, sm90_fwd_store_tma). H200, one process against 3 stages
//   and register stores (h200-2026-12-02-s14.txt calls 4-5), S = 512 / 1024 / 2048 / 8192 / 16384:
//   1.05-1.06 / 1.03 / 1.01-1.02 / 1.01 / 0.98x, causal 1.09 / 1.05 / 1.02-1.03 / 1.00 / 1.00x; 2
//   stages with register stores: 1.00-1.01x, causal 1.00-1.03x (S <= 8192). The 8192-key bound is
//   not a measured crossover: at 16384 the 3-stage kernel against itself read 0.986x (call 6), as
//   far from 1 as the 2-stage tile; long rows keep the kernel they ran before.
// - e4m3 D = 128: 2x128 below 2048 keys (above).
// - D = 256: 2x64 s2 instead of 2x80 s2 below 8192 keys. H100, 2026-12-07, one process
//   (dev/cuda/ab.py, every span on 2x64 against main, bench/results/h100-2026-12-07-s49.txt call 1),
//   S = 512 / 1024 / 2048 / 4096 / 8192 / 16384: 1.049 / 1.015 / 1.014 / 1.011 / 1.000 / 0.991x,
//   causal 1.034 / 1.048 / 1.015 / 1.007 / 1.003 / 1.000x (a 64-key block wastes less of a short
//   row's last block; the longer rows want the fewer, larger blocks of 2x80).
static constexpr int flashc_cuda_fwd_sm90_short_keys(int D, bool fp8, bool causal) {
    return fp8 ? (D <= 128 ? 2048 : 0) : D <= 64 ? (causal ? 4096 : 0) : 8192; // D = 128 and 256
}
// Stream-K tail of the persistent forward (sm90_fwd_piece): split the last rounds' tiles only where a
// tile sees at least this many keys (causal pairs: Sk / 2 on average). Each piece of a split tile
// costs its partial O_i, m_i, l_i stores, a release, a merge and a Q_i load, which short tiles do not
// win back. H200, one process, every splittable problem split against main (dev/cuda/ab.py,
// bench/results/h200-2026-12-04-s28.txt call 1), S = 512 / 1024 / 2048 / 4096 / 16384: non-causal
// D = 64 0.99 / 1.02 / 1.02 / 1.03 / 1.02x, D = 128 0.96 / 0.99 / 1.01 / 1.02 / 1.03x, D = 256
// 0.88 / 0.93 / 0.97 / 0.99 / 1.02x, e4m3 D = 128 0.96 / 0.98 / 1.02 / 1.02 / 1.03x, e4m3 D = 256
// 0.88 / 0.92 / 0.96 / 1.00 / 1.02x; causal pairs D = 64 0.96-0.97x (S <= 2048), D = 128 0.94 /
// 0.96 / 0.99 / 1.00 / 1.02x, e4m3 D = 128 0.94 / 0.95x (S <= 1024), e4m3 D = 256 0.84 / 0.90 /
// 0.94 / 0.96 / 1.00x.
static constexpr int flashc_cuda_fwd_split_keys(int D) { return D <= 128 ? 2048 : 16384; }
// The sm90 backward's tail split (sm90_bwd_piece_of): key blocks seeing this many query rows and up.
// The forward's bound (flashc_cuda_fwd_split_keys). Above it, one process against the unsplit grid
// (H100 80GB HBM3, 2026-12-05, bench/results/h100-2026-12-05-s34-call1.txt, 9 rounds, bf16, hidden
// 2048, B * S = 16k): D = 128 non-causal 1.001 / 1.009 / 1.022 / 1.015 at S = 2k / 4k / 8k / 16k,
// D = 64 1.002-1.014; causal (never split) 0.993-1.000. Below it (S = 512 / 1024) not measured.
static constexpr int flashc_cuda_bwd_split_rows(int D) { return flashc_cuda_fwd_split_keys(D); }
static constexpr flashc_cuda_tile flashc_cuda_tune_fwd_sm90(int D, bool fp8 = false, bool short_rows = false) {
    return fp8        ? (D <= 128 ? (short_rows ? flashc_cuda_tile{128, 128, 8, 3, 0, 0, 0, 2} : flashc_cuda_tile{128, 192, 8, 3, 0, 0, 0, 2})
                                  : flashc_cuda_tile{128, 128, 8, 2, 0, 0, 0, 2})
         : D <= 64   ? (short_rows ? flashc_cuda_tile{128, 128, 8, 3, 0, 0, 0, 2} : flashc_cuda_tile{192, 128, 12, 3, 0, 0, 0, 2})
         : D <= 128  ? (short_rows ? flashc_cuda_tile{128, 128, 8, 2, 0, 0, 0, 2} : flashc_cuda_tile{128, 128, 8, 3, 0, 0, 0, 2})
                     : (short_rows ? flashc_cuda_tile{128, 64, 8, 2, 0, 0, 0, 2} : flashc_cuda_tile{128, 80, 8, 2, 0, 0, 0, 2});
}

// bf16/f16 varlen and seqused_k problems on the TMA kernel (its RAGGED instance, query blocks
// paired per sequence) against the cp.async kernel they ran before, H200, one process
// (dev/cuda/ab.py --varlen, bench/results/h200-2026-12-03-s21.txt call 6): 16k tokens in sequences
// of S / 2 .. 3 S / 2 keys, S ~ 512 / 2048 / 8192: non-causal D = 64 1.20 / 1.42 / 1.54x, D = 128
// 0.96 / 1.23 / 1.30x, D = 256 1.07 / 1.25 / 1.48x; causal D = 64 1.01 / 1.02 / 1.42x, D = 128
// 1.01 / 1.02 / 1.17x, D = 256 1.09 / 1.10 / 1.24x. Non-causal D = 128 below 1024 keys (0.96-0.98x
// in four runs, calls 3-6) keeps the cp.async kernel; 1024 lies between the measured points (sequences
// of at most 768 and at least ~1024 keys), it is not a measured crossover. seqused_k: not measured.
static constexpr bool flashc_cuda_fwd_sm90_ragged_tma(int D, bool causal, int max_sk) {
    return !(D == 128 && !causal && max_sk < 1024);
}

// The loop of the problems the TMA kernel does not take (2026-11-29, same lab, S = 4096,
// non-causal / causal TFLOP/s): ping-pong for D <= 128 (D = 128: 460/419 against lockstep
// 389/358), lockstep for D = 256 (467/406 against ping-pong 398/387).
static constexpr int flashc_cuda_fwd_sm90_fallback(int D) { return D <= 128 ? 1 : 0; }
// Their key block: the tile's, but 128 for e4m3 (they write V^T in 128-byte column blocks only).
static constexpr int flashc_cuda_fwd_sm90_fallback_bn(int bn, bool fp8) { return fp8 ? 128 : bn; }
// Their stages: 3 at D <= 128, the depth they were measured with (the TMA kernel's 2 at D = 128
// are for its O tile, which the cp.async loops do not have).
static constexpr int flashc_cuda_fwd_sm90_fallback_stages(int D, int stages) { return D <= 128 ? 3 : stages; }

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

// The sm90 backward grids' causal tail (grid_tail_lpt): the last this many waves of CTAs (one an
// SM) start their longest blocks first, on grids where a wave holds min_heads heads or more. H200,
// against heads outer throughout, one process (bench/results/h200-2026-12-04-s30.txt):
// causal 1.01-1.05x where a head has 8-64 key blocks (call 3, atomic dQ: D = 64 1.01-1.02x at
// S = 1k-8k, D = 128 1.03-1.05x at 1k-8k, D = 256 1.04-1.05x at 1k-4k; deterministic: D = 64
// 1.00x, D = 128 / 256 1.03-1.05x); ungated, 0.98-1.00x where it has 128 or more (S = 16k, D = 256
// at 8k; calls 1-2), where the model gains < 0.5%: off there.
static constexpr int flashc_cuda_bwd_lpt_waves = 2;
static constexpr int flashc_cuda_bwd_lpt_min_heads = 2;

// Dynamic shared memory (bytes) of each kernel; rows are padded to D + 8 elements.
static constexpr int flashc_cuda_fwd_smem(int D) {
    return (flashc_cuda_tune_fwd(D).bm + 2 * flashc_cuda_tune_fwd(D).stages * flashc_cuda_tune_fwd(D).bn) * (D + 8) * 2;
}

// + 1024: manual 1024-byte alignment, + 256: mbarriers and the persistent forward's two tile
// records; the Q region is 2 bytes per element for every input type (it stages the bf16/f16 O_i)
static constexpr int flashc_cuda_fwd_sm90_smem_of(int bm, int bn, int stages, int D, int es) {
    return 1024 + bm * D * 2 + 2 * stages * bn * D * es + 256;
}
// The persistent forward stages O_i in shared memory for a TMA store where the CTA has room for
// it beside Q and the rings (227 KB, every sm_90 part): bm * D bf16 more, else 0 (its consumers
// store from registers). Tuned tiles with room: D = 64, D = 128 (2 stages), e4m3 D = 128.
static constexpr int flashc_cuda_fwd_sm90_o_bytes(int bm, int bn, int stages, int D, int es) {
    return flashc_cuda_fwd_sm90_smem_of(bm, bn, stages, D, es) + bm * D * 2 <= 227 * 1024 ? bm * D * 2 : 0;
}
static constexpr int flashc_cuda_fwd_sm90_smem_tile(flashc_cuda_tile t, int D, bool fp8) {
    return flashc_cuda_fwd_sm90_smem_of(t.bm, t.bn, t.stages, D, fp8 ? 1 : 2) +
           (t.pingpong == 2 ? flashc_cuda_fwd_sm90_o_bytes(t.bm, t.bn, t.stages, D, fp8 ? 1 : 2) : 0);
}
// the largest of the long- and short-row tiles and the cp.async loops
static constexpr int flashc_cuda_fwd_sm90_smem(int D, bool fp8 = false) {
    const int n = flashc_cuda_fwd_sm90_smem_tile(flashc_cuda_tune_fwd_sm90(D, fp8, false), D, fp8);
    const int c = flashc_cuda_fwd_sm90_smem_tile(flashc_cuda_tune_fwd_sm90(D, fp8, true), D, fp8);
    const flashc_cuda_tile t = flashc_cuda_tune_fwd_sm90(D, fp8, false); // the cp.async loops: 2 warpgroups
    const int f = flashc_cuda_fwd_sm90_smem_of(128, flashc_cuda_fwd_sm90_fallback_bn(t.bn, fp8),
                                               flashc_cuda_fwd_sm90_fallback_stages(D, t.stages), D, fp8 ? 1 : 2);
    return n > c ? (n > f ? n : f) : (c > f ? c : f);
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
