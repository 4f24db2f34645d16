/*
 * rope-row.h - one position's RoPE table row: cos and sin of each rotated
 * pair's angle, with llama3 frequency divisors and YaRN's ramp between
 * interpolation and extrapolation, as ggml's rope computes them. The one
 * formula both engines use: the CPU's rope_cache_row (engine.c) and the
 * GPU's rope_table_kernel (cuda-kernels.cu), so plain C and CUDA.
 */
#ifndef HR_ENGINE_ROPE_ROW_H
#define HR_ENGINE_ROPE_ROW_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HR_ROPE_ROW_FN __host__ __device__ static inline
#else
#define HR_ROPE_ROW_FN static inline
#endif

/* row[2i], row[2i + 1] = cos, sin of pair i's angle at `pos`, times the
 * magnitude scale; freqs: per-pair divisors (llama3's rope_freqs) or NULL;
 * lo, hi: YaRN's ramp dims (used when ext_factor != 0). */
HR_ROPE_ROW_FN void hr_rope_row(int32_t pos, uint32_t n_rot, float theta_scale, float freq_scale,
                                float ext_factor, float attn_factor, float lo, float hi,
                                const float *freqs, float *row)
{
    float theta = (float)pos;
    for (uint32_t i0 = 0; i0 < n_rot; i0 += 2) {
        const float f = freqs ? freqs[i0 / 2] : 1.0f;
        const float extrap = theta / f;
        float t = freq_scale * extrap, mscale = attn_factor;
        if (ext_factor != 0.0f) {
            float y = ((float)(i0 / 2) - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
            y = y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y;
            const float ramp_mix = (1 - y) * ext_factor;
            t = t * (1 - ramp_mix) + extrap * ramp_mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        row[i0] = cosf(t) * mscale;
        row[i0 + 1] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

#endif
