/* Max pooling whose windows tile the image exactly (stride = window, no
 * padding, the output covering every pixel: the seed CNN's 2x2 / 2), over
 * channels in whole 16-float vectors, with AVX-512 intrinsics. The generic
 * paths in td_reference_conv.c walk a window's taps with run-time bounds
 * and one call per window and block of channels; at conv1's [128, 28, 28,
 * 32] they took 1.8 ms forward and 2.8 ms backward on one core with the
 * data in cache (memory alone would allow a fraction of that). Here each
 * output row's windows are walked with the taps' offsets fixed for the row
 * and the running max, the found flags, y and gy in mask and vector
 * registers.
 *
 * Same bits as the contract (td_kernel.h), lane by lane: the max is the
 * (i, j) scan `m = t > m || t is NaN ? t : m` from the first tap (an
 * ordered greater-than and an unordered self-compare select, no
 * arithmetic); the gradient gives gy to the first tap equal to y (or NaN
 * where y is NaN) and writes every tap as 0.0f + its term, the contract's
 * sum from 0.0f over the one window that holds the tap (the windows tile).
 * Tested bitwise against the generic paths (tests/engine/test_kernels_fast_paths.c)
 * and by the conformance suite. */
#include "td_reference_pool_tiled.h"

#include <stdbool.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define POOL_TILED_X86 1
#else
#define POOL_TILED_X86 0
#endif

enum { LANES = 16 };

static bool takes_tiled_path(const td_pool_params *pp)
{
    const td_conv_params *p = &pp->geo;
    return pp->mode == TD_POOL_MAX && p->c > 0 && p->c % LANES == 0 && p->kh > 0 && p->kw > 0 &&
           p->stride_h == p->kh && p->stride_w == p->kw && p->pad_top == 0 && p->pad_left == 0 &&
           p->dil_h == 1 && p->dil_w == 1 && p->oh * p->kh == p->h && p->ow * p->kw == p->w;
}

#if POOL_TILED_X86
static bool cpu_has_avx512f(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

__attribute__((target("avx512f"))) static void max_pool_avx512(float *out, const float *a, const td_conv_params *p)
{
    const int64_t c = p->c, row = p->w * c, step = p->kw * c;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++) {
            const float *src = a + (b * p->h + oy * p->kh) * row;
            for (int64_t ox = 0; ox < p->ow; ox++, src += step, out += c)
                for (int64_t c0 = 0; c0 < c; c0 += LANES) {
                    const float *t = src + c0;
                    __m512 m = _mm512_loadu_ps(t);
                    for (int64_t i = 0; i < p->kh; i++)
                        for (int64_t j = 0; j < p->kw; j++) {
                            const __m512 v = _mm512_loadu_ps(t + i * row + j * c);
                            const __mmask16 take =
                                _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                            m = _mm512_mask_blend_ps(take, m, v);
                        }
                    _mm512_storeu_ps(out + c0, m);
                }
        }
}

__attribute__((target("avx512f"))) static void max_pool_backward_avx512(float *gx, const float *x, const float *y,
                                                                         const float *gy, const td_conv_params *p)
{
    const int64_t c = p->c, row = p->w * c, step = p->kw * c;
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++) {
            const int64_t first = (b * p->h + oy * p->kh) * row;
            const float *xs = x + first;
            float *gs = gx + first;
            for (int64_t ox = 0; ox < p->ow; ox++, xs += step, gs += step, y += c, gy += c)
                for (int64_t c0 = 0; c0 < c; c0 += LANES) {
                    const __m512 yv = _mm512_loadu_ps(y + c0), gv = _mm512_loadu_ps(gy + c0);
                    const __mmask16 y_nan = _mm512_cmp_ps_mask(yv, yv, _CMP_UNORD_Q);
                    __mmask16 found = 0;
                    for (int64_t i = 0; i < p->kh; i++)
                        for (int64_t j = 0; j < p->kw; j++) {
                            const int64_t e = i * row + j * c + c0;
                            const __m512 xv = _mm512_loadu_ps(xs + e);
                            const __mmask16 equal = _mm512_cmp_ps_mask(xv, yv, _CMP_EQ_OQ) |
                                                    (y_nan & _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q));
                            const __mmask16 hit = equal & (__mmask16)~found;
                            found |= hit;
                            _mm512_storeu_ps(gs + e, _mm512_add_ps(zero, _mm512_maskz_mov_ps(hit, gv)));
                        }
                }
        }
}
#endif

bool td_reference_pool_tiled(float *out, const float *a, const td_pool_params *pp)
{
#if POOL_TILED_X86
    if (!takes_tiled_path(pp) || !cpu_has_avx512f())
        return false;
    max_pool_avx512(out, a, &pp->geo);
    return true;
#else
    (void)out, (void)a, (void)takes_tiled_path(pp);
    return false;
#endif
}

bool td_reference_pool_backward_tiled(float *gx, const float *x, const float *y, const float *gy,
                                      const td_pool_params *pp)
{
#if POOL_TILED_X86
    if (!takes_tiled_path(pp) || !cpu_has_avx512f())
        return false;
    max_pool_backward_avx512(gx, x, y, gy, &pp->geo);
    return true;
#else
    (void)gx, (void)x, (void)y, (void)gy, (void)takes_tiled_path(pp);
    return false;
#endif
}
