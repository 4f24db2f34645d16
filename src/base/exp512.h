/*
 * exp512.h - e^x 16 floats at a time (AVX-512 builds only), shared by the
 * CPU attention's softmax and the sampler's whole-vocabulary draw.
 */
#ifndef HR_BASE_EXP512_H
#define HR_BASE_EXP512_H

#if defined(__AVX512F__)
#include <immintrin.h>

/* e^x for x <= 0 (x = -inf gives a finite tiny value; callers mask those
 * lanes): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes'
 * degree-6 polynomial for e^r and a scale by 2^n; about 1 ulp. */
static inline __m512 hr_exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 y = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}
#endif

#endif
