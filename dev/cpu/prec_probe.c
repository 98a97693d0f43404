// prec_probe.c -- fp32 forward accuracy of the CPU backend against the fp64 reference on one shape,
// beside naive fp32 LSEs (sequential mul + add, FMA, q pre-scaled by scale log2 e): how far the FA2
// tiles' scores are from what any sequential fp32 dot product gets (session 35, NOTES). Random
// N(0, 1) q, k, v; B = 1, 4 query heads over 2 kv heads; one thread.
//
//   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude dev/cpu/prec_probe.c build/libflashc.a -lm -lpthread -o build/prec_probe
//   build/prec_probe Sq Sk D causal [scale]      (FLASHC_CPU_DECODE_MAX_SQ=1000000: the decode kernel)
#include <flashc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
// a normal draw (Box-Muller on a 64-bit LCG)
static double lcg(unsigned long long *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0;
}
static double nrm(unsigned long long *s) {
    const double u1 = lcg(s) + 0x1p-54, u2 = lcg(s);
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
int main(int argc, char **argv) {
    int H = 4, Hkv = 2, Sq = atoi(argv[1]), Sk = atoi(argv[2]), D = atoi(argv[3]), causal = atoi(argv[4]);
    float scale = argc > 5 ? atof(argv[5]) : 0;
    size_t nq = (size_t)Sq * H * D, nk = (size_t)Sk * Hkv * D;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4), *o2 = malloc(nq * 4);
    float *lr = malloc(Sq * H * 4), *l2 = malloc(Sq * H * 4);
    unsigned long long s = 42;
    for (size_t i = 0; i < nq; i++) q[i] = nrm(&s);
    for (size_t i = 0; i < nk; i++) k[i] = nrm(&s), v[i] = nrm(&s);
    flashc_attn_desc d = {0};
    d.batch = 1; d.seqlen_q = Sq; d.seqlen_k = Sk; d.heads = H; d.heads_kv = Hkv; d.head_dim = D;
    d.dtype = FLASHC_DTYPE_F32; d.causal = causal; d.scale = scale;
    flashc_fill_contiguous_strides(&d);
    flashc_ctx *c1, *c2;
    flashc_ctx_create(&c1, FLASHC_BACKEND_REF, 1); flashc_ctx_create(&c2, FLASHC_BACKEND_CPU, 1);
    if (flashc_fwd(c1, &d, q, k, v, o, lr, NULL, 0, NULL) || flashc_fwd(c2, &d, q, k, v, o2, l2, NULL, 0, NULL)) return 1;
    double e = 0, el = 0; size_t at = 0;
    for (size_t i = 0; i < nq; i++) if (fabs(o[i] - o2[i]) > e) e = fabs(o[i] - o2[i]), at = i;
    for (int i = 0; i < Sq * H; i++) if (isfinite(lr[i]) && fabs(lr[i] - l2[i]) > el) el = fabs(lr[i] - l2[i]);
    // naive f32 LSEs (lse layout (B, H, Sq)): sequential mul+add; fma; q pre-scaled by scale log2 e, fma, log2 domain
    double e1 = 0, e2 = 0, e3 = 0;
    const float sc = scale > 0 ? scale : 1.0f / sqrtf((float)D), c2f = sc * 1.4426950408889634f;
    float *s1 = malloc(Sk * 4), *s2 = malloc(Sk * 4), *s3 = malloc(Sk * 4);
    for (int i = 0; i < Sq; i++)
        for (int h = 0; h < H; h++) {
            const int hk = h / (H / Hkv);
            int hi = causal ? i + Sk - Sq + 1 : Sk;
            if (hi > Sk) hi = Sk;
            if (hi <= 0) continue;
            double m1 = -1e30, m2 = -1e30, m3 = -1e30;
            for (int j = 0; j < hi; j++) {
                float a = 0, b = 0, c = 0;
                for (int dd = 0; dd < D; dd++) {
                    const float x = q[((size_t)i * H + h) * D + dd], y = k[((size_t)j * Hkv + hk) * D + dd];
                    a += x * y;
                    b = fmaf(x, y, b);
                    c = fmaf(x * c2f, y, c);
                }
                s1[j] = a * sc, s2[j] = b * sc, s3[j] = c;
                m1 = fmax(m1, s1[j]), m2 = fmax(m2, s2[j]), m3 = fmax(m3, s3[j]);
            }
            double L1 = 0, L2 = 0, L3 = 0;
            for (int j = 0; j < hi; j++) L1 += exp(s1[j] - m1), L2 += exp(s2[j] - m2), L3 += exp2(s3[j] - m3);
            const double t = lr[h * Sq + i];
            e1 = fmax(e1, fabs(m1 + log(L1) - t)), e2 = fmax(e2, fabs(m2 + log(L2) - t));
            e3 = fmax(e3, fabs((m3 + log2(L3)) / 1.4426950408889634 - t));
        }
    printf("Sq=%d Sk=%d D=%d causal=%d: max|o err| %.3g at row %zu h %zu (ref %.6g) lse err %.3g; naive f32 lse err: mul+add %.3g fma %.3g prescaled-q %.3g\n",
           Sq, Sk, D, causal, e, at / (H * D), at / D % H, o[at], el, e1, e2, e3);
    return 0;
}
