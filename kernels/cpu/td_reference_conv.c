/* Reference IM2COL, COL2IM, POOL and POOL_BACKWARD (td_kernel.h); the
 * geometry checks every backend runs first are in td_kernel_checks.h.
 *
 * COL2IM and POOL_BACKWARD are written here as scatters over the windows in
 * row-major (b, oy, ox) order: every image element then receives its terms
 * in increasing (oy, ox, i, j) order starting from 0.0f, which is the
 * contract's order, at a fraction of the cost of a gather per element. The
 * GPU kernels gather instead (no atomics); the tests hold both to the same
 * bits. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "td_reference.h"

static int64_t tap_y(const td_conv_params *p, int64_t oy, int64_t i)
{
    return oy * p->stride_h - p->pad_top + i * p->dil_h;
}

static int64_t tap_x(const td_conv_params *p, int64_t ox, int64_t j)
{
    return ox * p->stride_w - p->pad_left + j * p->dil_w;
}

/* Taps [*j0, *j1) of a window row starting at base (= ox * stride - pad)
 * land inside [0, size): the loops below copy or add that run at once and
 * only zero (or skip) the rest, instead of testing every tap. */
static void inside_run(int64_t base, int64_t dil, int64_t taps, int64_t size, int64_t *j0, int64_t *j1)
{
    int64_t lo = base >= 0 ? 0 : (-base + dil - 1) / dil;
    int64_t hi = base >= size ? 0 : (size - base + dil - 1) / dil;
    *j0 = lo < taps ? lo : taps;
    *j1 = hi < taps ? hi : taps;
    if (*j1 < *j0)
        *j1 = *j0;
}

void td_reference_im2col(float *restrict out, const float *restrict a, const td_conv_params *p)
{
    const int64_t c = p->c, row = p->kw * c;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                int64_t j0, j1, x0 = tap_x(p, ox, 0);
                inside_run(x0, p->dil_w, p->kw, p->w, &j0, &j1);
                for (int64_t i = 0; i < p->kh; i++, out += row) {
                    int64_t iy = tap_y(p, oy, i);
                    if (iy < 0 || iy >= p->h) {
                        for (int64_t q = 0; q < row; q++)
                            out[q] = 0.0f;
                        continue;
                    }
                    /* x0 may be negative: index from the row, never form a
                     * pointer before the buffer. */
                    int64_t s0 = ((b * p->h + iy) * p->w + x0) * c;
                    for (int64_t q = 0; q < j0 * c; q++)
                        out[q] = 0.0f;
                    if (p->dil_w == 1) {
                        for (int64_t q = j0 * c; q < j1 * c; q++)
                            out[q] = a[s0 + q];
                    } else {
                        for (int64_t j = j0; j < j1; j++)
                            for (int64_t ch = 0; ch < c; ch++)
                                out[j * c + ch] = a[s0 + j * p->dil_w * c + ch];
                    }
                    for (int64_t q = j1 * c; q < row; q++)
                        out[q] = 0.0f;
                }
            }
}

void td_reference_col2im(float *restrict out, const float *restrict a, const td_conv_params *p)
{
    const int64_t c = p->c, row = p->kw * c;
    int64_t image = td_conv_image_count(p);
    for (int64_t e = 0; e < image; e++)
        out[e] = 0.0f;
    /* Windows in (b, oy, ox) order, taps in (i, j) order: each pixel gets
     * its terms in increasing (oy, ox, i, j) order, as the contract says. */
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                int64_t j0, j1, x0 = tap_x(p, ox, 0);
                inside_run(x0, p->dil_w, p->kw, p->w, &j0, &j1);
                for (int64_t i = 0; i < p->kh; i++, a += row) {
                    int64_t iy = tap_y(p, oy, i);
                    if (iy < 0 || iy >= p->h)
                        continue;
                    int64_t d0 = ((b * p->h + iy) * p->w + x0) * c;
                    if (p->dil_w == 1) {
                        for (int64_t q = j0 * c; q < j1 * c; q++)
                            out[d0 + q] += a[q];
                    } else {
                        for (int64_t j = j0; j < j1; j++)
                            for (int64_t ch = 0; ch < c; ch++)
                                out[d0 + j * p->dil_w * c + ch] += a[j * c + ch];
                    }
                }
            }
}

/* Number of taps of window row oy (or column ox) inside the image. */
static int64_t inside_rows(const td_conv_params *p, int64_t oy)
{
    int64_t k = 0;
    for (int64_t i = 0; i < p->kh; i++) {
        int64_t iy = tap_y(p, oy, i);
        k += iy >= 0 && iy < p->h;
    }
    return k;
}

static int64_t inside_cols(const td_conv_params *p, int64_t ox)
{
    int64_t k = 0;
    for (int64_t j = 0; j < p->kw; j++) {
        int64_t ix = tap_x(p, ox, j);
        k += ix >= 0 && ix < p->w;
    }
    return k;
}

static float avg_divisor(const td_pool_params *pp, int64_t oy, int64_t ox)
{
    const td_conv_params *p = &pp->geo;
    return pp->count_include_pad ? (float)(p->kh * p->kw) : (float)(inside_rows(p, oy) * inside_cols(p, ox));
}

/* Pooling walks each window's taps once and, at each tap, every channel
 * of the pixel (contiguous in NHWC) in one inner loop the compiler
 * vectorises; each channel still sees its taps in (i, j) order with the
 * contract's comparisons, so the results are those of a channel-at-a-time
 * loop, bit for bit. */
void td_reference_pool(float *out, const float *a, const td_pool_params *pp)
{
    const td_conv_params *p = &pp->geo;
    const int64_t c = p->c;
    const bool max = pp->mode == TD_POOL_MAX;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++, out += c) {
                bool first = true;
                for (int64_t i = 0; i < p->kh; i++) {
                    int64_t iy = tap_y(p, oy, i);
                    if (iy < 0 || iy >= p->h)
                        continue;
                    for (int64_t j = 0; j < p->kw; j++) {
                        int64_t ix = tap_x(p, ox, j);
                        if (ix < 0 || ix >= p->w)
                            continue;
                        const float *v = a + ((b * p->h + iy) * p->w + ix) * c;
                        if (max && first) {
                            for (int64_t ch = 0; ch < c; ch++)
                                out[ch] = v[ch];
                        } else if (max) {
                            for (int64_t ch = 0; ch < c; ch++)
                                out[ch] = v[ch] > out[ch] || isnan(v[ch]) ? v[ch] : out[ch];
                        } else {
                            if (first)
                                for (int64_t ch = 0; ch < c; ch++)
                                    out[ch] = 0.0f; /* the sum starts from 0.0f, as the contract's */
                            for (int64_t ch = 0; ch < c; ch++)
                                out[ch] += v[ch];
                        }
                        first = false;
                    }
                }
                if (first) { /* no tap inside the image: the empty max, or 0 / the divisor */
                    const float none = max ? -INFINITY : 0.0f / avg_divisor(pp, oy, ox);
                    for (int64_t ch = 0; ch < c; ch++)
                        out[ch] = none;
                } else if (!max) {
                    const float div = avg_divisor(pp, oy, ox);
                    for (int64_t ch = 0; ch < c; ch++)
                        out[ch] = out[ch] / div;
                }
            }
}

/* Channels of one window handled together by the max gradient: a block of
 * them keeps its targets, gradients and found flags on the stack. */
enum { POOL_CHANNEL_BLOCK = 64 };

void td_reference_pool_backward(float *gx, const float *x, const float *y, const float *gy,
                                 const td_pool_params *pp)
{
    const td_conv_params *p = &pp->geo;
    const int64_t c = p->c;
    int64_t image = td_conv_image_count(p);
    for (int64_t e = 0; e < image; e++)
        gx[e] = 0.0f;
    const float *gw = gy, *yw = y; /* the window's (b, oy, ox) row of c */
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++, gw += c, yw += c) {
                if (pp->mode == TD_POOL_AVG) {
                    const float div = avg_divisor(pp, oy, ox);
                    for (int64_t i = 0; i < p->kh; i++) {
                        int64_t iy = tap_y(p, oy, i);
                        if (iy < 0 || iy >= p->h)
                            continue;
                        for (int64_t j = 0; j < p->kw; j++) {
                            int64_t ix = tap_x(p, ox, j);
                            if (ix < 0 || ix >= p->w)
                                continue;
                            float *g = gx + ((b * p->h + iy) * p->w + ix) * c;
                            for (int64_t ch = 0; ch < c; ch++)
                                g[ch] += gw[ch] / div;
                        }
                    }
                    continue;
                }
                /* Max: each channel's gradient goes to its first tap equal
                 * to the window's maximum (or NaN where that is NaN). */
                for (int64_t c0 = 0; c0 < c; c0 += POOL_CHANNEL_BLOCK) {
                    const int64_t cb = c - c0 < POOL_CHANNEL_BLOCK ? c - c0 : POOL_CHANNEL_BLOCK;
                    int32_t found[POOL_CHANNEL_BLOCK] = {0}; /* 32-bit lanes, as the floats' */
                    for (int64_t i = 0; i < p->kh; i++) {
                        int64_t iy = tap_y(p, oy, i);
                        if (iy < 0 || iy >= p->h)
                            continue;
                        for (int64_t j = 0; j < p->kw; j++) {
                            int64_t ix = tap_x(p, ox, j);
                            if (ix < 0 || ix >= p->w)
                                continue;
                            const int64_t e = ((b * p->h + iy) * p->w + ix) * c + c0;
                            const float *xv = x + e, *t = yw + c0, *gv = gw + c0;
                            float *g = gx + e;
                            /* Branch-free, so the loop vectorises: x != x
                             * is NaN, every operand is loaded whatever the
                             * outcome, and gx is never -0.0 (sums from +0.0
                             * round to nearest), so adding +0.0 where the
                             * tap is not the maximum leaves it as it is. */
                            for (int64_t ch = 0; ch < cb; ch++) {
                                const float xc = xv[ch], tc = t[ch], gc = gv[ch];
                                const int32_t hit = (found[ch] == 0) & ((xc == tc) | ((tc != tc) & (xc != xc)));
                                g[ch] += hit ? gc : 0.0f;
                                found[ch] |= hit;
                            }
                        }
                    }
                }
            }
}
