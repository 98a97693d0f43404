// test_bad_input.c -- every invalid argument gets the right status, a message naming it, and no
// write and no crash.
//
// Each case starts from a valid problem (B=2, Sq=5, Sk=7, H=4, H_kv=2, D=8, f32, host memory),
// breaks one thing, and calls flashc_fwd / flashc_bwd / flashc_supports (and the workspace-size
// queries, which must answer 0 for a description they reject). It checks:
//   - the status (INVALID_ARG, UNSUPPORTED, WORKSPACE_SMALL, or OK for the controls);
//   - flashc_ctx_last_error names the argument (as a whole identifier: "k" in "k is NULL");
//   - every buffer (outputs poisoned beforehand, and inputs) is byte-for-byte unchanged;
//   - no crash: each case runs in a child process (fork), so a crash fails that case only.
// Runs on the host backends (ref, cpu); on cuda, when present, the description-level cases
// through flashc_supports. Also: flashc_ctx_create's own checks, flashc_ctx_free(NULL),
// flashc_status_string of every code and of unknown values, version functions vs macros.
//
// Usage: build/test_bad_input [-v]. The last line is "N passed, M failed".
#include "test_common.h"

#include <sys/wait.h>
#include <unistd.h>

#define B_ 2
#define SQ 5
#define SK 7
#define H_ 4
#define HKV 2
#define D_ 8
#define NBUF 4096 // floats per buffer: far more than any case addresses

enum { CALL_FWD = 1, CALL_BWD = 2, CALL_SUP = 4, CALL_ALL = 7, DESC = 8 /* a description-level error */ };

typedef struct setup {
    flashc_ctx *ctx;
    flashc_backend kind;
    flashc_attn_desc d;
    float *buf[9];                 // q k v o lse dout dq dk dv
    float *img[9];
    const void *q, *k, *v, *o_in, *dout;
    void *o, *dq, *dk, *dv;
    float *lse;
    const float *lse_in;
    void *ws;
    size_t ws_size;
    void *ws_mem;                  // 64-byte aligned scratch the cases may point ws into
    size_t ws_cap;                 // its size: the largest workspace size + 4096
    int32_t cuq[B_ + 1], cuk[B_ + 1], used[B_];
    float slopes[64];
    int null_desc;                 // pass desc = NULL
    int32_t table[B_ * 2];         // a valid block table for the paged cases
} setup;

static const char *BUF_NAME[9] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};

static void setup_valid(setup *s, flashc_backend kind) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    flashc_status st = flashc_ctx_create(&s->ctx, kind, 2);
    if (st != FLASHC_OK) {
        printf("FAIL  flashc_ctx_create(%d) = %s (%s)\n", (int)kind, flashc_status_string(st), flashc_ctx_last_error(NULL));
        exit(1);
    }
    flashc_attn_desc *d = &s->d;
    d->batch = B_, d->seqlen_q = SQ, d->seqlen_k = SK, d->heads = H_, d->heads_kv = HKV, d->head_dim = D_;
    d->dtype = kind == FLASHC_BACKEND_CUDA ? FLASHC_DTYPE_BF16 : FLASHC_DTYPE_F32; // the GPU takes 16-bit types
    tc_rng r = tc_rng_make(99, 1);
    for (int i = 0; i < 9; i++) {
        s->buf[i] = tc_alloc(NBUF * sizeof(float));
        s->img[i] = tc_alloc(NBUF * sizeof(float));
        int is_out = i == 3 || i == 4 || i >= 6;
        for (int e = 0; e < NBUF; e++) {
            if (is_out) memset(&s->buf[i][e], 0xA5, sizeof(float));
            else s->buf[i][e] = (float)tc_normal(&r);
        }
    }
    for (int i = 0; i < 4 * B_ * SQ * H_; i++) s->buf[4][i] = 1.0f + (float)i * 1e-3f; // an lse the backward can read
    s->q = s->buf[0], s->k = s->buf[1], s->v = s->buf[2], s->o = s->buf[3], s->o_in = s->buf[3];
    s->lse = s->buf[4], s->lse_in = s->buf[4], s->dout = s->buf[5];
    s->dq = s->buf[6], s->dk = s->buf[7], s->dv = s->buf[8];
    // room for the largest workspace this backend wants here (it grows with the thread count),
    // plus slack for the misaligned cases
    size_t wf = flashc_fwd_workspace_size(s->ctx, d), wb = flashc_bwd_workspace_size(s->ctx, d);
    s->ws_cap = (wf > wb ? wf : wb) + 4096;
    s->ws_mem = tc_alloc(s->ws_cap);
    // valid varlen offsets, for the cases that switch varlen on
    s->cuq[0] = 0, s->cuq[1] = 2, s->cuq[2] = 5;
    s->cuk[0] = 0, s->cuk[1] = 7, s->cuk[2] = 7;
    s->used[0] = 3, s->used[1] = 0;
    for (int i = 0; i < 64; i++) s->slopes[i] = 0.25f;
    for (int i = 0; i < B_ * 2; i++) s->table[i] = i;
}

static void setup_free(setup *s) {
    for (int i = 0; i < 9; i++) free(s->buf[i]), free(s->img[i]);
    free(s->ws_mem);
    flashc_ctx_free(s->ctx);
}

static void snapshot(setup *s) {
    for (int i = 0; i < 9; i++) memcpy(s->img[i], s->buf[i], NBUF * sizeof(float));
}

static int unchanged(setup *s, const char *label, const char *call) {
    for (int i = 0; i < 9; i++)
        if (memcmp(s->img[i], s->buf[i], NBUF * sizeof(float))) {
            int e = 0;
            while (e < NBUF && !memcmp(&s->img[i][e], &s->buf[i][e], sizeof(float))) e++;
            printf("FAIL  %s: %s wrote %s[%d] although it failed\n", label, call, BUF_NAME[i], e);
            return 0;
        }
    return 1;
}

static const char *g_backend_name;

// Run the calls of a case and check them; returns 1 if all checks hold.
static int check_case(setup *s, const char *label, flashc_status want, const char *name, int calls) {
    int ok = 1;
    for (int c = 0; c < 3; c++) {
        if (!(calls & (1 << c))) continue;
        const char *call = c == 0 ? "flashc_fwd" : c == 1 ? "flashc_bwd" : "flashc_supports";
        snapshot(s);
        flashc_status st;
        const flashc_attn_desc *d = s->null_desc ? NULL : &s->d;
        if (c == 0) st = flashc_fwd(s->ctx, d, s->q, s->k, s->v, s->o, s->lse, s->ws, s->ws_size, NULL);
        else if (c == 1)
            st = flashc_bwd(s->ctx, d, s->q, s->k, s->v, s->o_in, s->lse_in, s->dout, s->dq, s->dk, s->dv, s->ws,
                            s->ws_size, NULL);
        else st = flashc_supports(s->ctx, d);
        const char *msg = flashc_ctx_last_error(s->ctx);
        if (!msg) {
            printf("FAIL  %s: flashc_ctx_last_error returned NULL\n", label);
            return 0;
        }
        if (st != want) {
            printf("FAIL  %s: %s = %s (%d), want %s (%d); message: \"%s\"\n", label, call, flashc_status_string(st), (int)st,
                   flashc_status_string(want), (int)want, msg);
            ok = 0;
            continue;
        }
        if (want == FLASHC_OK) continue;
        if (name && !tc_names(msg, name)) {
            printf("FAIL  %s: %s: the message does not name '%s': \"%s\"\n", label, call, name, msg);
            ok = 0;
        }
        if (!unchanged(s, label, call)) ok = 0;
        if ((calls & DESC) && c < 2) { // a rejected description has no workspace size
            size_t ws = c == 0 ? flashc_fwd_workspace_size(s->ctx, d) : flashc_bwd_workspace_size(s->ctx, d);
            if (ws != 0) {
                printf("FAIL  %s: flashc_%s_workspace_size = %zu for a description flashc_%s rejects, want 0\n", label,
                       c == 0 ? "fwd" : "bwd", ws, c == 0 ? "fwd" : "bwd");
                ok = 0;
            }
        }
    }
    return ok;
}

// ------------------------------------------------------------------------------------------------
// cases, each in its own process

static int g_fork = 1;

// Returns 1 in the process that must run the case (the child, or this one without fork).
static int case_start(void) {
    if (!g_fork) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) return 1;
    return 0;
}

// In the parent: wait for the child of the case and count its verdict.
static void case_end_parent(const char *label) {
    int status = 0;
    if (wait(&status) < 0) {
        tc_fail("%s: wait failed", label);
        return;
    }
    if (WIFSIGNALED(status)) tc_fail("%s: crashed (signal %d)", label, WTERMSIG(status));
    else if (WEXITSTATUS(status) == 0) tc_pass("%s", label);
    else tc_n_fail++; // the child printed why
}

// CASE(label, want, name, calls, statements that break the valid setup `s`)
static flashc_backend g_kind;

#define CASE(label_, want_, name_, calls_, ...)                                                                        \
    do {                                                                                                               \
        char lab_[300];                                                                                                \
        snprintf(lab_, sizeof lab_, "%s: %s", g_backend_name, label_);                                                 \
        if (case_start()) {                                                                                            \
            setup s_;                                                                                                  \
            setup *s = &s_;                                                                                            \
            setup_valid(s, g_kind);                                                                                    \
            __VA_ARGS__;                                                                                               \
            int ok_ = check_case(s, lab_, want_, name_, calls_);                                                       \
            setup_free(s);                                                                                             \
            if (g_fork) exit(ok_ ? 0 : 1);                                                                             \
            if (ok_) tc_pass("%s", lab_);                                                                              \
            else tc_n_fail++;                                                                                          \
        } else {                                                                                                       \
            case_end_parent(lab_);                                                                     \
        }                                                                                                              \
    } while (0)

#define INV FLASHC_ERR_INVALID_ARG

static void set_stride(int64_t st[3], int64_t a, int64_t b, int64_t c) { st[0] = a, st[1] = b, st[2] = c; }

// Broken strides of one tensor: named "<t>_stride", with `heads` heads and S rows per batch entry.
static void stride_cases(const char *t, int tensor, int heads, int S, int calls) {
    char l[200], nm[32];
    snprintf(nm, sizeof nm, "%s_stride", t);
    int64_t hd = (int64_t)heads * D_, bs = S * hd;
#define ST(s) (tensor == 0 ? (s)->d.q_stride : tensor == 1 ? (s)->d.k_stride : tensor == 2 ? (s)->d.v_stride : \
               tensor == 3 ? (s)->d.o_stride : tensor == 4 ? (s)->d.do_stride : tensor == 5 ? (s)->d.dq_stride :   \
               tensor == 6 ? (s)->d.dk_stride : (s)->d.dv_stride)
    snprintf(l, sizeof l, "%s head stride %d < head_dim %d", nm, D_ - 1, D_);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), bs, hd, D_ - 1));
    snprintf(l, sizeof l, "%s seq stride %lld overlaps the heads (needs %lld)", nm, (long long)(hd - D_), (long long)hd);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), bs, hd - D_, D_));
    snprintf(l, sizeof l, "%s batch stride %lld overlaps the rows", nm, (long long)(bs - 1));
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), bs - 1, hd, D_));
    snprintf(l, sizeof l, "%s zero head stride", nm);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), bs, hd, 0));
    snprintf(l, sizeof l, "%s zero batch stride with batch 2", nm);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), 0, hd, D_));
    snprintf(l, sizeof l, "%s negative head stride", nm);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), bs, hd, -D_));
    snprintf(l, sizeof l, "%s negative seq stride", nm);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), bs, -hd, D_));
    snprintf(l, sizeof l, "%s negative batch stride", nm);
    CASE(l, INV, nm, calls | DESC, set_stride(ST(s), -bs, hd, D_));
    // a valid non-contiguous layout (B, H, S, D) of the same tensor must be accepted
    snprintf(l, sizeof l, "%s (B, H, S, D) layout accepted (control)", nm);
    CASE(l, FLASHC_OK, NULL, calls, set_stride(ST(s), bs, D_, (int64_t)S * D_));
#undef ST
}

static void host_cases(void) {
    CASE("valid problem (control)", FLASHC_OK, NULL, CALL_ALL, (void)s);
    CASE("valid varlen problem (control)", FLASHC_OK, NULL, CALL_ALL, s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("valid, every option on (control)", FLASHC_OK, NULL, CALL_ALL,
         s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk; s->d.seqused_k = s->used; s->d.causal = 1;
         s->d.use_window = 1; s->d.window_left = 2; s->d.window_right = -1; s->d.softcap = 3; s->d.scale = 0.5f;
         s->d.alibi_slopes = s->slopes; s->d.alibi_batch_stride = H_ + 1; s->d.deterministic = 1);
    CASE("fwd with lse = NULL is allowed (control)", FLASHC_OK, NULL, CALL_FWD, s->lse = NULL);
    CASE("window values ignored without use_window (control)", FLASHC_OK, NULL, CALL_ALL,
         s->d.window_left = -7; s->d.window_right = -9);
    CASE("seqlen_q = 0 with batch 2 (control)", FLASHC_OK, NULL, CALL_ALL, s->d.seqlen_q = 0);
    CASE("seqlen_k = 0 with batch 2 (control)", FLASHC_OK, NULL, CALL_ALL, s->d.seqlen_k = 0);

    CASE("desc = NULL", INV, "desc", CALL_ALL | DESC, s->null_desc = 1);

    // NULL tensors
    CASE("fwd q = NULL", INV, "q", CALL_FWD, s->q = NULL);
    CASE("fwd k = NULL", INV, "k", CALL_FWD, s->k = NULL);
    CASE("fwd v = NULL", INV, "v", CALL_FWD, s->v = NULL);
    CASE("fwd o = NULL", INV, "o", CALL_FWD, s->o = NULL);
    CASE("bwd q = NULL", INV, "q", CALL_BWD, s->q = NULL);
    CASE("bwd k = NULL", INV, "k", CALL_BWD, s->k = NULL);
    CASE("bwd v = NULL", INV, "v", CALL_BWD, s->v = NULL);
    CASE("bwd o = NULL", INV, "o", CALL_BWD, s->o_in = NULL);
    CASE("bwd lse = NULL", INV, "lse", CALL_BWD, s->lse_in = NULL);
    CASE("bwd dout = NULL", INV, "dout", CALL_BWD, s->dout = NULL);
    CASE("bwd dq = NULL", INV, "dq", CALL_BWD, s->dq = NULL);
    CASE("bwd dk = NULL", INV, "dk", CALL_BWD, s->dk = NULL);
    CASE("bwd dv = NULL", INV, "dv", CALL_BWD, s->dv = NULL);

    // sizes
    CASE("batch = 0", INV, "batch", CALL_ALL | DESC, s->d.batch = 0);
    CASE("batch = -1", INV, "batch", CALL_ALL | DESC, s->d.batch = -1);
    CASE("heads = 0", INV, "heads", CALL_ALL | DESC, s->d.heads = 0);
    CASE("heads = -4", INV, "heads", CALL_ALL | DESC, s->d.heads = -4);
    CASE("heads_kv = 0", INV, "heads_kv", CALL_ALL | DESC, s->d.heads_kv = 0);
    CASE("heads_kv = -2", INV, "heads_kv", CALL_ALL | DESC, s->d.heads_kv = -2);
    CASE("head_dim = 0", INV, "head_dim", CALL_ALL | DESC, s->d.head_dim = 0);
    CASE("head_dim = -8", INV, "head_dim", CALL_ALL | DESC, s->d.head_dim = -8);
    CASE("seqlen_q = -1", INV, "seqlen_q", CALL_ALL | DESC, s->d.seqlen_q = -1);
    CASE("seqlen_k = -1", INV, "seqlen_k", CALL_ALL | DESC, s->d.seqlen_k = -1);
    CASE("seqlen_q = 2^30 + 1", INV, "seqlen_q", CALL_ALL | DESC, s->d.seqlen_q = (1 << 30) + 1);
    CASE("seqlen_k = INT32_MIN", INV, "seqlen_k", CALL_ALL | DESC, s->d.seqlen_k = INT32_MIN);
    CASE("heads 4 % heads_kv 3 != 0", INV, "heads_kv", CALL_ALL | DESC, s->d.heads_kv = 3);
    CASE("heads_kv 8 > heads 4", INV, "heads_kv", CALL_ALL | DESC, s->d.heads_kv = 8);

    // dtypes
    CASE("dtype E4M3 backward (fp8 is forward only)", FLASHC_ERR_UNSUPPORTED, "dtype", CALL_BWD, s->d.dtype = FLASHC_DTYPE_E4M3);
    CASE("q_descale with a non-E4M3 dtype", INV, "q_descale", CALL_ALL | DESC, s->d.q_descale = 2.f);
    CASE("reserved32 = 1", INV, "reserved32", CALL_ALL | DESC, s->d.reserved32 = 1);
    CASE("dtype = 7 (not a flashc_dtype)", INV, "dtype", CALL_ALL | DESC, s->d.dtype = (flashc_dtype)7);
    CASE("dtype = -1 (not a flashc_dtype)", INV, "dtype", CALL_ALL | DESC, s->d.dtype = (flashc_dtype)-1);

    // strides
    stride_cases("q", 0, H_, SQ, CALL_ALL);
    stride_cases("k", 1, HKV, SK, CALL_ALL);
    stride_cases("v", 2, HKV, SK, CALL_ALL);
    stride_cases("o", 3, H_, SQ, CALL_ALL);
    stride_cases("do", 4, H_, SQ, CALL_BWD | CALL_SUP);
    stride_cases("dq", 5, H_, SQ, CALL_BWD | CALL_SUP);
    stride_cases("dk", 6, HKV, SK, CALL_BWD | CALL_SUP);
    stride_cases("dv", 7, HKV, SK, CALL_BWD | CALL_SUP);
    CASE("varlen q seq stride overlaps heads", INV, "q_stride", CALL_ALL | DESC,
         s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk; set_stride(s->d.q_stride, 0, D_, D_));

    // varlen offsets and seqused_k
    CASE("cu_seqlens_q not monotone", INV, "cu_seqlens_q", CALL_ALL | DESC,
         s->cuq[1] = 4; s->cuq[2] = 3; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("cu_seqlens_k not monotone", INV, "cu_seqlens_k", CALL_ALL | DESC,
         s->cuk[1] = 5; s->cuk[2] = 2; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("cu_seqlens_q sequence longer than seqlen_q", INV, "cu_seqlens_q", CALL_ALL | DESC,
         s->cuq[1] = SQ + 1; s->cuq[2] = SQ + 2; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("cu_seqlens_k sequence longer than seqlen_k", INV, "cu_seqlens_k", CALL_ALL | DESC,
         s->cuk[1] = 1; s->cuk[2] = SK + 2; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("cu_seqlens_q[0] = -1", INV, "cu_seqlens_q", CALL_ALL | DESC,
         s->cuq[0] = -1; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("cu_seqlens_k[0] = -3", INV, "cu_seqlens_k", CALL_ALL | DESC,
         s->cuk[0] = -3; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);
    CASE("only cu_seqlens_q given", INV, "cu_seqlens_k", CALL_ALL | DESC, s->d.cu_seqlens_q = s->cuq);
    CASE("only cu_seqlens_k given", INV, "cu_seqlens_q", CALL_ALL | DESC, s->d.cu_seqlens_k = s->cuk);
    CASE("seqused_k[1] = -1 (batch mode)", INV, "seqused_k", CALL_ALL | DESC, s->used[1] = -1; s->d.seqused_k = s->used);
    CASE("seqused_k[0] = -5 (varlen)", INV, "seqused_k", CALL_ALL | DESC,
         s->used[0] = -5; s->d.seqused_k = s->used; s->d.cu_seqlens_q = s->cuq; s->d.cu_seqlens_k = s->cuk);

    // mask, scale, softcap, flags
    CASE("window_left = -2", INV, "window_left", CALL_ALL | DESC, s->d.use_window = 1; s->d.window_left = -2; s->d.window_right = 0);
    CASE("window_right = -2", INV, "window_right", CALL_ALL | DESC, s->d.use_window = 1; s->d.window_left = 0; s->d.window_right = -2);
    CASE("use_window = 2", INV, "use_window", CALL_ALL | DESC, s->d.use_window = 2);
    CASE("causal = 2", INV, "causal", CALL_ALL | DESC, s->d.causal = 2);
    CASE("causal = -1", INV, "causal", CALL_ALL | DESC, s->d.causal = -1);
    CASE("deterministic = 3", INV, "deterministic", CALL_ALL | DESC, s->d.deterministic = 3);
    CASE("scale = NaN", INV, "scale", CALL_ALL | DESC, s->d.scale = NAN);
    CASE("scale = -0.5", INV, "scale", CALL_ALL | DESC, s->d.scale = -0.5f);
    CASE("scale = +inf", INV, "scale", CALL_ALL | DESC, s->d.scale = INFINITY);
    CASE("scale = -inf", INV, "scale", CALL_ALL | DESC, s->d.scale = -INFINITY);
    CASE("softcap = NaN", INV, "softcap", CALL_ALL | DESC, s->d.softcap = NAN);
    CASE("softcap = -1", INV, "softcap", CALL_ALL | DESC, s->d.softcap = -1.0f);
    CASE("softcap = +inf", INV, "softcap", CALL_ALL | DESC, s->d.softcap = INFINITY);
    CASE("alibi_batch_stride = 1 < heads", INV, "alibi_batch_stride", CALL_ALL | DESC,
         s->d.alibi_slopes = s->slopes; s->d.alibi_batch_stride = 1);
    CASE("alibi_batch_stride = -4", INV, "alibi_batch_stride", CALL_ALL | DESC,
         s->d.alibi_slopes = s->slopes; s->d.alibi_batch_stride = -4);
    CASE("reserved[0] = 1", INV, "reserved", CALL_ALL | DESC, s->d.reserved[0] = 1);
    CASE("reserved[last] = -1", INV, "reserved", CALL_ALL | DESC,
         s->d.reserved[sizeof s->d.reserved / sizeof s->d.reserved[0] - 1] = -1);

    // paged K/V (forward only): pool of 4 pages of 4 rows, 2 pages per sequence (Sk = 7)
#define PAGED(s)                                                                                                       \
    (s)->d.block_table = (s)->table, (s)->d.block_table_stride = 2, (s)->d.page_size = 4, (s)->d.num_pages = 4
    CASE("page_size = 0", INV, "page_size", CALL_FWD | CALL_SUP | DESC, PAGED(s); s->d.page_size = 0);
    CASE("num_pages = 0", INV, "num_pages", CALL_FWD | CALL_SUP | DESC, PAGED(s); s->d.num_pages = 0);
    CASE("block_table_stride = 1 < ceil(7 / 4)", INV, "block_table_stride", CALL_FWD | CALL_SUP | DESC,
         PAGED(s); s->d.block_table_stride = 1);
    CASE("block_table entry = num_pages", INV, "block_table", CALL_FWD | CALL_SUP | DESC, PAGED(s); s->table[1] = 4);
    CASE("block_table entry = -1", INV, "block_table", CALL_FWD | CALL_SUP | DESC, PAGED(s); s->table[2] = -1);
    CASE("block_table entry = -1e8 at page_size = 2^31 - 1 (the page count in int wrapped: not checked)", INV,
         "block_table", CALL_FWD | CALL_SUP | DESC, PAGED(s); s->d.page_size = INT32_MAX; s->table[0] = -100000000);
    CASE("k_stride pages overlap (page stride < page rows)", INV, "k_stride", CALL_FWD | CALL_SUP | DESC,
         PAGED(s); set_stride(s->d.k_stride, 3 * HKV * D_, HKV * D_, D_));
    CASE("bwd with a block_table (paged K/V is forward only)", FLASHC_ERR_UNSUPPORTED, "block_table", CALL_BWD | CALL_SUP,
         PAGED(s));
#undef PAGED

    // workspace
    CASE("fwd workspace misaligned (8 bytes off)", INV, "workspace", CALL_FWD,
         s->ws = (char *)s->ws_mem + 8; s->ws_size = s->ws_cap - 8);
    CASE("bwd workspace misaligned (4 bytes off)", INV, "workspace", CALL_BWD,
         s->ws = (char *)s->ws_mem + 4; s->ws_size = s->ws_cap - 4);
    CASE("fwd workspace NULL with workspace_size 1024", INV, "workspace", CALL_FWD, s->ws_size = 1024);
    CASE("bwd workspace NULL with workspace_size 1024", INV, "workspace", CALL_BWD, s->ws_size = 1024);
    CASE("fwd caller workspace of exactly the queried size (control)", FLASHC_OK, NULL, CALL_FWD,
         s->ws_size = flashc_fwd_workspace_size(s->ctx, &s->d); s->ws = s->ws_size ? s->ws_mem : NULL);
    CASE("bwd caller workspace of exactly the queried size (control)", FLASHC_OK, NULL, CALL_BWD,
         s->ws_size = flashc_bwd_workspace_size(s->ctx, &s->d); s->ws = s->ws_size ? s->ws_mem : NULL);

    // outputs aliasing inputs
    CASE("o == q", INV, "o", CALL_FWD, s->o = (void *)s->q);
    CASE("o == k", INV, "o", CALL_FWD, s->o = (void *)s->k);
    CASE("o == v", INV, "o", CALL_FWD, s->o = (void *)s->v);
    CASE("lse == o", INV, "lse", CALL_FWD, s->lse = (float *)s->o);
    CASE("dq == q", INV, "dq", CALL_BWD, s->dq = (void *)s->q);
    CASE("dk == k", INV, "dk", CALL_BWD, s->dk = (void *)s->k);
    CASE("dv == v", INV, "dv", CALL_BWD, s->dv = (void *)s->v);
    CASE("dq == dout", INV, "dq", CALL_BWD, s->dq = (void *)s->dout);
    CASE("dk == o", INV, "dk", CALL_BWD, s->dk = (void *)s->o_in);
    CASE("dv == lse", INV, "dv", CALL_BWD, s->dv = (void *)s->lse_in);
    CASE("dk == dq", INV, "dk", CALL_BWD, s->dk = s->dq);
    CASE("dv == dk", INV, "dv", CALL_BWD, s->dv = s->dk);
}

// Workspace-too-small needs the backend's workspace size; a backend that needs none cannot fail it.
static void workspace_small_cases(void) {
    setup s;
    setup_valid(&s, g_kind);
    size_t nf = flashc_fwd_workspace_size(s.ctx, &s.d), nb = flashc_bwd_workspace_size(s.ctx, &s.d);
    setup_free(&s);
    char l[200];
    if (nf) {
        snprintf(l, sizeof l, "fwd workspace_size = %zu, one byte short", nf - 1);
        CASE(l, FLASHC_ERR_WORKSPACE_SMALL, "workspace_size", CALL_FWD, s->ws = s->ws_mem; s->ws_size = nf - 1);
    } else {
        tc_skip("%s: fwd workspace too small: this backend needs no forward workspace", g_backend_name);
    }
    if (nb) {
        snprintf(l, sizeof l, "bwd workspace_size = %zu, one byte short", nb - 1);
        CASE(l, FLASHC_ERR_WORKSPACE_SMALL, "workspace_size", CALL_BWD, s->ws = s->ws_mem; s->ws_size = nb - 1);
    } else {
        tc_skip("%s: bwd workspace too small: this backend needs no backward workspace", g_backend_name);
    }
}

// ------------------------------------------------------------------------------------------------
// API-level checks that need no problem

static void api_checks(void) {
    // NULL ctx
    flashc_attn_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 1, d.seqlen_q = 4, d.seqlen_k = 4, d.heads = 1, d.heads_kv = 1, d.head_dim = 8;
    float buf[4 * 8 * 4];
    memset(buf, 0, sizeof buf);
    float lse[4];
    flashc_status st = flashc_fwd(NULL, &d, buf, buf + 32, buf + 64, buf + 96, lse, NULL, 0, NULL);
    if (st == INV) tc_pass("flashc_fwd(ctx = NULL) = invalid argument");
    else tc_fail("flashc_fwd(ctx = NULL) = %s, want invalid argument", flashc_status_string(st));
    st = flashc_bwd(NULL, &d, buf, buf, buf, buf, lse, buf, buf + 32, buf + 64, buf + 96, NULL, 0, NULL);
    if (st == INV) tc_pass("flashc_bwd(ctx = NULL) = invalid argument");
    else tc_fail("flashc_bwd(ctx = NULL) = %s, want invalid argument", flashc_status_string(st));
    st = flashc_supports(NULL, &d);
    if (st == INV) tc_pass("flashc_supports(ctx = NULL) = invalid argument");
    else tc_fail("flashc_supports(ctx = NULL) = %s, want invalid argument", flashc_status_string(st));
    size_t w1 = flashc_fwd_workspace_size(NULL, &d), w2 = flashc_bwd_workspace_size(NULL, &d);
    if (w1 == 0 && w2 == 0) tc_pass("flashc_*_workspace_size(ctx = NULL) = 0");
    else tc_fail("flashc_*_workspace_size(ctx = NULL) = %zu, %zu, want 0", w1, w2);
    const char *e = flashc_ctx_last_error(NULL);
    if (e) tc_pass("flashc_ctx_last_error(NULL) = \"%s\"", e);
    else tc_fail("flashc_ctx_last_error(NULL) returned NULL");
    flashc_ctx_free(NULL);
    tc_pass("flashc_ctx_free(NULL) returns");
    flashc_fill_contiguous_strides(NULL);
    tc_pass("flashc_fill_contiguous_strides(NULL) returns");

    // ctx creation
    st = flashc_ctx_create(NULL, FLASHC_BACKEND_CPU, 1);
    if (st == INV) tc_pass("flashc_ctx_create(out = NULL) = invalid argument");
    else tc_fail("flashc_ctx_create(out = NULL) = %s, want invalid argument", flashc_status_string(st));
    static const int bogus[] = {99, -1, 4};
    for (int i = 0; i < 3; i++) {
        flashc_ctx *ctx = (flashc_ctx *)(uintptr_t)0x1;
        st = flashc_ctx_create(&ctx, (flashc_backend)bogus[i], 1);
        if (st == INV && ctx == NULL) tc_pass("flashc_ctx_create(backend = %d) = invalid argument, *out = NULL", bogus[i]);
        else tc_fail("flashc_ctx_create(backend = %d) = %s, *out = %p; want invalid argument and NULL", bogus[i],
                     flashc_status_string(st), (void *)ctx);
        if (st == FLASHC_OK) flashc_ctx_free(ctx);
    }
    {
        flashc_ctx *ctx = (flashc_ctx *)(uintptr_t)0x1;
        st = flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, -2);
        if (st == INV && ctx == NULL) tc_pass("flashc_ctx_create(n_threads = -2) = invalid argument, *out = NULL");
        else tc_fail("flashc_ctx_create(n_threads = -2) = %s; want invalid argument and *out = NULL", flashc_status_string(st));
        if (st == FLASHC_OK) flashc_ctx_free(ctx);
    }

    // why a create failed, with no ctx to ask: flashc_ctx_last_error(NULL) names the cause
    {
        flashc_ctx *ctx = NULL;
        const char *old = getenv("FLASHC_CPU_ISA");
        char *saved = old ? strdup(old) : NULL;
        setenv("FLASHC_CPU_ISA", "no-such-isa", 1);
        st = flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, 1);
        const char *why = flashc_ctx_last_error(NULL);
        if (st == INV && !ctx && strstr(why, "FLASHC_CPU_ISA=no-such-isa"))
            tc_pass("flashc_ctx_create with FLASHC_CPU_ISA=no-such-isa = invalid argument, last_error(NULL) \"%s\"", why);
        else tc_fail("flashc_ctx_create with FLASHC_CPU_ISA=no-such-isa = %s, last_error(NULL) \"%s\"; want invalid "
                     "argument naming FLASHC_CPU_ISA", flashc_status_string(st), why);
        if (st == FLASHC_OK) flashc_ctx_free(ctx);
        if (saved) setenv("FLASHC_CPU_ISA", saved, 1);
        else unsetenv("FLASHC_CPU_ISA");
        free(saved);
        st = flashc_ctx_create(&ctx, FLASHC_BACKEND_CPU, 1);
        why = flashc_ctx_last_error(NULL);
        if (st == FLASHC_OK && !strcmp(why, "ctx is NULL"))
            tc_pass("after a create that succeeds, last_error(NULL) = \"ctx is NULL\"");
        else tc_fail("create = %s, then last_error(NULL) = \"%s\"; want ok and \"ctx is NULL\"", flashc_status_string(st), why);
        flashc_ctx_free(ctx);
    }

    // status strings: one distinct, non-empty text per code; unknown values get a text too
    static const flashc_status codes[] = {FLASHC_OK, FLASHC_ERR_INVALID_ARG, FLASHC_ERR_UNSUPPORTED, FLASHC_ERR_NO_BACKEND,
                                          FLASHC_ERR_ALLOC, FLASHC_ERR_WORKSPACE_SMALL, FLASHC_ERR_DEVICE, FLASHC_ERR_INTERNAL};
    int n = (int)(sizeof codes / sizeof codes[0]);
    const char *unknown = flashc_status_string((flashc_status)42);
    int ok = unknown && *unknown;
    for (int i = 0; i < n && ok; i++) {
        const char *si = flashc_status_string(codes[i]);
        if (!si || !*si || !strcmp(si, unknown)) {
            tc_fail("flashc_status_string(%d) = \"%s\": want a text of its own", (int)codes[i], si ? si : "(null)");
            ok = 0;
        }
        for (int j = 0; j < i && ok; j++)
            if (!strcmp(si, flashc_status_string(codes[j]))) {
                tc_fail("flashc_status_string(%d) == flashc_status_string(%d) = \"%s\"", (int)codes[i], (int)codes[j], si);
                ok = 0;
            }
    }
    const char *u2 = flashc_status_string((flashc_status)-100);
    if (!u2 || !*u2) ok = 0, tc_fail("flashc_status_string(-100) is NULL or empty");
    if (ok) tc_pass("flashc_status_string: %d distinct texts, unknown values -> \"%s\"", n, unknown);

    // versions: the library loaded vs the header compiled against
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FLASHC_VERSION_MAJOR, FLASHC_VERSION_MINOR, FLASHC_VERSION_PATCH);
    if (flashc_version_number() == FLASHC_VERSION_NUMBER &&
        FLASHC_VERSION_NUMBER == FLASHC_VERSION_MAJOR * 10000 + FLASHC_VERSION_MINOR * 100 + FLASHC_VERSION_PATCH)
        tc_pass("flashc_version_number() = %u", flashc_version_number());
    else tc_fail("flashc_version_number() = %u, FLASHC_VERSION_NUMBER = %d", flashc_version_number(), FLASHC_VERSION_NUMBER);
    const char *vs = flashc_version_string();
    if (vs && !strcmp(vs, want)) tc_pass("flashc_version_string() = \"%s\"", vs);
    else tc_fail("flashc_version_string() = \"%s\", want \"%s\"", vs ? vs : "(null)", want);
}

// On a device backend only the description is checked (flashc_supports reads no tensor memory).
static void device_desc_cases(void) {
    CASE("valid problem (control, flashc_supports)", FLASHC_OK, NULL, CALL_SUP, (void)s);
    CASE("batch = 0", INV, "batch", CALL_SUP, s->d.batch = 0);
    CASE("heads 4 % heads_kv 3 != 0", INV, "heads_kv", CALL_SUP, s->d.heads_kv = 3);
    CASE("dtype = 7", INV, "dtype", CALL_SUP, s->d.dtype = (flashc_dtype)7);
    CASE("head_dim = 1000 (above the GPU limit)", FLASHC_ERR_UNSUPPORTED, "head_dim", CALL_SUP,
         s->d.head_dim = 1000);
    CASE("q_stride head stride < head_dim", INV, "q_stride", CALL_SUP, set_stride(s->d.q_stride, SQ * H_ * D_, H_ * D_, 1));
    CASE("softcap = NaN", INV, "softcap", CALL_SUP, s->d.softcap = NAN);
    CASE("reserved[5] = 2", INV, "reserved", CALL_SUP, s->d.reserved[5] = 2);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) tc_verbose = 1;
        else if (!strcmp(argv[i], "--no-fork")) g_fork = 0;
        else {
            fprintf(stderr, "usage: test_bad_input [-v] [--no-fork]\n");
            return 2;
        }
    }
    api_checks();
    static const struct { const char *name; flashc_backend kind; } bes[] = {
        {"ref", FLASHC_BACKEND_REF}, {"cpu", FLASHC_BACKEND_CPU}, {"cuda", FLASHC_BACKEND_CUDA}};
    for (int b = 0; b < 3; b++) {
        flashc_ctx *ctx = NULL;
        flashc_status st = flashc_ctx_create(&ctx, bes[b].kind, 1);
        if (st == FLASHC_ERR_NO_BACKEND && bes[b].kind == FLASHC_BACKEND_CUDA) {
            printf("cuda: skipped (%s)\n", flashc_ctx_last_error(NULL));
            continue;
        }
        if (st != FLASHC_OK) {
            tc_fail("%s: flashc_ctx_create = %s", bes[b].name, flashc_status_string(st));
            continue;
        }
        flashc_ctx_free(ctx);
        g_backend_name = bes[b].name, g_kind = bes[b].kind;
        if (bes[b].kind == FLASHC_BACKEND_CUDA) {
            // the CUDA runtime, initialised by the ctx above, does not survive fork(): run in-process
            int fork_was = g_fork;
            g_fork = 0;
            device_desc_cases();
            g_fork = fork_was;
        } else {
            host_cases();
            workspace_small_cases();
        }
    }
    return tc_summary("test_bad_input");
}
