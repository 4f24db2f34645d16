/*
 * moe-weights.h - the last step of a MoE token's routing, shared by the CPU
 * engine (engine.c's moe_route) and the CUDA engine's router kernel
 * (cuda/cuda-kernels.cu), so both finish the k chosen experts' weights with
 * the same expressions in the same order (and the CPU's router softmax
 * over all experts): gpt-oss's softmax over the k
 * (its sum in double), renormalisation to sum 1 with the sum clamped at
 * f16's smallest normal (llama.cpp's build_moe_ffn), then the scale.
 *
 * Header-only and plain C, callable from host code and, compiled by nvcc,
 * from device code. No state, no allocation.
 */
#ifndef HR_ENGINE_MOE_WEIGHTS_H
#define HR_ENGINE_MOE_WEIGHTS_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HR_MOE_FN __host__ __device__ static inline
#else
#define HR_MOE_FN static inline
#endif

/* out[0..n) = softmax(in[0..n)): the max subtracted, the sum in double
 * (llama.cpp's soft_max on the CPU); out may be in. */
HR_MOE_FN void hr_moe_softmax(const float *in, float *out, uint32_t n)
{
    float mx = -INFINITY;
    for (uint32_t j = 0; j < n; j++)
        mx = in[j] > mx ? in[j] : mx;
    double sum = 0.0;
    for (uint32_t j = 0; j < n; j++) {
        out[j] = expf(in[j] - mx);
        sum += (double)out[j];
    }
    const float inv = (float)(1.0 / sum);
    for (uint32_t j = 0; j < n; j++)
        out[j] *= inv;
}

/* w[0..k): the chosen experts' router values, in top-k order, finished in
 * place. softmax_k: a softmax over the k first (gpt-oss); norm_w:
 * renormalise; w_scale: then multiply (0 or 1: not at all). */
HR_MOE_FN void hr_moe_finish_weights(float *w, uint32_t k, int softmax_k, int norm_w,
                                     float w_scale)
{
    if (softmax_k)
        hr_moe_softmax(w, w, k);
    if (norm_w) {
        float sum = 0.0f;
        for (uint32_t j = 0; j < k; j++)
            sum += w[j];
        if (sum < 6.103515625e-5f)
            sum = 6.103515625e-5f;
        for (uint32_t j = 0; j < k; j++)
            w[j] /= sum;
    }
    if (w_scale != 0.0f && w_scale != 1.0f)
        for (uint32_t j = 0; j < k; j++)
            w[j] *= w_scale;
}

#undef HR_MOE_FN

#endif
