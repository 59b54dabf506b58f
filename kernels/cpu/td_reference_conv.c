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

#include "td_fixed_math.h"
#include "td_reference.h"
#include "td_reference_pool_tiled.h"

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
    /* Undilated windows (every pooling, most convolutions) skip the two
     * divisions: they were most of the cost of a small window's taps. */
    int64_t lo = base >= 0 ? 0 : dil == 1 ? -base : (-base + dil - 1) / dil;
    int64_t hi = base >= size ? 0 : dil == 1 ? size - base : (size - base + dil - 1) / dil;
    *j0 = lo < taps ? lo : taps;
    *j1 = hi < taps ? hi : taps;
    if (*j1 < *j0)
        *j1 = *j0;
}

/* The output columns [*lo, *hi) whose window row lies wholly inside the
 * image's width: their taps need no bounds, and IM2COL / COL2IM copy or
 * add them as one run per window row. */
static void inside_columns(const td_conv_params *p, int64_t *lo, int64_t *hi)
{
    const int64_t span = (p->kw - 1) * p->dil_w + 1;
    *lo = 0;
    while (*lo < p->ow && tap_x(p, *lo, 0) < 0)
        (*lo)++;
    *hi = *lo;
    while (*hi < p->ow && tap_x(p, *hi, 0) >= 0 && tap_x(p, *hi, 0) + span <= p->w)
        (*hi)++;
}

/* One window row of IM2COL: `row` = kw * c patch entries from the taps
 * starting at x0 (inside or not), zero where a tap is padding. */
static void im2col_window_row(float *restrict out, const float *restrict src_row, const td_conv_params *p,
                              int64_t x0)
{
    const int64_t c = p->c, row = p->kw * c;
    int64_t j0, j1;
    inside_run(x0, p->dil_w, p->kw, p->w, &j0, &j1);
    for (int64_t q = 0; q < j0 * c; q++)
        out[q] = 0.0f;
    /* x0 may be negative: index from the row, never form a pointer before
     * the buffer. */
    for (int64_t j = j0; j < j1; j++)
        for (int64_t ch = 0; ch < c; ch++)
            out[j * c + ch] = src_row[(x0 + j * p->dil_w) * c + ch];
    for (int64_t q = j1 * c; q < row; q++)
        out[q] = 0.0f;
}

/* A run of `n` floats, with the common small widths (kw * c for a one- or
 * three-channel image's 3- or 5-wide window) as fixed-size copies the
 * compiler turns into a few moves, the rest a vector loop. */
static inline void copy_run(float *restrict out, const float *restrict in, int64_t n)
{
    switch (n) {
    case 3: memcpy(out, in, 3 * sizeof(float)); break;
    case 5: memcpy(out, in, 5 * sizeof(float)); break;
    case 9: memcpy(out, in, 9 * sizeof(float)); break;
    case 15: memcpy(out, in, 15 * sizeof(float)); break;
    default: /* an inline vector loop: a library call per run cost more than the copy (conv2's 96 floats) */
        for (int64_t q = 0; q < n; q++)
            out[q] = in[q];
        break;
    }
}

/* Rows of the image are found once per (image, output row, window row),
 * windows wholly inside the width copy their runs of kw * c floats
 * (undilated) without bounds tests, and only the columns at the edges
 * take the tap-by-tap code. Two orders, by run length: short runs (conv1's
 * 3 floats) go window row i across every window, then row i + 1, which
 * keeps the per-run work to a copy (2.0x over the window-by-window walk,
 * 1.5x over the window-major order below); runs of a cache line or more
 * (conv2's 96 floats) go window by window, which writes the output as one
 * stream (i-major measured 1.2x slower there). The values are copies, so
 * any order gives the same patches. */
static void im2col_row_major(float *restrict out, const float *restrict a, const td_conv_params *p, int64_t lo,
                             int64_t hi)
{
    const int64_t c = p->c, row = p->kw * c, patch = p->kh * row;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++) {
            float *windows = out + (b * p->oh + oy) * p->ow * patch;
            for (int64_t i = 0; i < p->kh; i++) {
                const int64_t iy = tap_y(p, oy, i);
                if (iy < 0 || iy >= p->h) {
                    for (int64_t ox = 0; ox < p->ow; ox++)
                        for (int64_t q = 0; q < row; q++)
                            windows[ox * patch + i * row + q] = 0.0f;
                    continue;
                }
                const float *src_row = a + (b * p->h + iy) * p->w * c;
                for (int64_t ox = 0; ox < p->ow; ox++) {
                    float *dst = windows + ox * patch + i * row;
                    const int64_t x0 = tap_x(p, ox, 0);
                    if (ox >= lo && ox < hi)
                        copy_run(dst, src_row + x0 * c, row);
                    else
                        im2col_window_row(dst, src_row, p, x0);
                }
            }
        }
}

static void im2col_window_major(float *restrict out, const float *restrict a, const td_conv_params *p, int64_t lo,
                                int64_t hi)
{
    const int64_t c = p->c, row = p->kw * c;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                const int64_t x0 = tap_x(p, ox, 0);
                for (int64_t i = 0; i < p->kh; i++, out += row) {
                    const int64_t iy = tap_y(p, oy, i);
                    if (iy < 0 || iy >= p->h) {
                        for (int64_t q = 0; q < row; q++)
                            out[q] = 0.0f;
                        continue;
                    }
                    const float *src_row = a + (b * p->h + iy) * p->w * c;
                    if (ox >= lo && ox < hi)
                        copy_run(out, src_row + x0 * c, row);
                    else
                        im2col_window_row(out, src_row, p, x0);
                }
            }
}

void td_reference_im2col(float *restrict out, const float *restrict a, const td_conv_params *p)
{
    int64_t lo, hi;
    inside_columns(p, &lo, &hi);
    if (p->dil_w != 1)
        lo = hi = 0; /* dilated taps are not one run */
    if (p->kw * p->c < 16) /* under a 64-byte line */
        im2col_row_major(out, a, p, lo, hi);
    else
        im2col_window_major(out, a, p, lo, hi);
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

/* A window's taps, as a pooling block walks them: rows x cols pixels,
 * tap (i, j) at i * row_step + j * c floats from the first inside tap. */
typedef struct window_taps {
    int64_t rows, cols, row_step, c;
} window_taps;

static window_taps taps_of(const td_conv_params *p, window_inside w)
{
    return (window_taps){w.i1 - w.i0, w.j1 - w.j0, p->w * p->c, p->c};
}

/* Channels a pooling block handles at once: one AVX-512 vector, two AVX2
 * ones. A fixed width is what lets the compiler keep the block's running
 * values (and the gradient's found flags) in registers across the taps,
 * instead of reloading and storing them at every tap with checks for
 * overlap; channels past the last full block take the loops below. */
enum { POOL_LANES = 16 };

/* The max over one window of POOL_LANES channels starting at v (its first
 * inside tap) into out. Every tap is compared, the first too: m = v when
 * v > m or v is NaN leaves m as the first tap's value (a NaN stays that
 * NaN), so the results are the contract's (i, j) scan, lane by lane. */
static inline void max_window_lanes(float *restrict out, const float *restrict v, window_taps t)
{
    float m[POOL_LANES];
    for (int q = 0; q < POOL_LANES; q++)
        m[q] = v[q];
    for (int64_t i = 0; i < t.rows; i++)
        for (int64_t j = 0; j < t.cols; j++) {
            const float *tap = v + i * t.row_step + j * t.c;
#pragma GCC unroll 1
            for (int q = 0; q < POOL_LANES; q++)
                m[q] = tap[q] > m[q] || tap[q] != tap[q] ? tap[q] : m[q];
        }
    for (int q = 0; q < POOL_LANES; q++)
        out[q] = m[q];
}

/* The sum over one window's taps of POOL_LANES channels, in (i, j) order
 * from 0.0f, divided by div. */
static inline void avg_window_lanes(float *restrict out, const float *restrict v, window_taps t, float div)
{
    float s[POOL_LANES];
    for (int q = 0; q < POOL_LANES; q++)
        s[q] = 0.0f;
    for (int64_t i = 0; i < t.rows; i++)
        for (int64_t j = 0; j < t.cols; j++) {
            const float *tap = v + i * t.row_step + j * t.c;
            for (int q = 0; q < POOL_LANES; q++)
                s[q] += tap[q];
        }
    for (int q = 0; q < POOL_LANES; q++)
        out[q] = s[q] / div;
}

/* The windows of output row (b, oy), their first `channels` channels (a
 * multiple of POOL_LANES) block by block, into out_row: one call per
 * output row, in the copy for the machine's vectors (a call per window
 * cost about an eighth of the gradient's time). Windows with no tap
 * inside are left to the caller. */
TD_FIXED_MATH_CLONES
static void pool_row_blocks(float *restrict out_row, const float *restrict a, const td_pool_params *pp, int64_t b,
                            int64_t oy, int64_t channels)
{
    const td_conv_params *p = &pp->geo;
    const bool max = pp->mode == TD_POOL_MAX;
    for (int64_t ox = 0; ox < p->ow; ox++) {
        const window_inside w = inside_window(p, oy, ox);
        if (w.i0 == w.i1 || w.j0 == w.j1)
            continue;
        const float *first = a + pixel_at(p, b, tap_y(p, oy, w.i0), tap_x(p, ox, w.j0));
        const window_taps t = taps_of(p, w);
        const float div = avg_divisor(pp, w);
        float *out = out_row + ox * p->c;
        for (int64_t c0 = 0; c0 < channels; c0 += POOL_LANES) {
            if (max)
                max_window_lanes(out + c0, first + c0, t);
            else
                avg_window_lanes(out + c0, first + c0, t, div);
        }
    }
}

/* Pooling walks each window's inside taps once and, at each tap, every
 * channel of the pixel (contiguous in NHWC) in one inner loop the compiler
 * vectorises; each channel still sees its taps in (i, j) order with the
 * contract's comparisons, so the results are those of a channel-at-a-time
 * loop, bit for bit. Full blocks of POOL_LANES channels go through the
 * fixed-width functions above. */
void td_reference_pool(float *out, const float *a, const td_pool_params *pp)
{
    if (td_reference_pool_tiled(out, a, pp))
        return;
    const td_conv_params *p = &pp->geo;
    const int64_t c = p->c, full = c - c % POOL_LANES;
    const bool max = pp->mode == TD_POOL_MAX;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++) {
            if (full)
                pool_row_blocks(out, a, pp, b, oy, full);
            for (int64_t ox = 0; ox < p->ow; ox++, out += c) {
                const window_inside w = inside_window(p, oy, ox);
                if (w.i0 == w.i1 || w.j0 == w.j1) { /* no tap inside: the empty max, or 0 / the divisor */
                    const float none = max ? -INFINITY : 0.0f / avg_divisor(pp, w);
                    for (int64_t ch = 0; ch < c; ch++)
                        out[ch] = none;
                    continue;
                }
                if (full == c)
                    continue;
                const float div = avg_divisor(pp, w);
                const int64_t rest = c - full;
                float *o = out + full;
                if (!max)
                    for (int64_t ch = 0; ch < rest; ch++)
                        o[ch] = 0.0f; /* the sum starts from 0.0f, as the contract's */
                for (int64_t i = w.i0; i < w.i1; i++)
                    for (int64_t j = w.j0; j < w.j1; j++) {
                        const float *v = a + pixel_at(p, b, tap_y(p, oy, i), tap_x(p, ox, j)) + full;
                        if (max)
                            max_tap(o, v, rest, i == w.i0 && j == w.j0);
                        else
                            for (int64_t ch = 0; ch < rest; ch++)
                                o[ch] += v[ch];
                    }
                if (!max)
                    for (int64_t ch = 0; ch < rest; ch++)
                        o[ch] = o[ch] / div;
            }
        }
}

/* Channels of one window handled together by the max gradient past the
 * last full block of POOL_LANES: a block of them keeps its found flags on
 * the stack. */
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

/* One window's gradient over POOL_LANES channels, gx, x at the window's
 * first inside tap, y and gy at the window's row: max_gradient_tap's
 * arithmetic with the flags, y and gy in registers. With `assign` the
 * window is the only one holding its taps and gx is not read: each tap
 * gets 0.0f + its term, which is the contract's sum from 0.0f (a -0.0 or
 * NaN gradient comes out as that sum does, not copied). */
static inline void max_gradient_window_lanes(float *restrict gx, const float *restrict x, const float *restrict y,
                                      const float *restrict gy, window_taps t, bool assign)
{
    int32_t found[POOL_LANES];
    for (int q = 0; q < POOL_LANES; q++)
        found[q] = 0;
    for (int64_t i = 0; i < t.rows; i++)
        for (int64_t j = 0; j < t.cols; j++) {
            const int64_t e = i * t.row_step + j * t.c;
            const float *xt = x + e;
            float *gt = gx + e;
#pragma GCC unroll 1
            for (int q = 0; q < POOL_LANES; q++) {
                const float xc = xt[q], yc = y[q];
                const int32_t hit = (found[q] == 0) & ((xc == yc) | ((yc != yc) & (xc != xc)));
                const float term = hit ? gy[q] : 0.0f;
                gt[q] = assign ? 0.0f + term : gt[q] + term;
                found[q] |= hit;
            }
        }
}

/* The average's gradient over one window of POOL_LANES channels: each
 * inside tap gets gy / div, added (or with `assign`, 0.0f + it). */
static inline void avg_gradient_window_lanes(float *restrict gx, const float *restrict gy, window_taps t, float div,
                                      bool assign)
{
    for (int64_t i = 0; i < t.rows; i++)
        for (int64_t j = 0; j < t.cols; j++) {
            float *gt = gx + i * t.row_step + j * t.c;
            for (int q = 0; q < POOL_LANES; q++)
                gt[q] = assign ? 0.0f + gy[q] / div : gt[q] + gy[q] / div;
        }
}

/* The gradient of output row (b, oy)'s windows over their first
 * `channels` channels (a multiple of POOL_LANES), block by block: one call
 * per output row, as pool_row_blocks. y_row and gy_row are the row's
 * [ow, c] values. */
TD_FIXED_MATH_CLONES
static void pool_gradient_row_blocks(float *restrict gx, const float *restrict x, const float *restrict y_row,
                                     const float *restrict gy_row, const td_pool_params *pp, int64_t b, int64_t oy,
                                     int64_t channels, bool assign)
{
    const td_conv_params *p = &pp->geo;
    const bool max = pp->mode == TD_POOL_MAX;
    for (int64_t ox = 0; ox < p->ow; ox++) {
        const window_inside w = inside_window(p, oy, ox);
        if (w.i0 == w.i1 || w.j0 == w.j1)
            continue; /* no tap inside: no gradient to give */
        const int64_t first = pixel_at(p, b, tap_y(p, oy, w.i0), tap_x(p, ox, w.j0));
        const window_taps t = taps_of(p, w);
        const float div = avg_divisor(pp, w);
        const float *y = y_row + ox * p->c, *gy = gy_row + ox * p->c;
        for (int64_t c0 = 0; c0 < channels; c0 += POOL_LANES) {
            if (max)
                max_gradient_window_lanes(gx + first + c0, x + first + c0, y + c0, gy + c0, t, assign);
            else
                avg_gradient_window_lanes(gx + first + c0, gy + c0, t, div, assign);
        }
    }
}

/* Windows that tile the image exactly (stride = window, no padding, the
 * output covering every pixel: the seed models' 2x2 / 2 pooling) hold
 * each pixel once, so the gradient is written in one pass, with no
 * zeroing pass before and no read of gx. */
static bool tiles_exactly(const td_conv_params *p)
{
    return p->stride_h == p->kh && p->stride_w == p->kw && p->pad_top == 0 && p->pad_left == 0 &&
           p->oh * p->kh == p->h && p->ow * p->kw == p->w;
}

void td_reference_pool_backward(float *gx, const float *x, const float *y, const float *gy,
                                 const td_pool_params *pp)
{
    if (td_reference_pool_backward_tiled(gx, x, y, gy, pp))
        return;
    const td_conv_params *p = &pp->geo;
    const int64_t c = p->c, full = c - c % POOL_LANES;
    const bool max = pp->mode == TD_POOL_MAX;
    /* Assigning needs every channel in full blocks: the rest adds. */
    const bool assign = tiles_exactly(p) && full == c;
    if (!assign) {
        int64_t image = td_conv_image_count(p);
        for (int64_t e = 0; e < image; e++)
            gx[e] = 0.0f;
    }
    const float *gw = gy, *yw = y; /* the window's (b, oy, ox) row of c */
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++) {
            if (full)
                pool_gradient_row_blocks(gx, x, yw, gw, pp, b, oy, full, assign);
            if (full == c) {
                gw += p->ow * c;
                yw += p->ow * c;
                continue;
            }
            for (int64_t ox = 0; ox < p->ow; ox++, gw += c, yw += c) {
                const window_inside w = inside_window(p, oy, ox);
                const float div = avg_divisor(pp, w);
                /* 32-bit flags, as the floats' lanes; each block of channels
                 * starts with none found. */
                for (int64_t c0 = full; c0 < c; c0 += POOL_CHANNEL_BLOCK) {
                    const int64_t cb = c - c0 < POOL_CHANNEL_BLOCK ? c - c0 : POOL_CHANNEL_BLOCK;
                    int32_t found[POOL_CHANNEL_BLOCK] = {0};
                    for (int64_t i = w.i0; i < w.i1; i++)
                        for (int64_t j = w.j0; j < w.j1; j++) {
                            const int64_t e = pixel_at(p, b, tap_y(p, oy, i), tap_x(p, ox, j)) + c0;
                            if (max) {
                                max_gradient_tap(gx + e, x + e, yw + c0, gw + c0, found, cb);
                                continue;
                            }
                            for (int64_t ch = 0; ch < cb; ch++)
                                gx[e + ch] += gw[c0 + ch] / div;
                        }
                }
            }
        }
}
