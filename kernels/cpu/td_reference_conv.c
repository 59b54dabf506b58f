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

/* The taps of window (oy, ox) inside the image: rows [i0, i1) and columns
 * [j0, j1) of the window (a dilated window's inside taps are contiguous). */
typedef struct window_inside {
    int64_t i0, i1, j0, j1;
} window_inside;

static window_inside inside_window(const td_conv_params *p, int64_t oy, int64_t ox)
{
    window_inside w;
    inside_run(tap_y(p, oy, 0), p->dil_h, p->kh, p->h, &w.i0, &w.i1);
    inside_run(tap_x(p, ox, 0), p->dil_w, p->kw, p->w, &w.j0, &w.j1);
    return w;
}

static float avg_divisor(const td_pool_params *pp, window_inside w)
{
    const td_conv_params *p = &pp->geo;
    return pp->count_include_pad ? (float)(p->kh * p->kw) : (float)((w.i1 - w.i0) * (w.j1 - w.j0));
}

/* Pixel (b, iy, ix)'s c channels in an NHWC image. */
static int64_t pixel_at(const td_conv_params *p, int64_t b, int64_t iy, int64_t ix)
{
    return ((b * p->h + iy) * p->w + ix) * p->c;
}

/* One tap of a max window over n channels: the first tap is taken as it
 * is, later ones replace a smaller value, and a NaN is kept. */
static void max_tap(float *out, const float *v, int64_t n, bool first)
{
    if (first) {
        for (int64_t ch = 0; ch < n; ch++)
            out[ch] = v[ch];
        return;
    }
    for (int64_t ch = 0; ch < n; ch++)
        out[ch] = v[ch] > out[ch] || isnan(v[ch]) ? v[ch] : out[ch];
}

/* Pooling walks each window's inside taps once and, at each tap, every
 * channel of the pixel (contiguous in NHWC) in one inner loop the compiler
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
                const window_inside w = inside_window(p, oy, ox);
                if (w.i0 == w.i1 || w.j0 == w.j1) { /* no tap inside: the empty max, or 0 / the divisor */
                    const float none = max ? -INFINITY : 0.0f / avg_divisor(pp, w);
                    for (int64_t ch = 0; ch < c; ch++)
                        out[ch] = none;
                    continue;
                }
                if (!max)
                    for (int64_t ch = 0; ch < c; ch++)
                        out[ch] = 0.0f; /* the sum starts from 0.0f, as the contract's */
                for (int64_t i = w.i0; i < w.i1; i++)
                    for (int64_t j = w.j0; j < w.j1; j++) {
                        const float *v = a + pixel_at(p, b, tap_y(p, oy, i), tap_x(p, ox, j));
                        if (max)
                            max_tap(out, v, c, i == w.i0 && j == w.j0);
                        else
                            for (int64_t ch = 0; ch < c; ch++)
                                out[ch] += v[ch];
                    }
                if (!max) {
                    const float div = avg_divisor(pp, w);
                    for (int64_t ch = 0; ch < c; ch++)
                        out[ch] = out[ch] / div;
                }
            }
}

/* Channels of one window handled together by the max gradient: a block of
 * them keeps its found flags on the stack. */
enum { POOL_CHANNEL_BLOCK = 64 };

/* One tap of a max window's gradient over n <= POOL_CHANNEL_BLOCK
 * channels: gy goes to the channel's first tap equal to the window's
 * maximum y (or NaN where y is NaN). Branch-free, so the loop vectorises:
 * x != x is NaN, every operand is loaded whatever the outcome, and gx is
 * never -0.0 (sums from +0.0 round to nearest), so adding +0.0 where the
 * tap is not the maximum leaves it as it is. */
static void max_gradient_tap(float *gx, const float *x, const float *y, const float *gy, int32_t *found, int64_t n)
{
    for (int64_t ch = 0; ch < n; ch++) {
        const float xc = x[ch], yc = y[ch], gc = gy[ch];
        const int32_t hit = (found[ch] == 0) & ((xc == yc) | ((yc != yc) & (xc != xc)));
        gx[ch] += hit ? gc : 0.0f;
        found[ch] |= hit;
    }
}

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
                const window_inside w = inside_window(p, oy, ox);
                const float div = avg_divisor(pp, w);
                /* 32-bit flags, as the floats' lanes; each block of channels
                 * starts with none found. */
                for (int64_t c0 = 0; c0 < c; c0 += POOL_CHANNEL_BLOCK) {
                    const int64_t cb = c - c0 < POOL_CHANNEL_BLOCK ? c - c0 : POOL_CHANNEL_BLOCK;
                    int32_t found[POOL_CHANNEL_BLOCK] = {0};
                    for (int64_t i = w.i0; i < w.i1; i++)
                        for (int64_t j = w.j0; j < w.j1; j++) {
                            const int64_t e = pixel_at(p, b, tap_y(p, oy, i), tap_x(p, ox, j)) + c0;
                            if (pp->mode == TD_POOL_MAX) {
                                max_gradient_tap(gx + e, x + e, yw + c0, gw + c0, found, cb);
                                continue;
                            }
                            for (int64_t ch = 0; ch < cb; ch++)
                                gx[e + ch] += gw[c0 + ch] / div;
                        }
                }
            }
}
