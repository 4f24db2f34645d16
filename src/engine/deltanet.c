/* deltanet.c - the Gated DeltaNet recurrence and its conv; see deltanet.h. */
#include "engine/deltanet.h"

#include <math.h>

void hr_deltanet_conv(const float *in, float *out, uint32_t n, uint32_t ld, float *state,
                      const float *w, uint32_t K, uint32_t c0, uint32_t c1)
{
    const uint32_t keep = K - 1;
    float win[16 + 16]; /* K <= 16 (model.c checks): carried inputs, then a sliding tail */
    for (uint32_t c = c0; c < c1; c++) {
        float *st = state + (uint64_t)c * keep;
        const float *wc = w + (uint64_t)c * K;
        for (uint32_t i = 0; i < keep; i++)
            win[i] = st[i];
        for (uint32_t t = 0; t < n; t++) {
            win[keep] = in[(uint64_t)t * ld + c];
            float s = 0.0f;
            for (uint32_t i = 0; i < K; i++)
                s += win[i] * wc[i];
            out[(uint64_t)t * ld + c] = s / (1.0f + expf(-s));
            for (uint32_t i = 0; i < keep; i++) /* slide by one */
                win[i] = win[i + 1];
        }
        for (uint32_t i = 0; i < keep; i++)
            st[i] = win[i];
    }
}

void hr_deltanet_l2_norm(float *x, uint32_t n, float eps)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (uint32_t i = 0; i < n; i++)
        x[i] *= scale;
}

void hr_deltanet_gates(float *beta, float *g, const float *dt_bias, const float *a, uint32_t n)
{
    for (uint32_t h = 0; h < n; h++) {
        beta[h] = 1.0f / (1.0f + expf(-beta[h]));
        const float x = g[h] + dt_bias[h];
        const float sp = x > 20.0f ? x : logf(1.0f + expf(x)); /* ggml's softplus */
        g[h] = sp * a[h];
    }
}

/* Dot product in 8 interleaved partial sums: vectorisable without
 * reassociation flags, and deterministic (the same order every call). */
static float dot(const float *a, const float *b, uint32_t n)
{
    float acc[8] = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void hr_deltanet_recur(float *S, const float *q, const float *k, uint32_t ld_qk, const float *v,
                       uint32_t ld_v, const float *g, const float *beta, uint32_t ld_gb,
                       uint32_t n, uint32_t d, float *o, uint32_t ld_o, float *delta)
{
    const float scale = 1.0f / sqrtf((float)d);
    const uint64_t dd = (uint64_t)d * d;
    for (uint32_t t = 0; t < n; t++) {
        const float *qt = q + (uint64_t)t * ld_qk, *kt = k + (uint64_t)t * ld_qk;
        const float *vt = v + (uint64_t)t * ld_v;
        const float decay = expf(g[(uint64_t)t * ld_gb]), b = beta[(uint64_t)t * ld_gb];
        for (uint64_t i = 0; i < dd; i++)
            S[i] *= decay;
        for (uint32_t j = 0; j < d; j++)
            delta[j] = (vt[j] - dot(S + (uint64_t)j * d, kt, d)) * b;
        for (uint32_t j = 0; j < d; j++) {
            float *row = S + (uint64_t)j * d;
            const float dj = delta[j];
            for (uint32_t i = 0; i < d; i++)
                row[i] += kt[i] * dj;
        }
        float *ot = o + (uint64_t)t * ld_o;
        for (uint32_t j = 0; j < d; j++)
            ot[j] = dot(S + (uint64_t)j * d, qt, d) * scale;
    }
}
