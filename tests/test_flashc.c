// test_flashc.c -- the accuracy sweep of flashc: every compiled-in, available backend against the
// fp64 reference, forward (O and LSE) and backward (dQ, dK, dV), plus checks of the reference itself.
//
// What it checks, per case (a table built by build_cases(), one line per failure, -v for all):
//   - O, LSE, dQ, dK, dV against flashc__ref_fwd_f64 / flashc__ref_bwd_f64 run on the same rounded
//     inputs, by DESIGN.md §2:
//       f32       |x - ref| <= atol + rtol * |ref| element-wise, atol = rtol = 1e-5 (TOL_* below);
//                 where a naive fp32 attention (naive_lowp() in f32) itself errs by more -- large
//                 logits, e.g. scale 1.5 at D = 32, put ~3.5e-5 into a plain fp32 dQ -- atol is
//                 raised to 2x (3x for gradients) that naive error, FA2's yardstick;
//       f16/bf16  FlashAttention-2's rule: max|x - ref| <= 2 * max|naive - ref| + 1e-5 (3x for the
//                 gradients), naive = naive_lowp() below, a straightforward attention in the dtype;
//                 in both rules max|naive - ref| is the larger of naive_lowp's two forms (autograd's,
//                 and FA2's formulation given the backend's own O and LSE: see there);
//       LSE       fp32 in every dtype: |x - ref| <= 1e-5 + 1e-5 * |ref|;
//   - rows that see no key: O exactly 0, LSE exactly +inf, dQ exactly 0; keys no query sees (masked,
//     past seqused_k): dK = dV = 0 exactly;
//   - outputs are poisoned with NaN before each call (an unwritten element fails), the gaps of
//     strided / packed layouts and guard zones around LSE must be left byte-for-byte untouched, and
//     inputs must not change;
// and, once: a finite-difference check of the fp64 reference's backward, bit-identical backward
// runs with deterministic = 1, and a CPU forward that does not depend on the thread count.
//
// Usage: build/test_flashc [--backend cpu|cuda|ref] [--quick] [--filter STR] [--seed N] [--fuzz N] [-v]
//   default backends: cpu, cuda (when compiled in and a device is present; staged through
//   ctx->ops->ws_alloc / copy), and the REF backend on the --quick subset of cases.
//   --filter STR runs the case lines containing STR ("bwd cpu bf16", "varlen", "D=256" ...).
//   --fuzz N runs N random cases drawn from --seed (fuzz_cases) instead of the table, and none of
//   the one-off checks: `for s in 1 2 3; do build/test_flashc --fuzz 300 --seed $s; done`.
//   The last line is "N passed, M failed"; the exit status is nonzero on any failure.
#include "test_common.h"
#include "cpu/flashc_cpu.h" // FLASHC_CPU_FWD_BR: unseen_inf_v_check aims at the CPU's query block edge

#include <time.h>

// ------------------------------------------------------------------------------------------------
// tolerances (DESIGN.md §2), stated once

#define TOL_F32_O_ATOL 1e-5    // f32 O: |x - ref| <= 1e-5 + 1e-5 |ref|
#define TOL_F32_O_RTOL 1e-5
#define TOL_F32_G_ATOL 1e-5    // f32 dQ, dK, dV: same form
#define TOL_F32_G_RTOL 1e-5
#define TOL_LSE_ATOL 1e-5      // LSE (fp32 in every dtype)
#define TOL_LSE_RTOL 1e-5
#define LOWP_FWD_FACTOR 2.0    // f16/bf16: max err <= factor * naive max err + LOWP_SLACK
#define LOWP_BWD_FACTOR 3.0
#define LOWP_SLACK 1e-5

// ------------------------------------------------------------------------------------------------
// cases

#define MAXB 8

enum { L_CONTIG, L_PADDED, L_ODD, L_BHSD, L_PACKED };
static const char *LAYOUT_NAME[] = {"", "padded", "odd-strides", "bhsd", "packed-qkv"};

typedef struct tcase {
    int B, H, Hkv, Sq, Sk, D;    // Sq, Sk: the bounds passed in the desc in varlen mode
    flashc_dtype dt;
    int causal, win, wl, wr;     // win = use_window
    float softcap, scale;        // 0 = off / default
    int alibi;                   // 0 off, 1 per head, 2 per (batch, head), 3 per (batch, head) with stride H + 2
    int layout;
    int varlen;                  // lengths in lq / lk
    int32_t lq[MAXB], lk[MAXB];
    int used;                    // seqused_k in uk
    int32_t uk[MAXB];
    int q0, k0;                  // varlen: rows before the first sequence (cu_seqlens_*[0]), owned by none
    int quick;                   // in the --quick subset
} tcase;

static tcase g_cases[1024];
static int g_ncases;
static uint64_t g_seed = 1; // --seed: the inputs of case i come from (seed, i)

static tcase mk(int B, int H, int Hkv, int Sq, int Sk, int D, flashc_dtype dt) {
    tcase c;
    memset(&c, 0, sizeof c);
    c.B = B, c.H = H, c.Hkv = Hkv, c.Sq = Sq, c.Sk = Sk, c.D = D, c.dt = dt;
    return c;
}

static double case_cost(const tcase *c) { // multiply-adds of one pass over S: B * H * Sq * Sk * D
    double pairs = 0;
    if (c->varlen)
        for (int b = 0; b < c->B; b++) pairs += (double)c->lq[b] * c->lk[b];
    else
        pairs = (double)c->B * c->Sq * c->Sk;
    return pairs * c->H * c->D;
}

static void add(tcase c) {
    if (g_ncases == (int)(sizeof g_cases / sizeof g_cases[0])) {
        fprintf(stderr, "test_flashc: too many cases\n");
        exit(2);
    }
    if (c.varlen) { // the desc's seqlen_q / seqlen_k are upper bounds: the max, or more for odd cases
        int mq = 0, mk_ = 0;
        for (int b = 0; b < c.B; b++) {
            if (c.lq[b] > mq) mq = c.lq[b];
            if (c.lk[b] > mk_) mk_ = c.lk[b];
        }
        c.Sq = mq + (g_ncases % 2) * 3;
        c.Sk = mk_ + (g_ncases % 2) * 5;
    }
    // --quick: a spread of cheap cases (every feature block contributes), for sanitizers
    if (case_cost(&c) <= 1.2e6 && g_ncases % 3 == 0) c.quick = 1;
    g_cases[g_ncases++] = c;
}

static const flashc_dtype DT3[3] = {FLASHC_DTYPE_F32, FLASHC_DTYPE_BF16, FLASHC_DTYPE_F16};

static void set_varlen(tcase *c, int B, const int *lq, const int *lk) {
    c->B = B;
    c->varlen = 1;
    for (int b = 0; b < B; b++) c->lq[b] = lq[b], c->lk[b] = lk[b];
}

// n mixed cases: random heads, lengths, head dims, dtypes, masks, softcap, ALiBi, scale, layouts,
// varlen with seqused_k. WIDE (--fuzz) draws lengths 1..400, D any multiple of 8 up to 256,
// batches up to 6 (varlen 8) and windows to 400; the table's 110 draw from short lists (and must
// keep their draws: the inputs of a case depend on its index).
static void mixed_cases(tc_rng *r, int n, int wide) {
    static const int HH[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {4, 4}, {6, 3}, {8, 2}, {8, 1}};
    static const int SR[] = {1, 2, 15, 16, 17, 31, 63, 64, 65, 100, 127, 128, 129, 200};
    static const int DR[] = {8, 16, 32, 64, 80, 96, 128, 256};
#define S_DRAW() (wide ? 1 + tc_int(r, 400) : SR[tc_int(r, 14)])
    for (int k = 0; k < n;) {
        int hh = tc_int(r, 8);
        // (drawn last to first: the order gcc evaluated mk's arguments in when the table was written)
        const flashc_dtype dt = DT3[tc_int(r, 3)];
        const int D = wide ? 8 * (1 + tc_int(r, 32)) : DR[tc_int(r, 8)];
        const int Sk = S_DRAW(), Sq = S_DRAW(), B = 1 + tc_int(r, wide ? 6 : 3);
        tcase c = mk(B, HH[hh][0], HH[hh][1], Sq, Sk, D, dt);
        c.causal = tc_int(r, 2);
        if (tc_int(r, 4) == 0)
            c.win = 1, c.wl = tc_int(r, 3) ? tc_int(r, wide ? 400 : 40) : -1, c.wr = tc_int(r, 2) ? tc_int(r, wide ? 200 : 20) : -1;
        if (tc_int(r, 4) == 0) c.softcap = (float)(1 + tc_int(r, 30));
        if (tc_int(r, 4) == 0) c.alibi = 1 + tc_int(r, 3);
        if (tc_int(r, 5) == 0) c.scale = (float)(0.02 + 0.5 * tc_uniform(r));
        c.layout = tc_int(r, 3) ? L_CONTIG : 1 + tc_int(r, 3);
        if (tc_int(r, 4) == 0) {
            int Bv = 1 + tc_int(r, wide ? MAXB : 4), lq[MAXB], lk[MAXB];
            for (int b = 0; b < Bv; b++) {
                const int sq = S_DRAW(); // (this order too)
                lq[b] = sq * (wide ? tc_int(r, 4) != 0 : tc_int(r, 2)), lk[b] = S_DRAW(); // (wide: 1 in 4 empty)
            }
            set_varlen(&c, Bv, lq, lk);
            if (tc_int(r, 2)) {
                c.used = 1;
                for (int b = 0; b < Bv; b++) c.uk[b] = tc_int(r, lk[b] + 3);
            }
            if (wide && tc_int(r, 4) == 0) c.q0 = tc_int(r, 9), c.k0 = tc_int(r, 9); // (the table keeps its draws)
        }
#undef S_DRAW
        if (case_cost(&c) > (wide ? 2e7 : 4e6)) continue;
        add(c);
        k++;
    }
}

static void build_cases(void) {
    static const int S_LIST[] = {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129};
    int nS = (int)(sizeof S_LIST / sizeof S_LIST[0]);

    // square sequence lengths, every dtype, causal and not
    for (int si = 0; si < nS; si++)
        for (int causal = 0; causal < 2; causal++)
            for (int t = 0; t < 3; t++) {
                tcase c = mk(1 + si % 2, 2, t == 1 ? 1 : 2, S_LIST[si], S_LIST[si], 64, DT3[t]);
                c.causal = causal;
                add(c);
            }

    // seqlen_q != seqlen_k both ways (causal with Sq > Sk has fully masked rows)
    static const int PAIRS[][2] = {{1, 2},   {2, 1},   {1, 17},  {17, 1},  {1, 129}, {129, 1}, {15, 64},
                                   {64, 15}, {16, 65}, {65, 16}, {17, 63}, {63, 17}, {63, 128}, {128, 63},
                                   {65, 127}, {127, 65}, {2, 129}, {129, 2}};
    static const int DS4[] = {32, 64, 96, 128};
    for (int pi = 0; pi < (int)(sizeof PAIRS / sizeof PAIRS[0]); pi++)
        for (int causal = 0; causal < 2; causal++) {
            tcase c = mk(2, 4, 2, PAIRS[pi][0], PAIRS[pi][1], DS4[pi % 4], DT3[(pi + causal) % 3]);
            c.causal = causal;
            add(c);
        }

    // long sequences (1000) with small H and D: the reference is O(N^2 D) in fp64; the last two's
    // rows see >= 4096 / 8192 keys, where causal D = 64 and D = 128 take their long-row Hopper tiles
    static const int LONG[][4] = {{1000, 1000, 8, 0}, {1000, 1000, 8, 1},  {1000, 1000, 32, 1}, {1000, 17, 16, 0},
                                  {1000, 17, 16, 1},  {17, 1000, 32, 0},   {17, 1000, 32, 1},   {1000, 1, 8, 1},
                                  {1, 1000, 64, 0},   {1000, 129, 32, 1}, {129, 1000, 16, 0},  {300, 4100, 64, 1}};
    for (int li = 0; li < (int)(sizeof LONG / sizeof LONG[0]); li++) {
        tcase c = mk(1, li % 2 ? 2 : 1, 1, LONG[li][0], LONG[li][1], LONG[li][2], DT3[li % 3]);
        c.causal = LONG[li][3];
        add(c);
    }
    {
        tcase c = mk(1, 1, 1, 200, 8200, 128, FLASHC_DTYPE_BF16); // (the CUDA backend has no fp32)
        add(c);
    }

    // head dims: the GPU set, two above 256, and odd ones (any head_dim on the CPU)
    static const int DS[] = {8, 32, 64, 96, 128, 256, 320, 512};
    for (int di = 0; di < (int)(sizeof DS / sizeof DS[0]); di++)
        for (int t = 0; t < 3; t++) {
            tcase c = mk(2, 4, 2, 65, 129, DS[di], DT3[t]);
            c.causal = (di + t) % 2;
            add(c);
        }
    static const int DODD[] = {1, 5, 13, 40, 72, 80, 160, 192, 224};
    for (int di = 0; di < (int)(sizeof DODD / sizeof DODD[0]); di++) {
        tcase c = mk(1, 3, 1, 33, 47, DODD[di], DT3[di % 3]);
        c.causal = di % 2;
        add(c);
    }

    // head dim 256 beyond the block above: several key and query blocks of 64 (the Hopper backward
    // splits the head dim over its warpgroups here) with GQA, MQA, Sq != Sk both ways, a window,
    // softcap with ALiBi, a single query or key, a padded head dim and exact block multiples
    {
        static const int D256[][7] = {// B, H, H_kv, Sq, Sk, D, causal
                                      {2, 4, 2, 129, 200, 256, 1}, {1, 4, 1, 200, 129, 256, 1}, {1, 2, 2, 150, 150, 256, 0},
                                      {2, 2, 1, 97, 97, 256, 1},   {1, 2, 2, 1, 300, 256, 0},   {1, 2, 1, 300, 1, 256, 1},
                                      {1, 3, 3, 130, 70, 200, 0},  {3, 2, 2, 128, 128, 256, 1}};
        for (int i = 0; i < 8; i++) {
            tcase c = mk(D256[i][0], D256[i][1], D256[i][2], D256[i][3], D256[i][4], D256[i][5], DT3[1 + i % 2]);
            c.causal = D256[i][6];
            if (i == 2) c.win = 1, c.wl = 30, c.wr = 5;
            if (i == 3) c.softcap = 30.0f, c.alibi = 1;
            add(c);
        }
        // what the Hopper D = 256 kernels leave to the mma.sync ones (varlen, seqused_k, strides that
        // rule out 16-byte access), which then run their deterministic dQ kernel: no dQ accumulator
        // is reserved for head dim 256 on Hopper
        static const int lq[] = {70, 1, 129}, lk[] = {130, 64, 2};
        tcase c = mk(0, 4, 2, 0, 0, 256, FLASHC_DTYPE_BF16);
        set_varlen(&c, 3, lq, lk);
        c.causal = 1;
        add(c);
        c = mk(2, 2, 1, 100, 90, 256, FLASHC_DTYPE_F16);
        c.layout = L_ODD;
        add(c);
        c = mk(2, 2, 2, 65, 140, 256, FLASHC_DTYPE_BF16);
        c.used = 1, c.uk[0] = 100, c.uk[1] = 7;
        add(c);
    }

    // GQA 8/2 and MQA 8/1
    for (int g = 0; g < 2; g++)
        for (int t = 0; t < 3; t++)
            for (int causal = 0; causal < 2; causal++) {
                tcase c = mk(2, 8, g ? 1 : 2, causal ? 129 : 65, causal ? 65 : 129, 64, DT3[t]);
                c.causal = causal;
                add(c);
            }

    // batch > 1
    for (int t = 0; t < 3; t++) {
        tcase c = mk(4, 2, 2, 33, 33 + 16 * t, 32, DT3[t]);
        c.causal = t != 1;
        add(c);
    }

    // masks: sliding windows (left only, right only, both, empty-ish), on three shapes
    static const int WIN[][3] = {{16, -1, 0}, {-1, 8, 0}, {8, 4, 0}, {0, 0, 0},  {0, -1, 0},
                                 {-1, 0, 0},  {10, -1, 1}, {3, 3, 0}, {200, 200, 0}};
    static const int WSHAPE[][2] = {{129, 129}, {129, 65}, {65, 129}};
    for (int wi = 0; wi < (int)(sizeof WIN / sizeof WIN[0]); wi++)
        for (int si = 0; si < 3; si++) {
            tcase c = mk(2, 2, 1, WSHAPE[si][0], WSHAPE[si][1], 32, DT3[(wi + si) % 3]);
            c.win = 1, c.wl = WIN[wi][0], c.wr = WIN[wi][1], c.causal = WIN[wi][2];
            add(c);
        }
    // three query blocks of 128 rows (an odd count: the persistent Hopper forward pairs blocks 2 and
    // 0, and runs block 1 alone) under causal and a left-only window, at the compiled head dims
    // (gpu.sh runs the sweep again with FLASHC_CUDA_CTAS=3, where these take the paired order)
    static const int ODDM[][3] = {{64, 1, -1}, {128, 1, -1}, {256, 1, -1}, {128, 0, 100}};
    for (int i = 0; i < 4; i++) {
        tcase c = mk(1, 2, 1, 300, 300, ODDM[i][0], DT3[1 + i % 2]);
        c.causal = ODDM[i][1];
        if (ODDM[i][2] >= 0) c.win = 1, c.wl = ODDM[i][2], c.wr = -1;
        add(c);
    }

    // the Hopper forward's stream-K tail (sm90_fwd_piece): more work items than CTAs and not a
    // multiple of them, so that the last rounds' tiles split between two CTAs and merge. Items: 24
    // tiles of 128 rows (D = 128), 20 of 192 rows (D = 64), 12 causal pairs of 128-row blocks (M = 4,
    // GQA), 20 tiles at D = 256 (GQA), 20 causal pairs at D = 64 (M = 8): all split on gpu.sh's 7-CTA
    // run with FLASHC_CUDA_SPLIT_KEYS=0. The sixth, in the --quick subset, splits its third tile of
    // two key blocks on the sanitizers' 3-CTA run (4 tiles: CTA runs of 2, 3 and 3 key blocks).
    static const int SPLIT[][6] = {// B, H, H_kv, S, D, causal
                                   {1, 3, 3, 1000, 128, 0}, {1, 5, 5, 700, 64, 0}, {2, 3, 1, 512, 128, 1},
                                   {1, 4, 2, 600, 256, 0}, {1, 5, 5, 1000, 64, 1}};
    for (int i = 0; i < 5; i++) {
        tcase c = mk(SPLIT[i][0], SPLIT[i][1], SPLIT[i][2], SPLIT[i][3], SPLIT[i][3], SPLIT[i][4], DT3[1 + i % 2]);
        c.causal = SPLIT[i][5];
        add(c);
    }
    {
        tcase c = mk(2, 2, 2, 32, 200, 32, FLASHC_DTYPE_BF16);
        c.quick = 1;
        add(c);
    }

    // the Hopper backward's causal tail (grid_tail_lpt): heads outer, then the last heads block
    // outer. The default grid takes these small grids block outer whole; gpu.sh's 7-CTA run reaches
    // the mixed order: 8 (batch, kv head)s of 2 key blocks (3 at D = 256) plan a tail of 7 heads (5),
    // and the dQ kernel's (the deterministic mode; both at D = 256) 16 heads of 3 query blocks one of
    // 5. Each D in both modes. (The 3-CTA run plans no tail: a wave of 3 holds 2 heads of 1 block.)
    for (int i = 0; i < 6; i++) {
        tcase c = mk(2, 8, 4, 190, 190, 64 << (i / 2), DT3[1 + i % 2]);
        c.causal = 1;
        add(c);
    }

    // fully masked rows: causal or a right window with Sq > Sk, no keys at all, no queries at all
    static const int MASKED[][5] = {{64, 16, 1, -1, -1}, {100, 10, 0, 2, 0}, {129, 1, 1, -1, -1}, {17, 0, 0, -1, -1},
                                    {17, 0, 1, -1, -1},  {0, 17, 0, -1, -1}, {0, 17, 1, -1, -1},  {0, 0, 0, -1, -1},
                                    {65, 64, 0, -1, 0},  {100, 20, 0, 5, 3}};
    for (int mi = 0; mi < (int)(sizeof MASKED / sizeof MASKED[0]); mi++) {
        tcase c = mk(2, 2, 2, MASKED[mi][0], MASKED[mi][1], 64, DT3[mi % 3]);
        c.causal = MASKED[mi][2];
        if (MASKED[mi][3] != -1 || MASKED[mi][4] != -1) c.win = 1, c.wl = MASKED[mi][3], c.wr = MASKED[mi][4];
        add(c);
    }

    // softcap x ALiBi (per head, per (batch, head), with a padded batch stride) x causal
    for (int alibi = 0; alibi < 4; alibi++)
        for (int sc = 0; sc < 2; sc++)
            for (int causal = 0; causal < 2; causal++) {
                tcase c = mk(2, 4, 2, causal ? 97 : 65, 97, 64, DT3[(alibi + sc + causal) % 3]);
                c.causal = causal;
                if (sc) c.softcap = alibi % 2 ? 30.0f : 2.0f, c.scale = alibi % 2 ? 0.0f : 1.0f;
                c.alibi = alibi;
                if (alibi == 0 && !sc) c.softcap = 10.0f; // the first of the block: softcap alone
                add(c);
            }
    // ALiBi with Sq != Sk (large distances) and a window
    for (int t = 0; t < 3; t++) {
        tcase c = mk(2, 4, 4, 200, 33, 32, DT3[t]);
        c.alibi = 1 + t % 3;
        c.win = t == 2, c.wl = 20, c.wr = 3;
        add(c);
    }
    // custom scales
    static const float SCALES[] = {0.05f, 0.3f, 1.5f};
    for (int si = 0; si < 3; si++)
        for (int t = 0; t < 3; t++) {
            tcase c = mk(1, 2, 2, 77, 91, 32, DT3[t]);
            c.scale = SCALES[si];
            c.causal = si == 1;
            add(c);
        }

    // varlen, ragged lengths including 0 and 1
    {
        static const int lq[] = {0, 1, 17, 64, 33}, lk[] = {1, 0, 65, 64, 100};
        for (int t = 0; t < 3; t++)
            for (int causal = 0; causal < 2; causal++) {
                tcase c = mk(0, 4, 2, 0, 0, 64, DT3[t]);
                set_varlen(&c, 5, lq, lk);
                c.causal = causal;
                add(c);
            }
    }
    { // decode-like: one query per sequence
        static const int lq[] = {1, 1, 1, 1}, lk[] = {100, 3, 0, 50};
        for (int t = 0; t < 3; t++) {
            tcase c = mk(0, 8, 1, 0, 0, 128, DT3[t]);
            set_varlen(&c, 4, lq, lk);
            c.causal = t == 1;
            add(c);
        }
    }
    { // ragged few queries a sequence (0-4, keys fewer than the queries, none, many; seqused_k): on CUDA
      // each query row runs as a decode sequence of its own where the mask allows (causal, with a left
      // window, per-head ALiBi, softcap; no mask), else the forward kernels (per-sequence ALiBi, a right
      // window, ALiBi or a left window without causal)
        static const int lq[] = {1, 3, 0, 4, 2, 1}, lk[] = {100, 2, 5, 300, 0, 1}, uk[] = {90, 2, 5, 260, 0, 0};
        for (int t = 0; t < 3; t++)
            for (int v = 0; v < 7; v++) {
                tcase c = mk(0, v == 1 ? 4 : 8, v == 1 ? 1 : 2, 0, 0, v == 2 ? 64 : 128, DT3[t]);
                set_varlen(&c, 6, lq, lk);
                c.causal = v != 1 && v < 4;
                if (v == 2) {
                    c.win = 1, c.wl = 20, c.wr = -1, c.alibi = 1, c.softcap = 3.0f, c.used = 1;
                    for (int b = 0; b < 6; b++) c.uk[b] = uk[b];
                }
                if (v == 3) c.alibi = 2, c.softcap = 5.0f;
                if (v == 4) c.win = 1, c.wl = 30, c.wr = 3;
                if (v == 5) c.alibi = 1;
                if (v == 6) c.win = 1, c.wl = 50, c.wr = -1;
                add(c);
            }
    }
    { // seqused_k, including 0 and a cap above the length (no effect)
        static const int lq[] = {65, 17, 33, 5}, lk[] = {65, 100, 17, 9}, uk[] = {70, 40, 0, 9};
        for (int t = 0; t < 3; t++)
            for (int causal = 0; causal < 2; causal++) {
                tcase c = mk(0, 2, 1, 0, 0, 32, DT3[t]);
                set_varlen(&c, 4, lq, lk);
                c.used = 1;
                for (int b = 0; b < 4; b++) c.uk[b] = uk[b];
                c.causal = causal;
                add(c);
            }
    }
    { // varlen with a window, ALiBi per (batch, head) and softcap
        static const int lq[] = {40, 0, 129}, lk[] = {60, 7, 100};
        for (int t = 0; t < 3; t++) {
            tcase c = mk(0, 4, 2, 0, 0, 64, DT3[t]);
            set_varlen(&c, 3, lq, lk);
            c.win = 1, c.wl = 8, c.wr = 4, c.alibi = 2, c.softcap = 5.0f;
            add(c);
        }
    }
    { // varlen in strided layouts
        static const int lq[] = {31, 1, 64}, lk[] = {2, 50, 64};
        static const int lays[] = {L_PADDED, L_ODD, L_BHSD};
        for (int li = 0; li < 3; li++) {
            tcase c = mk(0, 4, 2, 0, 0, 32, DT3[li]);
            set_varlen(&c, 3, lq, lk);
            c.layout = lays[li];
            c.causal = li != 1;
            add(c);
        }
    }
    { // packed QKV in varlen mode (same offsets for q and k/v)
        static const int l[] = {129, 64, 2};
        for (int t = 0; t < 2; t++)
            for (int causal = 0; causal < 2; causal++) {
                tcase c = mk(0, 4, 2, 0, 0, 64, DT3[t]);
                set_varlen(&c, 3, l, l);
                c.layout = L_PACKED;
                c.causal = causal;
                add(c);
            }
    }
    // seqused_k in batch mode
    for (int t = 0; t < 3; t++) {
        tcase c = mk(3, 2, 2, 33, 65, 32, DT3[t]);
        c.used = 1, c.uk[0] = 65, c.uk[1] = 10, c.uk[2] = 0;
        c.causal = t != 0;
        add(c);
    }

    // non-contiguous layouts: packed QKV (B, S, H + 2 H_kv, D), padded strides, odd (unaligned)
    // strides, (B, H, S, D)
    for (int lay = L_PADDED; lay <= L_PACKED; lay++)
        for (int t = 0; t < 3; t++) {
            tcase c = mk(2, 4, 2, 65, 65, 64, DT3[t]);
            c.layout = lay;
            c.causal = t != 1;
            add(c);
            if (lay != L_PACKED) {
                c.Sq = 33, c.Sk = 129, c.causal = !c.causal;
                add(c);
            }
        }

    // small packed cases for the --quick subset (sanitizers), batch and varlen
    for (int t = 0; t < 2; t++) {
        tcase c = mk(2, 2, 1, 33, 33, 32, DT3[t]);
        c.layout = L_PACKED, c.causal = t, c.quick = 1;
        add(c);
        static const int l[] = {17, 0, 9};
        c = mk(0, 2, 2, 0, 0, 16, DT3[2 - t]);
        set_varlen(&c, 3, l, l);
        c.layout = L_PACKED, c.causal = !t, c.alibi = 1 + t, c.quick = 1;
        add(c);
    }

    // mixed cases from a fixed seed (the case list does not depend on --seed)
    tc_rng r = tc_rng_make(12345, 777);
    mixed_cases(&r, 110, 0);

    // varlen with rows before the first sequence (cu_seqlens_q[0], cu_seqlens_k[0] > 0): owned by
    // none, so o = 0, lse = +inf, dq = dk = dv = 0 there (flashc.h); after the mixed cases, whose
    // inputs depend on their index
    {
        static const int lq[] = {17, 130, 1}, lk[] = {40, 200, 0};
        for (int t = 0; t < 3; t++)
            for (int causal = 0; causal < 2; causal++) {
                tcase c = mk(0, 4, 2, 0, 0, t ? 64 : 40, DT3[t]);
                set_varlen(&c, 3, lq, lk);
                c.q0 = 5 + causal, c.k0 = 9 - causal, c.causal = causal;
                if (t == 2) c.layout = L_PADDED;
                add(c);
            }
    }
    // the CPU backward's waves (BWD_WAVE_ROWS = 4096 query or key rows a wave, flashc_cpu.c): batch 3
    // of 2000 rows and varlen 5 x 1000 rows take two or more; nothing above reaches a second wave
    {
        tcase c = mk(3, 2, 1, 2000, 2000, 16, FLASHC_DTYPE_F32);
        add(c);
        c.dt = FLASHC_DTYPE_BF16, c.causal = 1;
        add(c);
        static const int l[] = {1000, 1000, 1000, 1000, 1000};
        c = mk(0, 2, 2, 0, 0, 16, FLASHC_DTYPE_F16);
        set_varlen(&c, 5, l, l);
        add(c);
    }
    // --quick (run_tests.sh's scalar and AVX2 runs, the sanitizers) also gets every dtype at the awkward
    // sizes and head dims past 256 and below 8: its own picks (every third cheap case) missed them
    for (int t = 0; t < 3; t++)
        for (int si = 0; si < 4; si++) {
            static const int S[4] = {1, 15, 17, 129}, Ds[4] = {1, 5, 320, 512};
            tcase c = mk(1, 2, 1, S[si], S[(si + 1) % 4], Ds[(si + t) % 4], DT3[t]);
            c.causal = si & 1;
            c.quick = 1;
            add(c);
        }
}

// The fuzz list (--fuzz N): N mixed cases drawn from --seed, with wider ranges (mixed_cases' WIDE),
// instead of the table.
static void fuzz_cases(int n) {
    tc_rng r = tc_rng_make(g_seed, 0xf022);
    mixed_cases(&r, n, 1);
}

static int case_desc(char *s, size_t n, const tcase *c) {
    int k = snprintf(s, n, "B=%d H=%d/%d Sq=%d Sk=%d D=%d", c->B, c->H, c->Hkv, c->Sq, c->Sk, c->D);
#define APPEND(...) k += snprintf(s + k, n > (size_t)k ? n - (size_t)k : 0, __VA_ARGS__)
    if (c->causal) APPEND(" causal");
    if (c->win) APPEND(" window=(%d,%d)", c->wl, c->wr);
    if (c->softcap > 0) APPEND(" softcap=%g", c->softcap);
    if (c->alibi) APPEND(" alibi=%s", c->alibi == 1 ? "head" : c->alibi == 2 ? "batch,head" : "batch,head/stride+2");
    if (c->scale > 0) APPEND(" scale=%g", c->scale);
    if (c->varlen) {
        APPEND(" varlen q=[");
        for (int b = 0; b < c->B; b++) APPEND("%s%d", b ? "," : "", c->lq[b]);
        APPEND("] k=[");
        for (int b = 0; b < c->B; b++) APPEND("%s%d", b ? "," : "", c->lk[b]);
        APPEND("]");
    }
    if (c->q0 || c->k0) APPEND(" unowned rows=(%d,%d)", c->q0, c->k0);
    if (c->used) {
        APPEND(" seqused_k=[");
        for (int b = 0; b < c->B; b++) APPEND("%s%d", b ? "," : "", c->uk[b]);
        APPEND("]");
    }
    if (c->layout) APPEND(" %s", LAYOUT_NAME[c->layout]);
#undef APPEND
    return k;
}

// ------------------------------------------------------------------------------------------------
// shapes and layouts

enum { T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV, T_N };
static const char *T_NAME[T_N] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
static int is_q(int t) { return t == T_Q || t == T_O || t == T_DO || t == T_DQ; }

typedef struct dims {
    int B, H, Hkv, Sq, Sk, D, varlen;
    int64_t tq, tk;                       // rows of q-like and k-like tensors (B*Sq, B*Sk in batch mode)
    int32_t cuq[MAXB + 1], cuk[MAXB + 1];
} dims;

static dims make_dims(const tcase *c) {
    dims m;
    memset(&m, 0, sizeof m);
    m.B = c->B, m.H = c->H, m.Hkv = c->Hkv, m.Sq = c->Sq, m.Sk = c->Sk, m.D = c->D, m.varlen = c->varlen;
    if (c->varlen) {
        m.cuq[0] = c->q0, m.cuk[0] = c->k0;
        for (int b = 0; b < c->B; b++) m.cuq[b + 1] = m.cuq[b] + c->lq[b], m.cuk[b + 1] = m.cuk[b] + c->lk[b];
        m.tq = m.cuq[c->B], m.tk = m.cuk[c->B];
    } else {
        m.tq = (int64_t)c->B * c->Sq, m.tk = (int64_t)c->B * c->Sk;
    }
    return m;
}

static int64_t t_rows(const dims *m, int t) { return is_q(t) ? m->tq : m->tk; }
static int64_t t_heads(const dims *m, int t) { return is_q(t) ? m->H : m->Hkv; }
static int64_t t_S(const dims *m, int t) { return is_q(t) ? m->Sq : m->Sk; }

// A typed tensor inside a buffer: element offset and strides [batch, seq, head]; head_dim contiguous.
typedef struct tview {
    int buf;
    int64_t off;
    int64_t st[3];
} tview;

typedef struct plan {
    tview v[T_N];
    int64_t buf_elems[T_N]; // 0 = buffer unused
    int explicit_strides;   // 0: the desc leaves strides zero (contiguous / "same as")
    int grad_same_as;       // 1: the desc leaves do/dq/dk/dv strides zero ("same as o/q/k/v")
} plan;

// Element index of logical (row r, head h, element d) in view v.
static int64_t view_idx(const tview *v, const dims *m, int t, int64_t r, int64_t h, int64_t d) {
    int64_t row = m->varlen ? r * v->st[1] : (r / t_S(m, t)) * v->st[0] + (r % t_S(m, t)) * v->st[1];
    return v->off + row + h * v->st[2] + d;
}

static void plan_view(plan *P, const dims *m, int t, int buf, int64_t off, int64_t s0, int64_t s1, int64_t s2) {
    tview *v = &P->v[t];
    v->buf = buf, v->off = off, v->st[0] = s0, v->st[1] = s1, v->st[2] = s2;
    int64_t end = off;
    if (t_rows(m, t) > 0) end = view_idx(v, m, t, t_rows(m, t) - 1, t_heads(m, t) - 1, m->D - 1) + 1;
    end += 32; // a guard zone past the last element: a write past the end lands in a checked gap
    if (end > P->buf_elems[buf]) P->buf_elems[buf] = end;
}

static void make_plan(const tcase *c, const dims *m, plan *P) {
    memset(P, 0, sizeof *P);
    int64_t D = m->D;
    P->explicit_strides = c->layout != L_CONTIG;
    P->grad_same_as = c->layout == L_PADDED;
    for (int t = 0; t < T_N; t++) {
        int64_t S = t_S(m, t), h = t_heads(m, t), rows = t_rows(m, t);
        int lay = c->layout;
        if (lay == L_PACKED && (t == T_O || t == T_DO)) lay = L_PADDED;
        switch (lay) {
        case L_CONTIG: plan_view(P, m, t, t, 0, S * h * D, h * D, D); break;
        case L_PADDED: {
            int64_t s2 = D + 8, s1 = h * s2 + 16; // pads of 8 / 16 / 24 elements keep 16-byte alignment
            plan_view(P, m, t, t, 8, S * s1 + 24, s1, s2);
            break;
        }
        case L_ODD: {
            int64_t s2 = D + 1, s1 = h * s2 + 3; // odd pads: rows start at every alignment
            plan_view(P, m, t, t, 1, S * s1 + 5, s1, s2);
            break;
        }
        case L_BHSD: {
            int64_t R = m->varlen ? rows : S; // (B, H, S, D): the head stride exceeds the seq stride
            plan_view(P, m, t, t, 0, h * S * D, D, R * D);
            break;
        }
        case L_PACKED: { // q, k, v in one (B, S, H + 2 H_kv, D) buffer, and dq, dk, dv likewise
            int64_t W = (int64_t)(m->H + 2 * m->Hkv) * D;
            int64_t off = (t == T_Q || t == T_DQ) ? 0 : (t == T_K || t == T_DK) ? m->H * D : (int64_t)(m->H + m->Hkv) * D;
            plan_view(P, m, t, t <= T_V ? T_Q : T_DQ, off, S * W, W, D);
            break;
        }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// the fp64 reference and the naive low-precision implementation, on logical contiguous arrays

typedef struct refdata {
    flashc_problem p;                   // contiguous logical layout, host pointers
    float *slopes;                      // ALiBi slopes (NULL when off)
    int64_t n_slopes;
    double *q, *k, *v, *dout;           // inputs, rounded to the dtype
    double *o, *lse, *dq, *dk, *dv;     // fp64 reference outputs
    double nv_err[4];                   // max |naive - ref| of o, dq, dk, dv: o the larger of naive_lowp's
                                        // two forms, the gradients the autograd form's (run_on adds FA2's)
    int nv_done;
    uint8_t *qdead, *kdead;             // per logical row: sees no key / seen by no query
    dims m;
} refdata;

static flashc_problem ref_problem(const tcase *c, const dims *m, const float *slopes) {
    flashc_problem p;
    memset(&p, 0, sizeof p);
    p.B = c->B, p.Sq = c->Sq, p.Sk = c->Sk, p.H = c->H, p.H_kv = c->Hkv, p.D = c->D;
    p.group = c->H / c->Hkv;
    p.dtype = c->dt;
    p.scale = c->scale != 0 ? c->scale : (float)(1.0 / sqrt((double)c->D));
    p.softcap = c->softcap;
    p.window_left = c->win ? c->wl : -1;
    p.window_right = c->causal ? 0 : c->win ? c->wr : -1;
    p.alibi_slopes = slopes;
    p.alibi_batch_stride = c->alibi == 2 ? c->H : c->alibi == 3 ? c->H + 2 : 0;
    p.varlen = c->varlen;
    p.total_q = m->tq, p.total_k = m->tk;
    int64_t D = c->D, hq = (int64_t)c->H * D, hk = (int64_t)c->Hkv * D;
    int64_t qs[3] = {c->varlen ? 0 : c->Sq * hq, hq, D}, ks[3] = {c->varlen ? 0 : c->Sk * hk, hk, D};
    memcpy(p.q_stride, qs, sizeof qs), memcpy(p.o_stride, qs, sizeof qs);
    memcpy(p.do_stride, qs, sizeof qs), memcpy(p.dq_stride, qs, sizeof qs);
    memcpy(p.k_stride, ks, sizeof ks), memcpy(p.v_stride, ks, sizeof ks);
    memcpy(p.dk_stride, ks, sizeof ks), memcpy(p.dv_stride, ks, sizeof ks);
    if (c->varlen) p.cu_q_host = m->cuq, p.cu_k_host = m->cuk;
    if (c->used) p.seqused_k_host = c->uk;
    return p;
}

static int64_t qrow(const flashc_problem *p, int b, const flashc_seq *s, int64_t i) {
    return p->varlen ? s->q_row0 + i : (int64_t)b * p->Sq + i;
}
static int64_t krow(const flashc_problem *p, int b, const flashc_seq *s, int64_t j) {
    return p->varlen ? s->k_row0 + j : (int64_t)b * p->Sk + j;
}

// Straightforward attention in dtype t, the way PyTorch's math path runs on f16/bf16 tensors:
// each matmul accumulates in fp32 and rounds its result to t; softcap, ALiBi and the softmax (and
// its backward) run in fp32 on t values and round their outputs to t. dK, dV are rounded per query
// head, then summed over the GQA group (the backward of repeat_interleave). For t = f32 this is a
// naive fp32 implementation (the yardstick where fp32 itself cannot reach 1e-5).
// FA2 = 1: the same, with the two choices of FlashAttention-2's equations that change what a
// precision can reach, so that the yardstick measures the kernels' tiling and not the formulation
// every FA2 kernel (FlashAttention's own too) shares:
//   - the backward's P_ij recomputed from the fp32 LSE it is given (LSE_GIVEN, Alg. 2 line 13: an
//     LSE of ~10 is ~1e-6 off in fp32, and every P_ij of its row is that much off relative: f32 dV
//     at D = 224 read 3.9e-5 against the autograd form's 6.7e-6);
//   - the softmax's backward sum D_i = rowsum(dO_i o O_i) (Alg. 2 line 4) from the O the backward
//     is given (O_GIVEN: the backend's own forward output, as the backward under test gets it; else
//     this function's rounded O), summed apart from dP_ij (here in the other order), instead of
//     sum_j P_ij dP_ij: with t = f16 and one query over 93 keys, O's rounding put 4.5x the autograd
//     form's error into dK (random test cases, --fuzz); where a row sees one key (P = 1), dS = dP -
//     D_i is exactly 0 in the autograd form, while two fp32 sums in different orders leave ~1e-5 ..
//     1e-4 in dK after hundreds of rows;
//   - scores in the log2 domain, scale log2 e and the ALiBi slope log2 e folded in as fp32
//     constants, and exp2: with ALiBi at distances of ~200 the scores are ~-90, and their rounding
//     error (~u 90) goes into every P;
//   - its dot products (S, dP) summed from the last column, so that the two forms' score errors
//     are two draws, not one: f32 scores of ~30 (scale 0.46 at D = 216) are ~1e-5 off after a
//     sequential fp32 sum in any order (an LSE off by 1.0-1.4e-5 in three naive orders, the CPU
//     tiles' 1.3e-5), and one draw's max O error read 6.1e-6 where the tiles' read 1.7e-5.
// The yardstick is the larger error of the two forms (ref_naive, run_on).
//   q, dout, o, dq: (rows_q, H, D); k, v, dk, dv: (rows_k, H_kv, D), logical contiguous; dq = dk =
//   dv = NULL: the forward only.
static void naive_lowp(const refdata *R, flashc_dtype t, int fa2, const float *o_given, const float *lse_given,
                       float *o, float *dq, float *dk, float *dv) {
    const flashc_problem *p = &R->p;
    int H = p->H, Hkv = p->H_kv, D = p->D, G = p->group;
    int64_t tk = R->m.tk;
    float *S = tc_alloc(sizeof(float) * (size_t)(p->Sk + 1)), *P = tc_alloc(sizeof(float) * (size_t)(p->Sk + 1));
    float *T = tc_alloc(sizeof(float) * (size_t)(p->Sk + 1)), *dP = tc_alloc(sizeof(float) * (size_t)(p->Sk + 1));
    float *dk_h = calloc((size_t)(tk * H * D) + 1, sizeof(float)), *dv_h = calloc((size_t)(tk * H * D) + 1, sizeof(float));
    float *acc = tc_alloc(sizeof(float) * (size_t)D);
    if (!dk_h || !dv_h) exit(2);
    const int bwd = dq != NULL;
    memset(o, 0, sizeof(float) * (size_t)(R->m.tq * H * D));
    if (bwd) memset(dq, 0, sizeof(float) * (size_t)(R->m.tq * H * D));
    float scale = p->scale, cap = p->softcap;
    // FA2: the log2 domain (u = log2 e: scores times u, exp2, u folded into the constants)
    const float u = fa2 ? 1.4426950408889634f : 1.0f, scale_u = scale * u;
    for (int b = 0; b < p->B; b++) {
        flashc_seq s = flashc__seq(p, b);
        for (int h = 0; h < H; h++) {
            int hk = h / G;
            float slope = flashc__alibi_slope(p, b, h) * u;
            for (int64_t i = 0; i < s.sq; i++) {
                int64_t qi = (qrow(p, b, &s, i) * H + h) * D;
                const double *Q_i = R->q + qi, *dO_i = R->dout + qi;
                int64_t lo, hi, diag = i + s.sk - s.sq;
                flashc__key_range(p, i, s.sq, s.sk, &lo, &hi);
                if (lo >= hi) continue; // no key: O = 0, dQ = 0
                float m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    const double *K_j = R->k + (krow(p, b, &s, j) * Hkv + hk) * D;
                    float a = 0;
                    for (int e = 0; e < D; e++) { // (FA2 form: from the last column)
                        const int d = fa2 ? D - 1 - e : e;
                        a += (float)Q_i[d] * (float)K_j[d];
                    }
                    float x = tc_round((cap > 0 ? scale : scale_u) * a, t);
                    if (cap > 0) {
                        T[j - lo] = tanhf(x / cap);
                        x = tc_round(cap * u * T[j - lo], t);
                    }
                    if (p->alibi_slopes) {
                        int64_t dist = diag - j < 0 ? j - diag : diag - j;
                        x = tc_round(x - slope * (float)dist, t);
                    }
                    S[j - lo] = x;
                    if (x > m) m = x;
                }
                float l = 0;
                for (int64_t j = lo; j < hi; j++) l += fa2 ? exp2f(S[j - lo] - m) : expf(S[j - lo] - m);
                for (int64_t j = lo; j < hi; j++) P[j - lo] = tc_round((fa2 ? exp2f(S[j - lo] - m) : expf(S[j - lo] - m)) / l, t);
                // O_i = P V
                for (int d = 0; d < D; d++) acc[d] = 0;
                for (int64_t j = lo; j < hi; j++) {
                    const double *V_j = R->v + (krow(p, b, &s, j) * Hkv + hk) * D;
                    for (int d = 0; d < D; d++) acc[d] += P[j - lo] * (float)V_j[d];
                }
                for (int d = 0; d < D; d++) o[qi + d] = tc_round(acc[d], t);
                if (!bwd) continue;
                if (fa2 && lse_given) { // the backward's P_ij from the LSE it is given (layout as flashc_fwd's)
                    const float l2 = lse_given[flashc__lse_off(p, b, h, &s, i)] * u;
                    for (int64_t j = lo; j < hi; j++) P[j - lo] = tc_round(exp2f(S[j - lo] - l2), t);
                }
                // backward: dP = dO V^T, softmax backward in fp32, dS, softcap', scale
                float Dsum = 0;
                for (int64_t j = lo; j < hi; j++) {
                    const double *V_j = R->v + (krow(p, b, &s, j) * Hkv + hk) * D;
                    float a = 0;
                    for (int e = 0; e < D; e++) {
                        const int d = fa2 ? D - 1 - e : e;
                        a += (float)dO_i[d] * (float)V_j[d];
                    }
                    dP[j - lo] = tc_round(a, t);
                    Dsum += P[j - lo] * dP[j - lo];
                }
                if (fa2) { // D_i = rowsum(dO_i o O_i), summed from the first column (apart from dP_ij)
                    const float *O_i = (o_given ? o_given : o) + qi;
                    Dsum = 0;
                    for (int d = 0; d < D; d++) Dsum += (float)dO_i[d] * O_i[d];
                }
                for (int d = 0; d < D; d++) acc[d] = 0;
                for (int64_t j = lo; j < hi; j++) {
                    float dS = tc_round(P[j - lo] * (dP[j - lo] - Dsum), t);
                    if (cap > 0) dS = tc_round(dS * (1.0f - T[j - lo] * T[j - lo]), t);
                    float g = tc_round(scale * dS, t);
                    int64_t kj = krow(p, b, &s, j);
                    const double *K_j = R->k + (kj * Hkv + hk) * D;
                    float *dK_j = dk_h + (kj * H + h) * D, *dV_j = dv_h + (kj * H + h) * D;
                    for (int d = 0; d < D; d++) {
                        acc[d] += g * (float)K_j[d];
                        dK_j[d] += g * (float)Q_i[d];
                        dV_j[d] += P[j - lo] * (float)dO_i[d];
                    }
                }
                for (int d = 0; d < D; d++) dq[qi + d] = tc_round(acc[d], t);
            }
        }
    }
    for (int64_t r = 0; r < tk && bwd; r++)
        for (int hk = 0; hk < Hkv; hk++)
            for (int d = 0; d < D; d++) {
                float sk = 0, sv = 0;
                for (int g = 0; g < G; g++) {
                    sk += tc_round(dk_h[(r * H + hk * G + g) * D + d], t);
                    sv += tc_round(dv_h[(r * H + hk * G + g) * D + d], t);
                }
                dk[(r * Hkv + hk) * D + d] = tc_round(sk, t);
                dv[(r * Hkv + hk) * D + d] = tc_round(sv, t);
            }
    free(S), free(P), free(T), free(dP), free(dk_h), free(dv_h), free(acc);
}

static double *rand_tensor(tc_rng *r, int64_t n, flashc_dtype t) {
    double *x = tc_alloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) x[i] = (double)tc_round((float)tc_normal(r), t);
    return x;
}

// The inputs (rounded to the dtype), output arrays and dead rows of case c, without running the
// reference (ref_build does); nan_case needs only the inputs.
static void ref_inputs(refdata *R, const tcase *c, tc_rng *rng) {
    memset(R, 0, sizeof *R);
    R->m = make_dims(c);
    const dims *m = &R->m;
    int64_t nq = m->tq * c->H * c->D, nk = m->tk * c->Hkv * c->D, nl = (int64_t)c->H * m->tq;
    if (c->alibi) { // standard ALiBi slopes 2^(-8 (h+1) / H), perturbed per batch entry
        int64_t bs = c->alibi == 1 ? 0 : c->alibi == 2 ? c->H : c->H + 2;
        R->n_slopes = c->alibi == 1 ? c->H : (int64_t)c->B * bs;
        R->slopes = tc_alloc(sizeof(float) * (size_t)R->n_slopes);
        for (int64_t n = 0; n < R->n_slopes; n++) R->slopes[n] = NAN; // padding entries must not be read
        for (int b = 0; b < (c->alibi == 1 ? 1 : c->B); b++)
            for (int h = 0; h < c->H; h++)
                R->slopes[b * bs + h] = (float)(pow(2.0, -8.0 * (h + 1) / c->H) * (c->alibi == 1 ? 1.0 : 0.5 + tc_uniform(rng)));
    }
    R->p = ref_problem(c, m, R->slopes);
    R->q = rand_tensor(rng, nq, c->dt);
    R->k = rand_tensor(rng, nk, c->dt);
    R->v = rand_tensor(rng, nk, c->dt);
    R->dout = rand_tensor(rng, nq, c->dt);
    R->o = tc_alloc(sizeof(double) * (size_t)(nq + 1));
    R->dq = tc_alloc(sizeof(double) * (size_t)(nq + 1));
    R->dk = tc_alloc(sizeof(double) * (size_t)(nk + 1));
    R->dv = tc_alloc(sizeof(double) * (size_t)(nk + 1));
    R->lse = tc_alloc(sizeof(double) * (size_t)(nl + 1));

    // which rows must come out exactly zero: query rows that see no key, keys no query sees
    R->qdead = tc_alloc((size_t)m->tq + 1);
    R->kdead = tc_alloc((size_t)m->tk + 1);
    memset(R->qdead, 0, (size_t)m->tq + 1);
    memset(R->kdead, 1, (size_t)m->tk + 1);
    for (int b = 0; b < c->B; b++) {
        flashc_seq s = flashc__seq(&R->p, b);
        for (int64_t i = 0; i < s.sq; i++) {
            int64_t lo, hi;
            flashc__key_range(&R->p, i, s.sq, s.sk, &lo, &hi);
            if (lo >= hi) R->qdead[qrow(&R->p, b, &s, i)] = 1;
            for (int64_t j = lo; j < hi; j++) R->kdead[krow(&R->p, b, &s, j)] = 0;
        }
    }
}

static void ref_build(refdata *R, const tcase *c, tc_rng *rng) {
    ref_inputs(R, c, rng);
    flashc__ref_fwd_f64(&R->p, R->q, R->k, R->v, R->o, R->lse);
    flashc__ref_bwd_f64(&R->p, R->q, R->k, R->v, R->o, R->lse, R->dout, R->dq, R->dk, R->dv);
}

static double max_abs_diff_f(const float *a, const double *b, int64_t n);

static void ref_naive(refdata *R, flashc_dtype t) {
    if (R->nv_done) return;
    R->nv_done = 1;
    int64_t nq = R->m.tq * R->m.H * R->m.D, nk = R->m.tk * R->m.Hkv * R->m.D;
    float *o = tc_alloc(sizeof(float) * (size_t)(nq + 1)), *dq = tc_alloc(sizeof(float) * (size_t)(nq + 1));
    float *dk = tc_alloc(sizeof(float) * (size_t)(nk + 1)), *dv = tc_alloc(sizeof(float) * (size_t)(nk + 1));
    naive_lowp(R, t, 0, NULL, NULL, o, dq, dk, dv); // the autograd form, forward and backward
    R->nv_err[1] = max_abs_diff_f(dq, R->dq, nq);
    R->nv_err[2] = max_abs_diff_f(dk, R->dk, nk);
    R->nv_err[3] = max_abs_diff_f(dv, R->dv, nk);
    R->nv_err[0] = max_abs_diff_f(o, R->o, nq);
    naive_lowp(R, t, 1, NULL, NULL, o, NULL, NULL, NULL); // the FA2 form's forward (its backward: naive_bwd_err)
    R->nv_err[0] = fmax(R->nv_err[0], max_abs_diff_f(o, R->o, nq));
    free(o), free(dq), free(dk), free(dv);
}

// The gradients' yardstick for a backward given O_GIVEN and LSE_GIVEN (the backend's forward outputs:
// O logical contiguous, the LSE in flashc_fwd's layout): the larger error of the autograd form
// (ref_naive) and of the FA2 form with P and D_i from those (naive_lowp).
static void naive_bwd_err(const refdata *R, flashc_dtype t, const float *o_given, const float *lse_given, double err[3]) {
    int64_t nq = R->m.tq * R->m.H * R->m.D, nk = R->m.tk * R->m.Hkv * R->m.D;
    float *o = tc_alloc(sizeof(float) * (size_t)(nq + 1)), *dq = tc_alloc(sizeof(float) * (size_t)(nq + 1));
    float *dk = tc_alloc(sizeof(float) * (size_t)(nk + 1)), *dv = tc_alloc(sizeof(float) * (size_t)(nk + 1));
    naive_lowp(R, t, 1, o_given, lse_given, o, dq, dk, dv);
    err[0] = fmax(R->nv_err[1], max_abs_diff_f(dq, R->dq, nq));
    err[1] = fmax(R->nv_err[2], max_abs_diff_f(dk, R->dk, nk));
    err[2] = fmax(R->nv_err[3], max_abs_diff_f(dv, R->dv, nk));
    free(o), free(dq), free(dk), free(dv);
}

static void ref_free(refdata *R) {
    free(R->slopes), free(R->q), free(R->k), free(R->v), free(R->dout), free(R->o), free(R->lse);
    free(R->dq), free(R->dk), free(R->dv);
    free(R->qdead), free(R->kdead);
}

static double max_abs_diff_f(const float *x, const double *ref, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]);
        if (!(d <= e)) e = d; // NaN propagates
    }
    return e;
}

// ------------------------------------------------------------------------------------------------
// backends and staging

typedef struct tbackend {
    const char *name;
    flashc_ctx *ctx;
    int all_cases; // 0: only the --quick subset (the REF backend by default)
} tbackend;

static tbackend g_be[4];
static int g_nbe;

// A buffer in host memory and its copy in the backend's memory (the same pointer for host backends).
typedef struct dbuf {
    void *host, *dev;
    size_t bytes;
} dbuf;

static int dbuf_alloc(flashc_ctx *ctx, dbuf *b, size_t bytes) {
    b->bytes = bytes;
    b->host = tc_alloc(bytes);
    b->dev = ctx->ops->ws_alloc ? ctx->ops->ws_alloc(ctx, bytes ? bytes : 64) : b->host;
    return b->dev != NULL;
}

static int dbuf_put(flashc_ctx *ctx, dbuf *b) {
    if (b->dev == b->host) return 1;
    if (!ctx->ops->copy) return memcpy(b->dev, b->host, b->bytes), 1;
    return ctx->ops->copy(ctx, b->dev, b->host, b->bytes, 1) == FLASHC_OK;
}

static int dbuf_get(flashc_ctx *ctx, dbuf *b) {
    if (b->dev == b->host) return 1;
    if (!ctx->ops->copy) return memcpy(b->host, b->dev, b->bytes), 1;
    return ctx->ops->copy(ctx, b->host, b->dev, b->bytes, 0) == FLASHC_OK;
}

static void dbuf_free(flashc_ctx *ctx, dbuf *b) {
    if (b->dev && b->dev != b->host) {
        if (ctx->ops->ws_free) ctx->ops->ws_free(ctx, b->dev);
        else free(b->dev);
    }
    free(b->host);
    b->host = b->dev = NULL;
}

// Everything one backend needs for one case: typed, strided, poisoned buffers in its memory.
typedef struct session {
    flashc_ctx *ctx;
    const tcase *c;
    const refdata *R;
    dims m;
    plan P;
    flashc_attn_desc d;
    size_t es;
    dbuf buf[T_N];
    uint8_t *owned[T_N];  // per element of an output buffer: belongs to a tensor (else a gap)
    uint8_t *img[T_N];    // bytes of each buffer right before the last call (session_snapshot)
    dbuf lse;             // H * total_q floats with 16-float guard zones on each side
    uint8_t *lse_img;
    dbuf cuq, cuk, used, slopes, ws;
    size_t ws_off;        // the caller's workspace starts this many bytes into ws (mode 2), which stay poisoned
    int64_t n_lse;
    char err[256];
} session;

#define LSE_GUARD 16

static void *tptr(session *s, int t) { return (char *)s->buf[s->P.v[t].buf].dev + s->P.v[t].off * (int64_t)s->es; }

static const double *ref_of(const refdata *R, int t) {
    switch (t) {
    case T_Q: return R->q;
    case T_K: return R->k;
    case T_V: return R->v;
    case T_DO: return R->dout;
    case T_O: return R->o;
    case T_DQ: return R->dq;
    case T_DK: return R->dk;
    default: return R->dv;
    }
}

// Copy a tensor's logical elements out of its (host) buffer.
static void extract(session *s, int t, float *out) {
    const tview *v = &s->P.v[t];
    int64_t rows = t_rows(&s->m, t), heads = t_heads(&s->m, t), D = s->m.D;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t d = 0; d < D; d++)
                out[(r * heads + h) * D + d] = flashc__load(s->buf[v->buf].host, view_idx(v, &s->m, t, r, h, d), s->c->dt);
}

static int session_poison(session *s, int bwd);

static int session_open(session *s, flashc_ctx *ctx, const tcase *c, const refdata *R, int ci) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx, s->c = c, s->R = R, s->m = R->m;
    s->es = flashc__dtype_size(c->dt);
    make_plan(c, &s->m, &s->P);
    flashc_attn_desc *d = &s->d;
    d->batch = c->B, d->seqlen_q = c->Sq, d->seqlen_k = c->Sk, d->heads = c->H, d->heads_kv = c->Hkv;
    d->head_dim = c->D, d->dtype = c->dt, d->scale = c->scale, d->softcap = c->softcap, d->causal = c->causal;
    d->use_window = c->win;
    if (c->win) d->window_left = c->wl, d->window_right = c->wr;
    else if (ci % 2) d->window_left = 3, d->window_right = 5; // not read without use_window
    d->alibi_batch_stride = R->p.alibi_batch_stride;
    d->deterministic = ci % 2;
    if (s->P.explicit_strides) {
        int64_t *dst[T_N] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride,
                             d->do_stride, d->dq_stride, d->dk_stride, d->dv_stride};
        for (int t = 0; t < T_N; t++)
            if (!(s->P.grad_same_as && t >= T_DO)) memcpy(dst[t], s->P.v[t].st, sizeof s->P.v[t].st);
    }
    int ok = 1;
    if (c->varlen) {
        ok &= dbuf_alloc(ctx, &s->cuq, sizeof(int32_t) * (size_t)(c->B + 1));
        ok &= dbuf_alloc(ctx, &s->cuk, sizeof(int32_t) * (size_t)(c->B + 1));
        if (ok) {
            memcpy(s->cuq.host, s->m.cuq, s->cuq.bytes), memcpy(s->cuk.host, s->m.cuk, s->cuk.bytes);
            ok &= dbuf_put(ctx, &s->cuq) && dbuf_put(ctx, &s->cuk);
            d->cu_seqlens_q = s->cuq.dev, d->cu_seqlens_k = s->cuk.dev;
        }
    }
    if (c->used && ok) {
        ok &= dbuf_alloc(ctx, &s->used, sizeof(int32_t) * (size_t)c->B);
        if (ok) memcpy(s->used.host, c->uk, s->used.bytes), ok &= dbuf_put(ctx, &s->used), d->seqused_k = s->used.dev;
    }
    if (c->alibi && ok) {
        ok &= dbuf_alloc(ctx, &s->slopes, sizeof(float) * (size_t)R->n_slopes);
        if (ok) memcpy(s->slopes.host, R->slopes, s->slopes.bytes), ok &= dbuf_put(ctx, &s->slopes), d->alibi_slopes = s->slopes.dev;
    }
    if (!ok) return snprintf(s->err, sizeof s->err, "staging cu_seqlens / seqused_k / slopes failed"), 0;

    // tensors: input buffers start as NaN everywhere (a read of a gap poisons the result), then
    // receive their tensors; output buffers get a 0xA5 pattern in the gaps (checked afterwards)
    for (int b = 0; b < T_N; b++) {
        if (!s->P.buf_elems[b]) continue;
        size_t bytes = (size_t)s->P.buf_elems[b] * s->es;
        if (!dbuf_alloc(ctx, &s->buf[b], bytes)) return snprintf(s->err, sizeof s->err, "ws_alloc of %zu bytes failed", bytes), 0;
        s->img[b] = tc_alloc(bytes);
        int is_out = b == s->P.v[T_O].buf || b == s->P.v[T_DQ].buf || b == s->P.v[T_DK].buf || b == s->P.v[T_DV].buf;
        if (is_out) {
            s->owned[b] = tc_alloc((size_t)s->P.buf_elems[b]);
            memset(s->owned[b], 0, (size_t)s->P.buf_elems[b]);
        } else {
            for (int64_t e = 0; e < s->P.buf_elems[b]; e++) tc_store_nan(s->buf[b].host, e, c->dt);
        }
    }
    for (int t = 0; t < T_N; t++) {
        const tview *v = &s->P.v[t];
        int64_t rows = t_rows(&s->m, t), heads = t_heads(&s->m, t), D = s->m.D;
        const double *x = ref_of(R, t);
        int in = t == T_Q || t == T_K || t == T_V || t == T_DO;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t e = 0; e < D; e++) {
                    int64_t idx = view_idx(v, &s->m, t, r, h, e);
                    if (in) flashc__store(s->buf[v->buf].host, idx, c->dt, (float)x[(r * heads + h) * D + e]);
                    else s->owned[v->buf][idx] = 1;
                }
    }
    s->n_lse = (int64_t)c->H * s->m.tq;
    if (!dbuf_alloc(ctx, &s->lse, sizeof(float) * (size_t)(s->n_lse + 2 * LSE_GUARD)))
        return snprintf(s->err, sizeof s->err, "ws_alloc for lse failed"), 0;
    s->lse_img = tc_alloc(s->lse.bytes);
    for (int b = 0; b < T_N; b++) {
        if (!s->P.buf_elems[b] || s->owned[b]) continue;
        if (!dbuf_put(ctx, &s->buf[b])) return snprintf(s->err, sizeof s->err, "copy to the backend failed"), 0;
    }
    // every output starts poisoned, so a call that writes another call's outputs is caught too
    if (!session_poison(s, 0) || !session_poison(s, 1)) return snprintf(s->err, sizeof s->err, "copy to the backend failed"), 0;
    return 1;
}

// Poison the outputs of the forward (o: NaN, its gaps 0xA5; lse: NaN, guards 0xA5) or of the
// backward (dq, dk, dv), in host memory and in the backend's.
static int session_poison(session *s, int bwd) {
    int ts[3] = {T_O, -1, -1};
    if (bwd) ts[0] = T_DQ, ts[1] = T_DK, ts[2] = T_DV;
    for (int i = 0; i < 3 && ts[i] >= 0; i++) {
        int b = s->P.v[ts[i]].buf;
        if (i > 0 && (b == s->P.v[ts[0]].buf || (i == 2 && b == s->P.v[ts[1]].buf))) continue; // packed: once
        memset(s->buf[b].host, 0xA5, s->buf[b].bytes);
        for (int64_t e = 0; e < s->P.buf_elems[b]; e++)
            if (s->owned[b][e]) tc_store_nan(s->buf[b].host, e, s->c->dt);
        if (!dbuf_put(s->ctx, &s->buf[b])) return 0;
    }
    if (!bwd) {
        float *l = s->lse.host;
        memset(l, 0xA5, s->lse.bytes);
        for (int64_t n = 0; n < s->n_lse; n++) l[LSE_GUARD + n] = NAN;
        if (!dbuf_put(s->ctx, &s->lse)) return 0;
    }
    return 1;
}

// Remember every buffer as it is right before a call (host copies mirror the backend's memory:
// each was put after poisoning or got after the previous call).
static void session_snapshot(session *s) {
    for (int b = 0; b < T_N; b++)
        if (s->P.buf_elems[b]) memcpy(s->img[b], s->buf[b].host, s->buf[b].bytes);
    memcpy(s->lse_img, s->lse.host, s->lse.bytes);
}

// Workspace: the ctx's own (mode 0) or the caller's, exactly the queried size, poisoned (mode 1),
// or the same 64 bytes into its allocation (mode 2: the least alignment flashc.h promises to take).
static int session_ws(session *s, int bwd, int mode, void **ws, size_t *ws_size) {
    *ws = NULL, *ws_size = 0;
    s->ws_off = 0;
    if (!mode) return 1;
    size_t need = bwd ? flashc_bwd_workspace_size(s->ctx, &s->d) : flashc_fwd_workspace_size(s->ctx, &s->d);
    if (!need) return 1;
    const size_t off = mode == 2 ? 64 : 0;
    dbuf_free(s->ctx, &s->ws);
    if (!dbuf_alloc(s->ctx, &s->ws, need + off)) return 0;
    memset(s->ws.host, 0xFF, need + off); // NaN in every float: a workspace must not need initialising
    if (!dbuf_put(s->ctx, &s->ws)) return 0;
    *ws = (char *)s->ws.dev + off, *ws_size = need;
    s->ws_off = off;
    return 1;
}

static flashc_status session_fwd(session *s, int ws_mode, int with_lse) {
    void *ws;
    size_t wsn;
    if (!session_poison(s, 0) || !session_ws(s, 0, ws_mode, &ws, &wsn)) return FLASHC_ERR_ALLOC;
    session_snapshot(s);
    float *lse = with_lse ? (float *)s->lse.dev + LSE_GUARD : NULL;
    return flashc_fwd(s->ctx, &s->d, tptr(s, T_Q), tptr(s, T_K), tptr(s, T_V), tptr(s, T_O), lse, ws, wsn, NULL);
}

static flashc_status session_bwd(session *s, int ws_mode) {
    void *ws;
    size_t wsn;
    if (!session_poison(s, 1) || !session_ws(s, 1, ws_mode, &ws, &wsn)) return FLASHC_ERR_ALLOC;
    session_snapshot(s);
    return flashc_bwd(s->ctx, &s->d, tptr(s, T_Q), tptr(s, T_K), tptr(s, T_V), tptr(s, T_O),
                      (const float *)s->lse.dev + LSE_GUARD, tptr(s, T_DO), tptr(s, T_DQ), tptr(s, T_DK), tptr(s, T_DV),
                      ws, wsn, NULL);
}

static void session_close(session *s) {
    for (int b = 0; b < T_N; b++) {
        if (s->buf[b].host) dbuf_free(s->ctx, &s->buf[b]);
        free(s->owned[b]), free(s->img[b]);
    }
    free(s->lse_img);
    dbuf *o[] = {&s->lse, &s->cuq, &s->cuk, &s->used, &s->slopes, &s->ws};
    for (int i = 0; i < 6; i++)
        if (o[i]->host) dbuf_free(s->ctx, o[i]);
}

// ------------------------------------------------------------------------------------------------
// comparison

typedef struct cmpres {
    const char *name;
    double max_err;  // max |x - ref|
    double ratio;    // worst err / bound (<= 1 passes)
    double bound;    // the bound at the worst element (f32: atol + rtol |ref|; lowp: 2|3 x naive + 1e-5)
    double naive;    // max error of the naive implementation in the same dtype
    int64_t worst;
    double got, want;
    int64_t n_nan, first_nan;     // NaN left (unwritten) or produced
    int64_t n_exact, first_exact; // masked elements that are not exactly 0 / +inf
} cmpres;

// x vs ref over n logical elements; rows (of row_len elements) flagged in dead must be exactly 0.
static cmpres compare(const char *name, const float *x, const double *ref, int64_t n, const uint8_t *dead, int64_t row_len,
                      int lowp, double atol, double rtol, double lp_bound) {
    cmpres c;
    memset(&c, 0, sizeof c);
    c.name = name, c.worst = -1, c.first_nan = -1, c.first_exact = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            if (!c.n_nan++) c.first_nan = i;
            continue;
        }
        if (dead && dead[i / row_len] && x[i] != 0.0f) {
            if (!c.n_exact++) c.first_exact = i;
        }
        double err = fabs((double)x[i] - ref[i]);
        double bound = lowp ? lp_bound : atol + rtol * fabs(ref[i]);
        double ratio = err / bound;
        if (err > c.max_err) c.max_err = err;
        if (c.worst < 0 || ratio > c.ratio) c.ratio = ratio, c.bound = bound, c.worst = i, c.got = x[i], c.want = ref[i];
    }
    if (c.worst < 0) c.bound = lowp ? lp_bound : atol;
    return c;
}

static int cmp_ok(const cmpres *c) { return c->n_nan == 0 && c->n_exact == 0 && c->ratio <= 1.0; }

// Logical index -> readable position.
static void fmt_pos(char *out, size_t n, const dims *m, int t, int64_t idx) {
    int64_t D = m->D, h = t_heads(m, t), r = idx / (h * D), hh = (idx / D) % h, d = idx % D;
    if (m->varlen) snprintf(out, n, "%s[row=%lld,h=%lld,d=%lld]", T_NAME[t], (long long)r, (long long)hh, (long long)d);
    else snprintf(out, n, "%s[b=%lld,i=%lld,h=%lld,d=%lld]", T_NAME[t], (long long)(r / t_S(m, t)), (long long)(r % t_S(m, t)),
                  (long long)hh, (long long)d);
}

static void fmt_lse_pos(char *out, size_t n, const dims *m, int64_t idx) {
    if (m->varlen) snprintf(out, n, "lse[h=%lld,row=%lld]", (long long)(idx / m->tq), (long long)(idx % m->tq));
    else snprintf(out, n, "lse[b=%lld,h=%lld,i=%lld]", (long long)(idx / ((int64_t)m->H * m->Sq)),
                  (long long)((idx / m->Sq) % m->H), (long long)(idx % m->Sq));
}

// Appends the story of a failed comparison to msg.
static void describe(char *msg, size_t n, const cmpres *c, const dims *m, int t) {
    size_t k = strlen(msg);
    char pos[96];
    if (c->n_nan) {
        if (t >= 0) fmt_pos(pos, sizeof pos, m, t, c->first_nan);
        else fmt_lse_pos(pos, sizeof pos, m, c->first_nan);
        k += (size_t)snprintf(msg + k, n - k, " | %s: %lld NaN (unwritten or computed), first at %s", c->name,
                              (long long)c->n_nan, pos);
    }
    if (c->n_exact) {
        if (t >= 0) fmt_pos(pos, sizeof pos, m, t, c->first_exact);
        else fmt_lse_pos(pos, sizeof pos, m, c->first_exact);
        k += (size_t)snprintf(msg + k, n - k, " | %s: %lld elements of rows that see no key are not exactly %s, first at %s",
                              c->name, (long long)c->n_exact, t >= 0 ? "0" : "+inf", pos);
    }
    if (c->ratio > 1.0 && c->worst >= 0) {
        if (t >= 0) fmt_pos(pos, sizeof pos, m, t, c->worst);
        else fmt_lse_pos(pos, sizeof pos, m, c->worst);
        k += (size_t)snprintf(msg + k, n - k, " | %s: max_err=%.3e > bound=%.3e at %s got=%.8g ref=%.8g", c->name, c->max_err,
                              c->bound, pos, c->got, c->want);
        snprintf(msg + k, n - k, " (naive err %.3e)", c->naive);
    }
}

static cmpres compare_lse(const float *x, const double *ref, int64_t n) {
    cmpres c;
    memset(&c, 0, sizeof c);
    c.name = "lse", c.worst = -1, c.first_nan = -1, c.first_exact = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            if (!c.n_nan++) c.first_nan = i;
            continue;
        }
        if (isinf(ref[i]) || isinf(x[i])) { // a row that sees no key: exactly +inf, and only there
            if (!(isinf(ref[i]) && x[i] == INFINITY) && !c.n_exact++) c.first_exact = i;
            continue;
        }
        double err = fabs((double)x[i] - ref[i]), bound = TOL_LSE_ATOL + TOL_LSE_RTOL * fabs(ref[i]);
        if (err > c.max_err) c.max_err = err;
        if (c.worst < 0 || err / bound > c.ratio) c.ratio = err / bound, c.bound = bound, c.worst = i, c.got = x[i], c.want = ref[i];
    }
    if (c.worst < 0) c.bound = TOL_LSE_ATOL;
    return c;
}

// After a call: the elements of its outputs may change (and are compared elsewhere); every other
// byte -- gaps of output buffers, LSE guard zones, inputs, the other direction's outputs -- must be
// as it was right before the call. Copies everything back to the host. Appends findings to msg.
static int check_untouched(session *s, int bwd, char *msg, size_t n) {
    int ok = 1;
    size_t k = strlen(msg);
    int out_t[3] = {T_O, T_O, T_O};
    if (bwd) out_t[0] = T_DQ, out_t[1] = T_DK, out_t[2] = T_DV;
    for (int b = 0; b < T_N; b++) {
        if (!s->P.buf_elems[b]) continue;
        if (!dbuf_get(s->ctx, &s->buf[b])) {
            snprintf(msg + k, n - k, " | copy back failed");
            return 0;
        }
        int is_out = b == s->P.v[out_t[0]].buf || b == s->P.v[out_t[1]].buf || b == s->P.v[out_t[2]].buf;
        const uint8_t *now = s->buf[b].host, *was = s->img[b];
        for (int64_t e = 0; e < s->P.buf_elems[b]; e++) {
            if (is_out && s->owned[b][e]) continue;
            if (memcmp(now + e * (int64_t)s->es, was + e * (int64_t)s->es, s->es)) {
                int t0 = 0;
                for (int t = 0; t < T_N; t++)
                    if (s->P.v[t].buf == b) { t0 = t; break; }
                k += (size_t)snprintf(msg + k, n - k, " | wrote %s (buffer of %s, element %lld)",
                                      is_out ? "a gap of an output buffer" : "memory that is not an output of this call",
                                      T_NAME[t0], (long long)e);
                ok = 0;
                break;
            }
        }
    }
    if (s->ws_off) { // the bytes before a caller's workspace are not the library's
        if (!dbuf_get(s->ctx, &s->ws)) return 0;
        for (size_t e = 0; e < s->ws_off; e++)
            if (((const uint8_t *)s->ws.host)[e] != 0xFF) {
                k += (size_t)snprintf(msg + k, n - k, " | wrote byte %lld before the workspace", (long long)e - (long long)s->ws_off);
                ok = 0;
                break;
            }
    }
    if (!dbuf_get(s->ctx, &s->lse)) return 0;
    const float *l = s->lse.host, *was = (const float *)s->lse_img;
    for (int64_t e = 0; e < s->n_lse + 2 * LSE_GUARD; e++) {
        int inside = e >= LSE_GUARD && e < LSE_GUARD + s->n_lse;
        if (inside && !bwd) continue;
        if (memcmp(&l[e], &was[e], sizeof(float))) {
            k += (size_t)snprintf(msg + k, n - k, " | wrote lse[%lld] (%s)", (long long)(e - LSE_GUARD),
                                  inside ? "an input of the backward" : "outside its elements");
            ok = 0;
            break;
        }
    }
    return ok;
}

// ------------------------------------------------------------------------------------------------
// one case on one backend

static int g_quick, g_only_ref;
static const char *g_filter, *g_backend;

static int wanted(const char *line) { return !g_filter || strstr(line, g_filter); }

// The host backends (ref, cpu) take every f32 / f16 / bf16 problem: UNSUPPORTED from them is a
// failure, not a skip. CUDA's refusals (f32, head dims it lacks) are skips, whose count gpu.sh prints.
static int may_refuse(const tbackend *be) { return strncmp(be->name, "cpu", 3) && strcmp(be->name, "ref"); }

static void run_on(tbackend *be, const tcase *c, int ci, refdata *R, const char *desc) {
    char fl[640], bl[640];
    snprintf(fl, sizeof fl, "fwd %s %s %s", be->name, tc_dtype_name(c->dt), desc);
    snprintf(bl, sizeof bl, "bwd %s %s %s", be->name, tc_dtype_name(c->dt), desc);
    int want_f = wanted(fl), want_b = wanted(bl);
    if (!want_f && !want_b) return;

    tc_running(want_f ? fl : bl);
    session s;
    int ok = session_open(&s, be->ctx, c, R, ci);
    if (!ok) {
        if (want_f) tc_fail("%s: setup: %s", fl, s.err);
        if (want_b) tc_fail("%s: setup: %s", bl, s.err);
        session_close(&s);
        return;
    }
    flashc_status st = flashc_supports(be->ctx, &s.d);
    if (st == FLASHC_ERR_UNSUPPORTED && may_refuse(be)) {
        if (want_f) tc_skip("%s: unsupported by %s: %s", fl, be->name, flashc_ctx_last_error(be->ctx));
        if (want_b) tc_skip("%s: unsupported by %s: %s", bl, be->name, flashc_ctx_last_error(be->ctx));
        session_close(&s);
        return;
    }
    if (st != FLASHC_OK) {
        if (want_f) tc_fail("%s: flashc_supports = %s: %s", fl, flashc_status_string(st), flashc_ctx_last_error(be->ctx));
        if (want_b) tc_fail("%s: flashc_supports = %s: %s", bl, flashc_status_string(st), flashc_ctx_last_error(be->ctx));
        session_close(&s);
        return;
    }
    const dims *m = &R->m;
    int lowp = c->dt != FLASHC_DTYPE_F32;
    ref_naive(R, c->dt); // the yardstick: f16/bf16 always, f32 where it exceeds 1e-5
    int64_t nq = m->tq * m->H * m->D, nk = m->tk * m->Hkv * m->D;
    int64_t rq = (int64_t)m->H * m->D, rk = (int64_t)m->Hkv * m->D;
    float *x = tc_alloc(sizeof(float) * (size_t)((nq > nk ? nq : nk) + 1));
    float *xl = tc_alloc(sizeof(float) * (size_t)(s.n_lse + 1));
    float *xo = tc_alloc(sizeof(float) * (size_t)(nq + 1)); // this backend's O: what its backward is given
    char msg[2048];

    // forward
    msg[0] = 0;
    int fwd_ok = 1;
    st = session_fwd(&s, ci % 3, 1);
    cmpres co, cl;
    memset(&co, 0, sizeof co), memset(&cl, 0, sizeof cl);
    if (st != FLASHC_OK) {
        snprintf(msg, sizeof msg, " | flashc_fwd = %s: %s", flashc_status_string(st), flashc_ctx_last_error(be->ctx));
        fwd_ok = 0;
    } else {
        fwd_ok = check_untouched(&s, 0, msg, sizeof msg);
        extract(&s, T_O, xo);
        memcpy(xl, (float *)s.lse.host + LSE_GUARD, sizeof(float) * (size_t)s.n_lse);
        double nerr = R->nv_err[0];
        double lpb = LOWP_FWD_FACTOR * nerr + LOWP_SLACK;
        double atol = fmax(TOL_F32_O_ATOL, LOWP_FWD_FACTOR * nerr);
        co = compare("o", xo, R->o, nq, R->qdead, rq, lowp, atol, TOL_F32_O_RTOL, lpb);
        co.naive = nerr;
        cl = compare_lse(xl, R->lse, s.n_lse);
        if (!cmp_ok(&co) || !cmp_ok(&cl)) {
            fwd_ok = 0;
            describe(msg, sizeof msg, &co, m, T_O);
            describe(msg, sizeof msg, &cl, m, -1);
        }
    }
    if (want_f) {
        if (fwd_ok) tc_pass("%s  max_err=%.2e bound=%.2e  lse_err=%.2e", fl, co.max_err, co.bound, cl.max_err);
        else tc_fail("%s%s", fl, msg);
    }

    // backward, from this backend's own O and LSE
    tc_running(bl);
    if (want_b) {
        msg[0] = 0;
        if (st != FLASHC_OK) {
            tc_fail("%s | not run: the forward failed", bl);
        } else if (!fwd_ok) { // (its yardstick's FA2 form would read that forward's wrong O and LSE)
            tc_fail("%s | not judged: the forward's O or LSE failed its check", bl);
        } else {
            int bwd_ok = 1;
            flashc_status sb = session_bwd(&s, (ci / 3) % 3);
            if (sb != FLASHC_OK) {
                snprintf(msg, sizeof msg, " | flashc_bwd = %s: %s", flashc_status_string(sb), flashc_ctx_last_error(be->ctx));
                tc_fail("%s%s", bl, msg);
            } else {
                bwd_ok = check_untouched(&s, 1, msg, sizeof msg);
                const int ts[3] = {T_DQ, T_DK, T_DV};
                const double *rf[3] = {R->dq, R->dk, R->dv};
                const uint8_t *dead[3] = {R->qdead, R->kdead, R->kdead};
                cmpres worst;
                memset(&worst, 0, sizeof worst);
                worst.name = "dq";
                double nerr_g[3];
                naive_bwd_err(R, c->dt, xo, xl, nerr_g);
                for (int g = 0; g < 3; g++) {
                    int64_t n = g ? nk : nq;
                    extract(&s, ts[g], x);
                    double nerr = nerr_g[g];
                    double lpb = LOWP_BWD_FACTOR * nerr + LOWP_SLACK;
                    double atol = fmax(TOL_F32_G_ATOL, LOWP_BWD_FACTOR * nerr);
                    cmpres cg = compare(T_NAME[ts[g]], x, rf[g], n, dead[g], g ? rk : rq, lowp, atol, TOL_F32_G_RTOL, lpb);
                    cg.naive = nerr;
                    if (!cmp_ok(&cg)) {
                        bwd_ok = 0;
                        describe(msg, sizeof msg, &cg, m, ts[g]);
                    }
                    if (cg.ratio >= worst.ratio) worst = cg;
                }
                if (bwd_ok) tc_pass("%s  max_err=%.2e bound=%.2e (%s)", bl, worst.max_err, worst.bound, worst.name);
                else tc_fail("%s%s", bl, msg);
            }
        }
    }
    free(x), free(xl), free(xo);
    session_close(&s);
}

// ------------------------------------------------------------------------------------------------
// the reference itself: finite differences of L = sum(dout * O) against flashc__ref_bwd_f64

static void fd_check(const char *label, const tcase *c) {
    char line[256];
    snprintf(line, sizeof line, "fdcheck ref fp64 %s", label);
    if (!wanted(line)) return;
    tc_running(line);
    tc_rng rng = tc_rng_make(g_seed, 0xfdc0 + (uint64_t)strlen(label));
    refdata R;
    tcase cc = *c;
    cc.dt = FLASHC_DTYPE_F32;
    ref_build(&R, &cc, &rng); // q, k, v, dout fp32-valued; fine for fp64 differences
    int64_t nq = R.m.tq * c->H * c->D, nk = R.m.tk * c->Hkv * c->D;
    double *o = tc_alloc(sizeof(double) * (size_t)(nq + 1));
    double *lse = tc_alloc(sizeof(double) * (size_t)((int64_t)c->H * R.m.tq + 1));
    const double h = 1e-5;
    double worst = 0, worst_an = 0, worst_fd = 0;
    const char *worst_t = "-";
    int64_t worst_i = -1, n_par = 0, n_bad = 0;
    double *xs[3] = {R.q, R.k, R.v}, *gs[3] = {R.dq, R.dk, R.dv};
    int64_t ns[3] = {nq, nk, nk};
    const char *names[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < ns[t]; i++) {
            double save = xs[t][i], L[2];
            for (int side = 0; side < 2; side++) {
                xs[t][i] = save + (side ? -h : h);
                flashc__ref_fwd_f64(&R.p, R.q, R.k, R.v, o, lse);
                L[side] = 0;
                for (int64_t e = 0; e < nq; e++) L[side] += R.dout[e] * o[e];
            }
            xs[t][i] = save;
            double fd = (L[0] - L[1]) / (2 * h), an = gs[t][i];
            // central differences with h = 1e-5 in fp64: truncation ~h^2 = 1e-10, rounding ~1e-16/h
            double err = fabs(fd - an), bound = 1e-7 + 1e-6 * fabs(an);
            n_par++;
            if (err > bound) n_bad++;
            if (err / bound > worst) worst = err / bound, worst_an = an, worst_fd = fd, worst_t = names[t], worst_i = i;
        }
    // rows that see no key must have exactly zero gradient in the reference too
    int64_t n_dead = 0;
    for (int64_t i = 0; i < nq; i++)
        if (R.qdead[i / ((int64_t)c->H * c->D)] && R.dq[i] != 0) n_dead++;
    if (n_bad || n_dead)
        tc_fail("%s: %lld of %lld gradient entries off (bound 1e-7 + 1e-6|an|), worst %s[%lld] analytic=%.10g fd=%.10g; "
                "%lld nonzero dq in rows that see no key", line, (long long)n_bad, (long long)n_par, worst_t,
                (long long)worst_i, worst_an, worst_fd, (long long)n_dead);
    else
        tc_pass("%s  %lld entries, worst err/bound=%.2e", line, (long long)n_par, worst);
    free(o), free(lse);
    ref_free(&R);
}

static void fd_checks(void) {
    tcase c = mk(2, 4, 2, 5, 7, 4, FLASHC_DTYPE_F32);
    c.softcap = 1.5f, c.scale = 0.7f, c.alibi = 1, c.win = 1, c.wl = 2, c.wr = 1;
    fd_check("softcap+alibi(head)+window(2,1)+gqa4/2", &c);

    static const int lq[] = {3, 0, 4}, lk[] = {5, 2, 3};
    c = mk(0, 2, 1, 0, 0, 3, FLASHC_DTYPE_F32);
    set_varlen(&c, 3, lq, lk);
    c.used = 1, c.uk[0] = 4, c.uk[1] = 2, c.uk[2] = 1, c.causal = 1, c.alibi = 2;
    c.Sq = 4, c.Sk = 5;
    fd_check("varlen+seqused_k+causal+alibi(batch,head)+mqa", &c);

    c = mk(1, 2, 2, 6, 3, 5, FLASHC_DTYPE_F32);
    c.causal = 1;
    fd_check("causal Sq>Sk (rows that see no key)", &c);

    c = mk(1, 3, 1, 4, 6, 8, FLASHC_DTYPE_F32);
    c.softcap = 0.8f, c.scale = 2.0f, c.win = 1, c.wl = -1, c.wr = 0, c.alibi = 3;
    fd_check("strong softcap+right window+alibi(stride)", &c);

    c = mk(2, 1, 1, 3, 3, 6, FLASHC_DTYPE_F32);
    c.win = 1, c.wl = 1, c.wr = -1;
    fd_check("left window", &c);
}

// ------------------------------------------------------------------------------------------------
// determinism and thread-count independence

static int run_fwd_bwd_copy(session *s, int ws_mode, int do_bwd, uint8_t **out_bytes, size_t *out_n, char *err, size_t en) {
    flashc_status st = session_fwd(s, ws_mode, 1);
    if (st != FLASHC_OK) return snprintf(err, en, "flashc_fwd = %s: %s", flashc_status_string(st), flashc_ctx_last_error(s->ctx)), 0;
    if (do_bwd) {
        st = session_bwd(s, ws_mode);
        if (st != FLASHC_OK)
            return snprintf(err, en, "flashc_bwd = %s: %s", flashc_status_string(st), flashc_ctx_last_error(s->ctx)), 0;
    }
    int ts[3] = {T_O, -1, -1};
    if (do_bwd) ts[0] = T_DQ, ts[1] = T_DK, ts[2] = T_DV;
    size_t n = 0;
    for (int i = 0; i < 3 && ts[i] >= 0; i++) n += s->buf[s->P.v[ts[i]].buf].bytes;
    if (!do_bwd) n += s->lse.bytes;
    uint8_t *bytes = tc_alloc(n), *p = bytes;
    for (int i = 0; i < 3 && ts[i] >= 0; i++) {
        dbuf *b = &s->buf[s->P.v[ts[i]].buf];
        if (!dbuf_get(s->ctx, b)) return free(bytes), snprintf(err, en, "copy back failed"), 0;
        memcpy(p, b->host, b->bytes), p += b->bytes;
    }
    if (!do_bwd) {
        if (!dbuf_get(s->ctx, &s->lse)) return free(bytes), snprintf(err, en, "copy back failed"), 0;
        memcpy(p, s->lse.host, s->lse.bytes);
    }
    *out_bytes = bytes, *out_n = n;
    return 1;
}

static int count_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += a[i] != b[i];
    return (int)(k > 1000000 ? 1000000 : k);
}

static const tcase *det_cases(int *n) {
    static tcase cs[4];
    static int built;
    if (!built) {
        cs[0] = mk(2, 4, 2, 200, 300, 64, FLASHC_DTYPE_F32);
        cs[0].causal = 1;
        static const int lq[] = {100, 1, 257}, lk[] = {300, 64, 129};
        cs[1] = mk(0, 8, 2, 0, 0, 128, FLASHC_DTYPE_BF16);
        set_varlen(&cs[1], 3, lq, lk);
        cs[1].Sq = 257, cs[1].Sk = 300;
        cs[2] = mk(3, 4, 1, 130, 130, 32, FLASHC_DTYPE_F16);
        cs[2].alibi = 2, cs[2].softcap = 8.0f, cs[2].win = 1, cs[2].wl = 40, cs[2].wr = 7;
        cs[3] = mk(2, 4, 2, 190, 250, 256, FLASHC_DTYPE_BF16); // the sm_90a D = 256 path has its own kernels
        cs[3].causal = 1;
        built = 1;
    }
    *n = 4;
    return cs;
}

// Two backward runs with deterministic = 1 give bit-identical dQ, dK, dV (and two forwards O, LSE).
static void determinism_checks(tbackend *be) {
    int n;
    const tcase *cs = det_cases(&n);
    for (int ci = 0; ci < n; ci++) {
        const tcase *c = &cs[ci];
        if (g_quick && ci == 1) continue;
        char desc[400], line[512];
        case_desc(desc, sizeof desc, c);
        snprintf(line, sizeof line, "deterministic %s %s %s", be->name, tc_dtype_name(c->dt), desc);
        if (!wanted(line)) continue;
        tc_running(line);
        tc_rng rng = tc_rng_make(g_seed, 0xde7 + (uint64_t)ci);
        refdata R;
        ref_build(&R, c, &rng);
        session s;
        char err[300] = "";
        uint8_t *a = NULL, *b = NULL, *fa = NULL, *fb = NULL;
        size_t na = 0, nb = 0, nfa = 0, nfb = 0;
        if (!session_open(&s, be->ctx, c, &R, 0)) {
            tc_fail("%s: setup: %s", line, s.err);
        } else if (may_refuse(be) && flashc_supports(be->ctx, &s.d) == FLASHC_ERR_UNSUPPORTED) {
            tc_skip("%s: unsupported: %s", line, flashc_ctx_last_error(be->ctx));
        } else {
            s.d.deterministic = 1;
            int ok = run_fwd_bwd_copy(&s, 0, 0, &fa, &nfa, err, sizeof err) && run_fwd_bwd_copy(&s, 1, 1, &a, &na, err, sizeof err) &&
                     run_fwd_bwd_copy(&s, 0, 0, &fb, &nfb, err, sizeof err) && run_fwd_bwd_copy(&s, 0, 1, &b, &nb, err, sizeof err);
            if (!ok) tc_fail("%s: %s", line, err);
            else if (nfa != nfb || memcmp(fa, fb, nfa))
                tc_fail("%s: two forward runs differ in %d bytes of O/LSE", line, count_diff(fa, fb, nfa));
            else if (na != nb || memcmp(a, b, na))
                tc_fail("%s: two backward runs with deterministic=1 differ in %d bytes of dQ/dK/dV", line, count_diff(a, b, na));
            else tc_pass("%s  fwd and bwd bit-identical run to run", line);
        }
        free(a), free(b), free(fa), free(fb);
        session_close(&s);
        ref_free(&R);
    }
}

// The CPU forward gives the same bits with 1, 2 and 3 threads (3 does not divide the work evenly).
static void thread_checks(void) {
    int n;
    const tcase *cs = det_cases(&n);
    flashc_ctx *ctx[3] = {NULL, NULL, NULL};
    for (int t = 0; t < 3; t++) {
        flashc_status st = flashc_ctx_create(&ctx[t], FLASHC_BACKEND_CPU, t + 1);
        if (st != FLASHC_OK) {
            tc_fail("threads cpu: flashc_ctx_create(CPU, %d threads) = %s (%s)", t + 1, flashc_status_string(st),
                    flashc_ctx_last_error(NULL));
            for (int u = 0; u < t; u++) flashc_ctx_free(ctx[u]);
            return;
        }
    }
    for (int ci = 0; ci < n; ci++) {
        const tcase *c = &cs[ci];
        if (g_quick && ci == 1) continue;
        char desc[400], line[512];
        case_desc(desc, sizeof desc, c);
        snprintf(line, sizeof line, "threads cpu %s %s (1 vs 2 vs 3 threads, forward)", tc_dtype_name(c->dt), desc);
        if (!wanted(line)) continue;
        tc_running(line);
        tc_rng rng = tc_rng_make(g_seed, 0x7d + (uint64_t)ci);
        refdata R;
        ref_build(&R, c, &rng);
        uint8_t *out[3] = {NULL, NULL, NULL};
        size_t nout[3] = {0, 0, 0};
        char err[300] = "";
        int ok = 1;
        for (int t = 0; t < 3 && ok; t++) {
            session s;
            if (!session_open(&s, ctx[t], c, &R, 0)) ok = 0, snprintf(err, sizeof err, "setup: %s", s.err);
            else ok = run_fwd_bwd_copy(&s, 0, 0, &out[t], &nout[t], err, sizeof err);
            session_close(&s);
        }
        if (!ok) tc_fail("%s: %s", line, err);
        else if (nout[0] != nout[1] || memcmp(out[0], out[1], nout[0]))
            tc_fail("%s: 1 and 2 threads differ in %d bytes of O/LSE", line, count_diff(out[0], out[1], nout[0]));
        else if (nout[0] != nout[2] || memcmp(out[0], out[2], nout[0]))
            tc_fail("%s: 1 and 3 threads differ in %d bytes of O/LSE", line, count_diff(out[0], out[2], nout[0]));
        else tc_pass("%s  bit-identical", line);
        for (int t = 0; t < 3; t++) free(out[t]);
        ref_free(&R);
    }
    for (int t = 0; t < 3; t++) flashc_ctx_free(ctx[t]);
}

// lse = NULL is allowed in the forward and must not change O.
static void lse_null_check(tbackend *be) {
    tcase c = mk(2, 4, 2, 65, 129, 64, FLASHC_DTYPE_BF16);
    c.causal = 1;
    char desc[400], line[512];
    case_desc(desc, sizeof desc, &c);
    snprintf(line, sizeof line, "lse=NULL %s %s %s", be->name, tc_dtype_name(c.dt), desc);
    if (!wanted(line)) return;
    tc_running(line);
    tc_rng rng = tc_rng_make(g_seed, 0x15e);
    refdata R;
    ref_build(&R, &c, &rng);
    session s;
    if (!session_open(&s, be->ctx, &c, &R, 0)) {
        tc_fail("%s: setup: %s", line, s.err);
    } else {
        uint8_t *a = NULL;
        size_t na = 0;
        char err[300] = "";
        int ok = run_fwd_bwd_copy(&s, 0, 0, &a, &na, err, sizeof err);
        flashc_status st = ok ? session_fwd(&s, 0, 0) : FLASHC_ERR_INTERNAL;
        dbuf *ob = &s.buf[s.P.v[T_O].buf];
        if (!ok) tc_fail("%s: %s", line, err);
        else if (st != FLASHC_OK) tc_fail("%s: flashc_fwd(lse=NULL) = %s: %s", line, flashc_status_string(st), flashc_ctx_last_error(be->ctx));
        else if (!dbuf_get(be->ctx, ob) || memcmp(a, ob->host, ob->bytes))
            tc_fail("%s: O with lse=NULL differs from O with lse", line);
        else tc_pass("%s  O identical", line);
        free(a);
    }
    session_close(&s);
    ref_free(&R);
}

// One case of nokey_inf_v_check: causal, batch 1, H / H_kv = 2 / 1, Sq > Sk, so queries 0 .. Sq -
// Sk - 1 see no key (R.qdead), and one key's V row is Inf, staged like every sweep case
// (session_open: poisoned outputs, the backend's memory).
// - Forward: key 0, which every other query sees. The rows with no key must store O = 0 and lse =
//   +inf (not 0 * Inf = NaN from P V). Batch or varlen mode (the CUDA backend runs them on
//   different kernels and epilogues).
// - Backward (bwd): key Sk - 1. The rows with no key must get dQ exactly 0 (DESIGN.md §1): their
//   P_ij = 0 times dP_ij = dO_i V_j^T = inf must not enter dS. (Rows that see other keys of a block
//   holding the Inf get NaN from 0 * inf inside P V already in the forward, as in SDPA's math path
//   and FlashAttention; no rule asks otherwise.) Both modes (det): the CUDA backend writes dQ in
//   different places (the dq_acc conversion after the atomic kernels, the deterministic dQ
//   kernels' epilogues: bwd_dq_out).
static void nokey_inf_v_case(tbackend *be, flashc_dtype dt, int D, int SQ, int SK, int varlen, int bwd, int det) {
    char line[256];
    if (bwd)
        snprintf(line, sizeof line, "backward beside an Inf in V %s %s%s causal Sq=%d Sk=%d H=2/1 D=%d", be->name,
                 tc_dtype_name(dt), det ? " deterministic" : "", SQ, SK, D);
    else
        snprintf(line, sizeof line, "rows with no key beside an Inf in V %s %s %s causal Sq=%d Sk=%d H=2/1 D=%d",
                 be->name, tc_dtype_name(dt), varlen ? "varlen" : "batch", SQ, SK, D);
    if (!wanted(line)) return;
    tcase c = mk(1, 2, 1, SQ, SK, D, dt);
    c.causal = 1;
    if (varlen) set_varlen(&c, 1, &SQ, &SK);
    tc_rng rng = tc_rng_make(g_seed, (bwd ? 0x2f : 0x1f) + (uint64_t)D + (uint64_t)SQ);
    refdata R;
    ref_build(&R, &c, &rng); // (its fp64 outputs are of the finite V: only qdead and the +inf lse rows are used)
    const int inf_key = bwd ? SK - 1 : 0;
    for (int d = 0; d < D; d++) R.v[(int64_t)inf_key * D + d] = INFINITY; // kv head 0
    session s;
    if (!session_open(&s, be->ctx, &c, &R, det)) {
        tc_fail("%s: setup: %s", line, s.err);
    } else if (may_refuse(be) && flashc_supports(be->ctx, &s.d) == FLASHC_ERR_UNSUPPORTED) {
        tc_skip("%s: unsupported: %s", line, flashc_ctx_last_error(be->ctx));
    } else {
        tc_running(line);
        flashc_status st = session_fwd(&s, 0, 1);
        if (st == FLASHC_OK && bwd) st = session_bwd(&s, 0);
        const int t = bwd ? T_DQ : T_O;
        const int64_t row = (int64_t)c.H * D, nq = s.m.tq * row;
        float *x = tc_alloc(sizeof(float) * (size_t)nq);
        int bad = 0, got = dbuf_get(be->ctx, &s.buf[s.P.v[t].buf]) && (bwd || dbuf_get(be->ctx, &s.lse));
        if (st == FLASHC_OK && got) {
            extract(&s, t, x);
            for (int64_t e = 0; e < nq; e++) bad += R.qdead[e / row] && x[e] != 0.f;
            const float *lse = (const float *)s.lse.host + LSE_GUARD;
            for (int64_t n = 0; !bwd && n < s.n_lse; n++) bad += isinf(R.lse[n]) && lse[n] != INFINITY;
        }
        if (st != FLASHC_OK) tc_fail("%s: %s", line, flashc_ctx_last_error(be->ctx));
        else if (!got) tc_fail("%s: copy back failed", line);
        else if (bad && bwd) tc_fail("%s: %d dQ values of the rows with no key are not 0", line, bad);
        else if (bad) tc_fail("%s: %d values of the rows with no key are not 0 (o) / +inf (lse)", line, bad);
        else tc_pass("%s", line);
        free(x);
    }
    session_close(&s);
    ref_free(&R);
}

// Every compiled CUDA head dim (their epilogues differ: TMA store at 64, register stores at 256),
// one block whose rows split (4 / 2), a block of 128 or 192 rows with 120 empty ones (200 / 80),
// and whole query blocks with no key before a split one (300 / 40).
static void nokey_inf_v_check(tbackend *be) {
    const int Ds[3] = {64, 128, 256}, shapes[3][2] = {{4, 2}, {200, 80}, {300, 40}};
    for (int di = 0; di < 3; di++)
        for (int dd = 0; dd < 3; dd++)
            for (int si = 0; si < 3; si++)
                for (int varlen = 0; varlen < 2; varlen++)
                    nokey_inf_v_case(be, DT3[di], Ds[dd], shapes[si][0], shapes[si][1], varlen, 0, 0);
    for (int di = 0; di < 3; di++)
        for (int dd = 0; dd < 3; dd++)
            for (int si = 0; si < 2; si++)
                for (int det = 0; det < 2; det++) nokey_inf_v_case(be, DT3[di], Ds[dd], shapes[si][0], shapes[si][1], 0, 1, det);
}

// The CPU forward reads no key row past the last one a query block's rows see (its bf16 dot-product
// path packs V_j rows in pairs, and an odd block's partner row was once read: 0 x Inf = NaN in rows
// whose keys are all finite). Causal, Sq = BR + 6, Sk = BR + 7 (BR = FLASHC_CPU_FWD_BR, 144): row r
// sees keys <= r + 1, so the first query block's BR rows see keys < BR + 1 and key BR + 1's V row is
// Inf; O of those rows must be finite.
// CPU only: a GPU query block splits the rows differently, and rows that share a key block with the
// Inf may get NaN there (nokey_inf_v_case says why no rule asks otherwise). The FA2 kernel's
// property: where FLASHC_CPU_DECODE_MAX_SQ sends seqlen_q BR + 6 to the decode kernel (run_tests.sh's
// decode-only run), whose rows share key steps, the case is skipped.
static void unseen_inf_v_check(tbackend *be) {
    if (strcmp(be->name, "cpu")) return;
    const char *env = getenv("FLASHC_CPU_DECODE_MAX_SQ");
    if (env && atoi(env) >= FLASHC_CPU_FWD_BR + 6) {
        tc_skip("rows beside an unseen Inf in V: FLASHC_CPU_DECODE_MAX_SQ=%s runs seqlen_q %d on the decode kernel", env,
                FLASHC_CPU_FWD_BR + 6);
        return;
    }
    for (int di = 0; di < 3; di++)
        for (int D = 64; D <= 128; D += 64) {
            const flashc_dtype dt = DT3[di];
            const int rows = FLASHC_CPU_FWD_BR, SQ = rows + 6, SK = rows + 7, inf_key = rows + 1;
            char line[256];
            snprintf(line, sizeof line, "rows beside an unseen Inf in V %s %s causal Sq=%d Sk=%d H=2/1 D=%d", be->name,
                     tc_dtype_name(dt), SQ, SK, D);
            if (!wanted(line)) continue;
            tcase c = mk(1, 2, 1, SQ, SK, D, dt);
            c.causal = 1;
            tc_rng rng = tc_rng_make(g_seed, 0x3f + (uint64_t)D);
            refdata R;
            ref_build(&R, &c, &rng);
            for (int d = 0; d < D; d++) R.v[(int64_t)inf_key * D + d] = INFINITY; // kv head 0
            session s;
            if (!session_open(&s, be->ctx, &c, &R, 0)) {
                tc_fail("%s: setup: %s", line, s.err);
            } else {
                tc_running(line);
                flashc_status st = session_fwd(&s, 0, 1);
                const int64_t row = (int64_t)c.H * D, nq = s.m.tq * row;
                float *x = tc_alloc(sizeof(float) * (size_t)nq);
                int bad = 0, got = dbuf_get(be->ctx, &s.buf[s.P.v[T_O].buf]);
                if (st == FLASHC_OK && got) {
                    extract(&s, T_O, x);
                    for (int64_t e = 0; e < rows * row; e++) bad += !isfinite(x[e]);
                }
                if (st != FLASHC_OK) tc_fail("%s: %s", line, flashc_ctx_last_error(be->ctx));
                else if (!got) tc_fail("%s: copy back failed", line);
                else if (bad) tc_fail("%s: %d values of the rows before key %d are not finite", line, bad, inf_key);
                else tc_pass("%s", line);
                free(x);
            }
            session_close(&s);
            ref_free(&R);
        }
}

// Run the forward with lse and copy O (fp32, logical order) and lse out into new arrays; false with
// the reason in err on failure.
static int fwd_outputs(session *s, float **o, float **lse, char *err, size_t en) {
    if (session_fwd(s, 0, 1) != FLASHC_OK) return snprintf(err, en, "%s", flashc_ctx_last_error(s->ctx)), 0;
    if (!dbuf_get(s->ctx, &s->buf[s->P.v[T_O].buf]) || !dbuf_get(s->ctx, &s->lse)) return snprintf(err, en, "copy back failed"), 0;
    *o = tc_alloc(sizeof(float) * (size_t)(s->m.tq * s->m.H * s->m.D));
    extract(s, T_O, *o);
    *lse = tc_alloc(sizeof(float) * (size_t)s->n_lse);
    memcpy(*lse, (const float *)s->lse.host + LSE_GUARD, sizeof(float) * (size_t)s->n_lse);
    return 1;
}

// One gradient of the two runs. cls per row: 0 unchecked, 1 |x1 - x0| <= 2^-6 |x0| + 2^-9 amax
// (amax: max |x0| over the class-1 elements; exact: x1 == x0) with both finite, 2 exactly 0 in both
// runs. Appends findings to msg; returns the worst |x1 - x0| / bound seen.
static double unseen_grad_cmp(const char *name, const float *g0, const float *g1, const uint8_t *cls, int64_t rows,
                              int64_t row, int exact, char *msg, size_t n) {
    double amax = 0, worst = 0, worst_d = 0, worst_b = 0;
    int64_t n_chk = 0, nf0 = 0, nf1 = 0, n_off = 0, n_zero = 0, worst_r = -1;
    for (int64_t e = 0; e < rows * row; e++)
        if (cls[e / row] == 1 && isfinite(g0[e]) && fabs((double)g0[e]) > amax) amax = fabs((double)g0[e]);
    for (int64_t e = 0; e < rows * row; e++) {
        if (cls[e / row] == 2) {
            n_zero += g0[e] != 0.f || g1[e] != 0.f;
            continue;
        }
        if (cls[e / row] != 1) continue;
        n_chk++;
        nf0 += !isfinite(g0[e]), nf1 += !isfinite(g1[e]);
        if (!isfinite(g0[e]) || !isfinite(g1[e])) continue;
        const double d = fabs((double)g1[e] - (double)g0[e]), b = exact ? 0 : 0x1p-6 * fabs((double)g0[e]) + 0x1p-9 * amax;
        n_off += d > b;
        const double ratio = b > 0 ? d / b : d > 0 ? INFINITY : 0;
        if (ratio > worst) worst = ratio, worst_d = d, worst_b = b, worst_r = e / row;
    }
    size_t k = strlen(msg);
    if (nf0)
        k += (size_t)snprintf(msg + k, n - k, " | %s: %lld of %lld checked values NaN / Inf in the run on finite data", name,
                              (long long)nf0, (long long)n_chk);
    if (nf1 && k < n)
        k += (size_t)snprintf(msg + k, n - k, " | %s: %lld of %lld checked values NaN / Inf in the poisoned run", name,
                              (long long)nf1, (long long)n_chk);
    if (n_off && k < n)
        k += (size_t)snprintf(msg + k, n - k, " | %s: %lld of %lld values beyond tolerance (worst: row %lld, |diff| %.3g > %.3g)",
                              name, (long long)n_off, (long long)n_chk, (long long)worst_r, worst_d, worst_b);
    if (n_zero && k < n)
        snprintf(msg + k, n - k, " | %s: %lld values of the key rows past seqused_k not 0", name, (long long)n_zero);
    return worst;
}

// Key rows that no checked query may see hold K = NaN and V = Inf: varlen, all of sequence 1 (the
// CUDA forward loads key blocks by TMA, which reads past a sequence's end into the next one);
// seqused_k (batch mode), every row past seqused_k (the cache's unused tail). Masked scores give
// P = 0, but 0 * Inf in P V is NaN, so those rows must never reach P V: O and lse of sequences 0
// and 2 (varlen) or of every sequence (seqused_k) must be bit-identical to a run on finite data.
// Varlen also poisons sequence 1's Q (NaN) and dO (+Inf): its tiles sit next to 0's and 2's in
// every packed tensor, so a backward block that strays across a boundary picks them up.
// The backward runs from each run's own O and lse; its dQ is summed in fp32 by atomics on CUDA, so
// the checked dQ / dK / dV rows are compared within a tolerance, not bitwise, except in the
// deterministic mode (each case runs in both), where they must be bit-identical too. Key rows at
// and past seqused_k are seen by no query: their dK / dV must be exactly 0 in both runs.
// Every compiled CUDA head dim (key blocks of 128, 128 and 80), GQA, causal and not; seqlen_k >= 1024,
// so that the CUDA forward runs its TMA kernel (flashc_cuda_fwd_sm90_ragged_tma). The clean run's
// checked rows must be free of NaN (else two NaN runs would compare equal).
static void unseen_rows_case(tbackend *be, flashc_dtype dt, int D, int causal, int used, int det) {
    char line[256];
    snprintf(line, sizeof line, "%s rows holding NaN / Inf %s %s%s%s H=4/2 D=%d", used ? "seqused_k: unused" : "varlen: neighbour",
             be->name, tc_dtype_name(dt), causal ? " causal" : "", det ? " deterministic" : "", D);
    if (!wanted(line)) return;
    tc_running(line);
    tcase c = mk(3, 4, 2, 0, 0, D, dt);
    c.causal = causal;
    const int lq[3] = {90, 130, 170}, lk[3] = {100, 200, 1100};
    if (used) {
        c.Sq = 130, c.Sk = 1100, c.used = 1, c.uk[0] = 100, c.uk[1] = 7, c.uk[2] = 1030;
    } else {
        set_varlen(&c, 3, lq, lk);
        c.Sq = 170, c.Sk = 1100;
    }
    tc_rng rng = tc_rng_make(g_seed, 0x3c + (uint64_t)D + 2u * (uint64_t)causal + 4u * (uint64_t)used);
    refdata R;
    ref_build(&R, &c, &rng);
    const dims *m = &R.m;
    float *x[2] = {NULL, NULL}, *l[2] = {NULL, NULL}, *g[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
    const int64_t row = (int64_t)c.H * D, nq = m->tq * row, rowk = (int64_t)c.Hkv * D, nk = m->tk * rowk;
    char err[300] = "";
    for (int run = 0; run < 2 && !err[0]; run++) {
        if (run == 1) { // poison the unseen key rows (and varlen: sequence 1's queries and dO)
            for (int b = used ? 0 : 1; b < (used ? c.B : 2); b++) {
                const int64_t r0 = used ? (int64_t)b * c.Sk + c.uk[b] : m->cuk[b], r1 = used ? (int64_t)(b + 1) * c.Sk : m->cuk[b + 1];
                for (int64_t e = r0 * c.Hkv * D; e < r1 * c.Hkv * D; e++) R.k[e] = NAN, R.v[e] = INFINITY;
            }
            if (!used)
                for (int64_t e = m->cuq[1] * row; e < m->cuq[2] * row; e++) R.q[e] = NAN, R.dout[e] = INFINITY;
        }
        session s;
        if (!session_open(&s, be->ctx, &c, &R, 0)) {
            snprintf(err, sizeof err, "setup: %s", s.err);
        } else {
            s.d.deterministic = det;
            if (fwd_outputs(&s, &x[run], &l[run], err, sizeof err)) {
                // the backward, from this session's O and lse (still in the backend's memory)
                const int ts[3] = {T_DQ, T_DK, T_DV};
                flashc_status st = session_bwd(&s, 0);
                if (st != FLASHC_OK) snprintf(err, sizeof err, "flashc_bwd: %s", flashc_ctx_last_error(be->ctx));
                for (int i = 0; i < 3 && !err[0]; i++) {
                    if (!dbuf_get(be->ctx, &s.buf[s.P.v[ts[i]].buf])) {
                        snprintf(err, sizeof err, "copy back failed");
                        break;
                    }
                    g[run][i] = tc_alloc(sizeof(float) * (size_t)(i ? nk : nq));
                    extract(&s, ts[i], g[run][i]);
                }
            }
        }
        session_close(&s);
    }
    if (err[0]) {
        tc_fail("%s: %s", line, err);
    } else {
        // checked query rows: varlen, those of sequences 0 and 2; lse is (B, H, Sq) or (H, total_q)
        int64_t bad_o = 0, bad_l = 0, n_chk = 0, n_nan = 0;
        for (int64_t r = 0; r < m->tq; r++) {
            if (!used && r >= m->cuq[1] && r < m->cuq[2]) continue;
            n_chk++;
            for (int64_t e = 0; e < row; e++) n_nan += isnan(x[0][r * row + e]);
            bad_o += memcmp(x[0] + r * row, x[1] + r * row, sizeof(float) * (size_t)row) != 0;
            for (int h = 0; h < c.H; h++) {
                const int64_t li = used ? ((r / c.Sq) * c.H + h) * c.Sq + r % c.Sq : (int64_t)h * m->tq + r;
                bad_l += memcmp(&l[0][li], &l[1][li], sizeof(float)) != 0;
                n_nan += isnan(l[0][li]);
            }
        }
        char msg[1024] = "";
        if (n_nan) snprintf(msg, sizeof msg, " | %lld NaN in O / lse of the run on finite data", (long long)n_nan);
        else if (bad_o || bad_l)
            snprintf(msg, sizeof msg, " | %lld of %lld rows of O and %lld lse values changed", (long long)bad_o, (long long)n_chk,
                     (long long)bad_l);
        // backward rows: dQ as the forward's; dK / dV, varlen: keys of sequences 0 and 2; seqused_k:
        // keys below seqused_k within tolerance, the rest exactly 0
        uint8_t *cq = tc_alloc((size_t)m->tq + 1), *ck = tc_alloc((size_t)m->tk + 1);
        for (int64_t r = 0; r < m->tq; r++) cq[r] = used || r < m->cuq[1] || r >= m->cuq[2];
        for (int64_t r = 0; r < m->tk; r++)
            ck[r] = used ? (r % c.Sk < c.uk[r / c.Sk] ? 1 : 2) : (uint8_t)(r < m->cuk[1] || r >= m->cuk[2]);
        static const char *gname[3] = {"dQ", "dK", "dV"};
        double worst = 0;
        for (int i = 0; i < 3; i++) {
            double w = unseen_grad_cmp(gname[i], g[0][i], g[1][i], i ? ck : cq, i ? m->tk : m->tq, i ? rowk : row, det, msg, sizeof msg);
            if (w > worst) worst = w;
        }
        free(cq), free(ck);
        if (msg[0]) tc_fail("%s%s", line, msg);
        else if (det) tc_pass("%s  %lld rows bit-identical (fwd), dQ/dK/dV bit-identical", line, (long long)n_chk);
        else tc_pass("%s  %lld rows bit-identical (fwd), dQ/dK/dV within tolerance (worst %.2g of bound)", line, (long long)n_chk, worst);
    }
    for (int run = 0; run < 2; run++) {
        free(x[run]), free(l[run]);
        for (int i = 0; i < 3; i++) free(g[run][i]);
    }
    ref_free(&R);
}

static void unseen_rows_check(tbackend *be) {
    const int Ds[3] = {64, 128, 256};
    for (int di = 1; di < 3; di++) // bf16, f16 (f32 has no CUDA tensor-core path)
        for (int dd = 0; dd < 3; dd++)
            for (int causal = 0; causal < 2; causal++)
                for (int used = 0; used < 2; used++)
                    for (int det = 0; det < 2; det++) unseen_rows_case(be, DT3[di], Ds[dd], causal, used, det);
}

// A NaN in q, k or v propagates as it does in the reference (flashc.h states it): a forward must
// not turn it into a row with no key (O = 0, lse = +inf: the CPU's exp2 once clamped NaN to 0, so
// l_i = 0) nor drop the key it sits in (finite garbage). One element is poisoned, in sequence
// 1 of 2 or 3:
//   q row i, head h          -> that row's O (all of it) and lse are NaN
//   k row j, kv head g       -> every row of heads in group g that sees key j: O and lse NaN; rows
//                               that do not see j (masked) are unaffected: the mask must replace
//                               the NaN score, not add to it
//   v row j, kv head g, e    -> the rows that see key j: O element e NaN, the rest unaffected; rows
//                               of the group that do not see j may get NaN at e (P = 0 times NaN in
//                               P V, as in SDPA's math path), nothing else
// Every other element (other sequences, heads, rows, elements) must be finite where the clean run's
// is and within |x - x0| <= 2^-6 |x0| + 2^-9 max|x0| of that clean run (O; lse: 1e-5 (1 + |x0|)):
// a NaN may not leak, a tile may not be miscomputed around it. Shapes: the CPU's tile kernel and
// the GPU's forward tiles (129 x 300, causal, several key blocks), decode (seqlen_q 1, softcap; the
// CPU and GPU decode kernels, split over the keys), varlen with ALiBi, and, on the GPU only,
// 2048 x 2048 without a mask (the Hopper forward splits its last tiles' keys between CTAs and merges
// them by their lse).
enum { NAN_Q, NAN_K, NAN_V };

static void nan_case(tbackend *be, flashc_dtype dt, int D, int shape, int what) {
    tcase c;
    int pb = 1, pi, ph, pj, pg, pe = D / 3; // sequence, query row / head, key row / kv head, element
    if (shape == 0) {
        c = mk(2, 4, 2, 129, 300, D, dt), c.causal = 1;
        pi = 100, ph = 3, pj = 200, pg = 1; // rows < 29 do not see key 200
    } else if (shape == 1) {
        c = mk(2, 4, 2, 1, 1000, D, dt), c.softcap = 30.f;
        pi = 0, ph = 2, pj = 517, pg = 0;
    } else if (shape == 2) {
        const int lq[3] = {5, 130, 17}, lk[3] = {40, 300, 1};
        c = mk(3, 4, 2, 0, 0, D, dt), c.causal = 1, c.alibi = 1;
        set_varlen(&c, 3, lq, lk);
        c.Sq = 130, c.Sk = 300;
        pi = 77, ph = 1, pj = 250, pg = 1;
    } else {
        c = mk(2, 2, 2, 2048, 2048, D, dt);
        pi = 1500, ph = 1, pj = 1800, pg = 0;
    }
    char line[512], desc[400];
    case_desc(desc, sizeof desc, &c);
    snprintf(line, sizeof line, "NaN in %s propagates %s %s %s", what == NAN_Q ? "q" : what == NAN_K ? "k" : "v", be->name,
             tc_dtype_name(dt), desc);
    if (!wanted(line)) return;
    tc_running(line);
    tc_rng rng = tc_rng_make(g_seed, 0x4e + 8u * (uint64_t)D + 2u * (uint64_t)shape + 1024u * (uint64_t)what);
    refdata R;
    ref_inputs(&R, &c, &rng);
    const dims *m = &R.m;
    const int G = c.H / c.Hkv;
    const int64_t row = (int64_t)c.H * D, nq = m->tq * row;
    float *x[2] = {NULL, NULL}, *l[2] = {NULL, NULL};
    char err[300] = "";
    for (int run = 0; run < 2 && !err[0]; run++) {
        if (run == 1) {
            flashc_seq s = flashc__seq(&R.p, pb);
            if (what == NAN_Q) R.q[(qrow(&R.p, pb, &s, pi) * c.H + ph) * D + pe] = NAN;
            else (what == NAN_K ? R.k : R.v)[(krow(&R.p, pb, &s, pj) * c.Hkv + pg) * D + pe] = NAN;
        }
        session s;
        if (!session_open(&s, be->ctx, &c, &R, 0)) {
            snprintf(err, sizeof err, "setup: %s", s.err);
        } else if (may_refuse(be) && flashc_supports(be->ctx, &s.d) == FLASHC_ERR_UNSUPPORTED) {
            snprintf(err, sizeof err, "unsupported");
        } else {
            fwd_outputs(&s, &x[run], &l[run], err, sizeof err);
        }
        session_close(&s);
    }
    if (!strcmp(err, "unsupported")) {
        tc_skip("%s: unsupported: %s", line, flashc_ctx_last_error(be->ctx));
    } else if (err[0]) {
        tc_fail("%s: %s", line, err);
    } else {
        double amax = 0;
        for (int64_t e = 0; e < nq; e++)
            if (isfinite(x[0][e]) && fabs((double)x[0][e]) > amax) amax = fabs((double)x[0][e]);
        int64_t n_want = 0, n_missing = 0, n_clean_nan = 0, n_leak = 0, n_off = 0, first = -1;
        for (int b = 0; b < c.B; b++) {
            flashc_seq s = flashc__seq(&R.p, b);
            for (int64_t i = 0; i < s.sq; i++) {
                int64_t lo, hi;
                flashc__key_range(&R.p, i, s.sq, s.sk, &lo, &hi);
                const int64_t r = qrow(&R.p, b, &s, i);
                for (int h = 0; h < c.H; h++) {
                    const int in_group = b == pb && h / G == pg, sees = in_group && lo <= pj && pj < hi;
                    const int row_nan = what == NAN_Q ? b == pb && i == pi && h == ph && lo < hi : what == NAN_K && sees;
                    const int64_t li = flashc__lse_off(&R.p, b, h, &s, i);
                    for (int64_t d = -1; d < D; d++) { // d = -1: the lse
                        const float x0 = d < 0 ? l[0][li] : x[0][(r * c.H + h) * D + d];
                        const float x1 = d < 0 ? l[1][li] : x[1][(r * c.H + h) * D + d];
                        const int want = row_nan || (what == NAN_V && sees && d == pe);
                        const int may = what == NAN_V && in_group && !sees && d == pe;
                        int bad = 0;
                        n_clean_nan += isnan(x0);
                        if (want) n_want++, bad = !isnan(x1), n_missing += bad;
                        else if (isnan(x1)) bad = !may, n_leak += bad;
                        else if (x1 != x0) {
                            const double dx = fabs((double)x1 - (double)x0);
                            bad = !(d < 0 ? dx <= 1e-5 * (1 + fabs((double)x0)) : dx <= 0x1p-6 * fabs((double)x0) + 0x1p-9 * amax);
                            n_off += bad;
                        }
                        if (bad && first < 0) first = (r * c.H + h) * (D + 1) + d + 1;
                    }
                }
            }
        }
        char msg[600] = "";
        size_t k = 0;
        if (n_clean_nan) k += (size_t)snprintf(msg + k, sizeof msg - k, " | %lld NaN in O / lse of the run on finite data", (long long)n_clean_nan);
        if (n_missing)
            k += (size_t)snprintf(msg + k, sizeof msg - k, " | %lld of %lld values that must be NaN are not", (long long)n_missing, (long long)n_want);
        if (n_leak) k += (size_t)snprintf(msg + k, sizeof msg - k, " | %lld values NaN that must not be", (long long)n_leak);
        if (n_off) k += (size_t)snprintf(msg + k, sizeof msg - k, " | %lld values moved beyond tolerance", (long long)n_off);
        if (first >= 0) {
            char what_at[32] = "lse";
            if (first % (D + 1)) snprintf(what_at, sizeof what_at, "element %lld", (long long)(first % (D + 1) - 1));
            snprintf(msg + k, sizeof msg - k, " (first: query row %lld, head %lld, %s)", (long long)(first / (D + 1) / c.H),
                     (long long)(first / (D + 1) % c.H), what_at);
        }
        if (msg[0]) tc_fail("%s%s", line, msg);
        else tc_pass("%s  %lld values NaN as they must be", line, (long long)n_want);
    }
    for (int run = 0; run < 2; run++) free(x[run]), free(l[run]);
    ref_free(&R);
}

static void nan_check(tbackend *be) {
    const int Ds[3] = {64, 128, 256};
    for (int what = 0; what < 3; what++)
        for (int shape = 0; shape < 3; shape++)
            for (int di = 0; di < 3; di++)
                for (int dd = 0; dd < 3; dd++) nan_case(be, DT3[di], Ds[dd], shape, what);
    if (!strcmp(be->name, "cuda"))
        for (int what = 0; what < 3; what++)
            for (int dd = 0; dd < 2; dd++) nan_case(be, FLASHC_DTYPE_BF16, Ds[dd], 3, what);
}

// The CPU row caches (the forward's K_j / V_j blocks, the backward's Q_i / dO_i rows) each get a
// share of a byte budget per thread: on 16 threads at seqlen 2048, D = 128 they hold fewer rows than
// a thread walks, so their overflow path (the last slot shared) runs, against the reference.
static void cpu_many_threads_check(void) {
    flashc_ctx *ctx = NULL;
    if (flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, 16) != FLASHC_OK) {
        tc_fail("cpu16: flashc_ctx_create(CPU, 16 threads) failed (%s)", flashc_ctx_last_error(NULL));
        return;
    }
    tbackend be = {.name = "cpu16", .ctx = ctx, .all_cases = 1};
    for (int causal = 0; causal < 2; causal++) {
        tcase c = mk(1, 1, 1, 2048, 2048, 128, FLASHC_DTYPE_F32);
        c.causal = causal;
        char desc[400];
        case_desc(desc, sizeof desc, &c);
        tc_rng rng = tc_rng_make(g_seed, 0x16 + (uint64_t)causal);
        refdata R;
        ref_build(&R, &c, &rng);
        run_on(&be, &c, causal, &R, desc);
        ref_free(&R);
    }
    flashc_ctx_free(ctx);
}

// ------------------------------------------------------------------------------------------------
// main

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(void) {
    fprintf(stderr, "usage: test_flashc [--backend cpu|cuda|ref] [--quick] [--filter STR] [--seed N] [--fuzz N] [-v]\n");
    exit(2);
}

static void open_backend(const char *name, flashc_backend kind, int all_cases) {
    flashc_ctx *ctx = NULL;
    flashc_status st = flashc_ctx_create(&ctx, kind, 0);
    if (st == FLASHC_ERR_NO_BACKEND && kind == FLASHC_BACKEND_CUDA) {
        const char *why = flashc_ctx_last_error(NULL); // not compiled in, or no usable device
        // asked for by name (gpu.sh), no backend is a failure: 0 checks must not read as a pass
        if (g_backend) tc_fail("cuda: --backend cuda, but the backend is unavailable (%s)", why);
        else printf("cuda: skipped (%s)\n", why);
        return;
    }
    if (st != FLASHC_OK) {
        tc_fail("%s: flashc_ctx_create = %s (%s)", name, flashc_status_string(st), flashc_ctx_last_error(NULL));
        return;
    }
    if (flashc_ctx_backend(ctx) != kind) tc_fail("%s: flashc_ctx_backend = %d, want %d", name, (int)flashc_ctx_backend(ctx), (int)kind);
    g_be[g_nbe].name = name, g_be[g_nbe].ctx = ctx, g_be[g_nbe].all_cases = all_cases;
    g_nbe++;
}

int main(int argc, char **argv) {
    int fuzz = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) tc_verbose = 1;
        else if (!strcmp(argv[i], "--quick")) g_quick = 1;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) g_backend = argv[++i];
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc) g_filter = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--fuzz") && i + 1 < argc && (fuzz = atoi(argv[i + 1])) > 0) i++;
        else usage();
    }
    if (g_backend && strcmp(g_backend, "cpu") && strcmp(g_backend, "cuda") && strcmp(g_backend, "ref")) usage();
    if (fuzz > (int)(sizeof g_cases / sizeof g_cases[0])) usage();
    double t0 = now_s();
    tc_catch_crashes();
    if (fuzz) fuzz_cases(fuzz);
    else build_cases();

    if (!g_backend || !strcmp(g_backend, "cpu")) open_backend("cpu", FLASHC_BACKEND_CPU, 1);
    if (!g_backend || !strcmp(g_backend, "cuda")) open_backend("cuda", FLASHC_BACKEND_CUDA, 1);
    if (!g_backend || !strcmp(g_backend, "ref")) open_backend("ref", FLASHC_BACKEND_REF, g_backend != NULL);
    g_only_ref = g_backend && !strcmp(g_backend, "ref");
    int n_run = 0;
    for (int ci = 0; ci < g_ncases; ci++) {
        const tcase *c = &g_cases[ci];
        if (g_quick && !c->quick) continue;
        char desc[400];
        case_desc(desc, sizeof desc, c);
        int any = 0;
        for (int b = 0; b < g_nbe && !any; b++) {
            if (!g_be[b].all_cases && !c->quick) continue;
            char l[640];
            snprintf(l, sizeof l, "fwd %s %s %s", g_be[b].name, tc_dtype_name(c->dt), desc);
            any |= wanted(l);
            snprintf(l, sizeof l, "bwd %s %s %s", g_be[b].name, tc_dtype_name(c->dt), desc);
            any |= wanted(l);
        }
        if (!any) continue;
        n_run++;
        // fresh inputs per case, reproducible from (--seed, case index) alone
        tc_rng rng = tc_rng_make(g_seed, (uint64_t)ci);
        refdata R;
        ref_build(&R, c, &rng);
        for (int b = 0; b < g_nbe; b++)
            if (g_be[b].all_cases || c->quick) run_on(&g_be[b], c, ci, &R, desc);
        ref_free(&R);
    }
    if (!fuzz && (!g_backend || g_only_ref)) fd_checks();
    for (int b = 0; b < g_nbe && !fuzz; b++) {
        determinism_checks(&g_be[b]);
        lse_null_check(&g_be[b]);
        nokey_inf_v_check(&g_be[b]);
        unseen_inf_v_check(&g_be[b]);
        unseen_rows_check(&g_be[b]);
        nan_check(&g_be[b]);
    }
    if (!fuzz && (!g_backend || !strcmp(g_backend, "cpu"))) thread_checks();
    if (!fuzz && !g_quick && (!g_backend || !strcmp(g_backend, "cpu"))) cpu_many_threads_check();
    for (int b = 0; b < g_nbe; b++) flashc_ctx_free(g_be[b].ctx);
    printf("test_flashc: %d of %d %scases run on %d backend(s)%s in %.1f s\n", n_run, g_ncases, fuzz ? "fuzz " : "",
           g_nbe, g_quick ? " (--quick)" : "", now_s() - t0);
    return tc_summary("test_flashc");
}
