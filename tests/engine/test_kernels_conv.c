/* IM2COL, COL2IM, POOL and POOL_BACKWARD: the reference kernels against
 * naive computations written here from the contract's words (a literal scan
 * over every window and tap for each output element), on awkward
 * geometries; adjoint identities computed in double; hand-made cases with
 * NaN and -inf; and the CPU backend's dispatch and argument checks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_backend.h"
#include "td_reference.h"
#include "td_reference_pool_tiled.h"

/* oh for input size h, window k, stride s, dilation d and paddings lo/hi. */
static int64_t out_size(int64_t h, int64_t k, int64_t s, int64_t d, int64_t lo, int64_t hi)
{
    int64_t span = d * (k - 1) + 1;
    return h + lo + hi < span ? 0 : (h + lo + hi - span) / s + 1;
}

typedef struct geo_case {
    int64_t n, h, w, c, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw;
    const char *what;
} geo_case;

static td_conv_params geo_of(const geo_case *g)
{
    td_conv_params p = {.n = g->n, .h = g->h, .w = g->w, .c = g->c, .kh = g->kh, .kw = g->kw,
                         .stride_h = g->sh, .stride_w = g->sw, .pad_top = g->pt, .pad_left = g->pl,
                         .dil_h = g->dh, .dil_w = g->dw};
    p.oh = out_size(g->h, g->kh, g->sh, g->dh, g->pt, g->pb);
    p.ow = out_size(g->w, g->kw, g->sw, g->dw, g->pl, g->pr);
    return p;
}

/* Convolution geometries: strides 2/3, dilation 2, asymmetric and
 * oversized padding, 1x1, window = image, an empty output. */
static const geo_case conv_cases[] = {
    {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 2, 0, 1, 2, "stride 2x3, dilation 1x2, asymmetric padding"},
    {1, 9, 8, 2, 3, 3, 3, 2, 0, 1, 1, 2, 2, 2, "dilation 2, stride 3x2"},
    {3, 4, 6, 1, 2, 2, 1, 1, 4, 3, 5, 4, 1, 1, "padding larger than the window"},
    {2, 5, 3, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, "1x1"},
    {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1, "window = image"},
    {1, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "3x3 SAME"},
    {1, 2, 2, 1, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, "window larger than the image: no output"},
    /* The seed CNN's two convolutions (fewer images): the windows wholly
     * inside the width take the run copies (3 floats, 96 floats). */
    {2, 28, 28, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "seed conv1: 28x28x1, 3x3 SAME"},
    {1, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "seed conv2: 14x14x32, 3x3 SAME"},
    {2, 11, 13, 1, 5, 5, 2, 2, 2, 1, 2, 3, 1, 1, "5-float runs, stride 2, uneven padding"},
    {1, 9, 10, 3, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, "15-float runs"},
    {1, 8, 12, 2, 3, 3, 1, 2, 0, 0, 1, 0, 1, 1, "6-float runs (the general copy), padding on the left"},
    {2, 9, 11, 1, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, "dilation 2, c = 1: inside columns copied tap by tap"},
    {1, 9, 10, 8, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, "dilation 2, 24-float window rows (window by window)"},
    {2, 7, 9, 16, 2, 2, 2, 2, 1, 0, 1, 0, 1, 1, "32-float runs, stride 2, padding top and left"},
};
#define N_CONV (sizeof conv_cases / sizeof conv_cases[0])

/* Pooling geometries (no dilation). */
static const geo_case pool_cases[] = {
    {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 1, 1, 1, 1, "3x2 window, stride 2x3, asymmetric padding"},
    {1, 8, 8, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, "2x2 stride 2"},
    {2, 4, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "3x3 SAME stride 1"},
    {1, 3, 4, 2, 2, 2, 1, 2, 3, 3, 2, 3, 1, 1, "padding larger than the window (empty windows)"},
    {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1, "window = image"},
    {3, 4, 3, 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, "1x1"},
    {1, 9, 7, 1, 3, 3, 3, 3, 2, 0, 1, 2, 1, 1, "stride 3, padding on one side"},
    /* Channels in blocks of 16 lanes (the vector path), a tail past them,
     * and windows that tile the image exactly (the gradient written in one
     * pass) or not. */
    {2, 28, 28, 32, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, "seed pool1: 28x28x32, 2x2 stride 2 (tiles exactly)"},
    {2, 14, 14, 64, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, "seed pool2: 14x14x64, 2x2 stride 2 (tiles exactly)"},
    {1, 6, 6, 35, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, "35 channels: two blocks of 16 and a tail of 3"},
    {2, 7, 9, 16, 2, 3, 2, 3, 0, 0, 0, 0, 1, 1, "odd size: the last row and column in no window"},
    {1, 7, 8, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, "16 channels, overlapping 3x3 windows, padding"},
    {1, 5, 6, 32, 2, 2, 3, 3, 1, 0, 0, 1, 1, 1, "32 channels, stride 3 over 2x2: gaps, padding"},
    /* Other windows that tile exactly with whole vectors of channels: the
     * vector path for tiling max pools (td_reference_pool_tiled.c). */
    {2, 9, 6, 16, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1, "3x3 stride 3 tiling 9x6, 16 channels"},
    {1, 4, 6, 48, 1, 2, 1, 2, 0, 0, 0, 0, 1, 1, "1x2 stride 1x2, 48 channels"},
    {3, 2, 2, 16, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, "one 2x2 window per image"},
};
#define N_POOL (sizeof pool_cases / sizeof pool_cases[0])

static float *random_floats(uint64_t seed, int64_t n)
{
    test_rng r = {seed};
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    cr_assert_not_null(v);
    test_fill_uniform(&r, v, (size_t)n, -2.0f, 2.0f);
    return v;
}

/* Equal bits, or both NaN. */
static void expect_same(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        bool same = memcmp(&got[i], &want[i], 4) == 0 || (isnan(got[i]) && isnan(want[i]));
        cr_assert(same, "%s: element %lld is %a, expected %a", what, (long long)i, (double)got[i], (double)want[i]);
    }
}

static bool inside(const td_conv_params *p, int64_t iy, int64_t ix)
{
    return iy >= 0 && iy < p->h && ix >= 0 && ix < p->w;
}

static int64_t img_at(const td_conv_params *p, int64_t b, int64_t iy, int64_t ix, int64_t ch)
{
    return ((b * p->h + iy) * p->w + ix) * p->c + ch;
}

/* ---- naive versions, one output element at a time ---- */

static void naive_im2col(float *out, const float *x, const td_conv_params *p)
{
    int64_t rows = p->n * p->oh * p->ow, cols = p->kh * p->kw * p->c;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            int64_t b = r / (p->oh * p->ow), oy = r / p->ow % p->oh, ox = r % p->ow;
            int64_t i = q / (p->kw * p->c), j = q / p->c % p->kw, ch = q % p->c;
            int64_t iy = oy * p->stride_h - p->pad_top + i * p->dil_h;
            int64_t ix = ox * p->stride_w - p->pad_left + j * p->dil_w;
            out[r * cols + q] = inside(p, iy, ix) ? x[img_at(p, b, iy, ix, ch)] : 0.0f;
        }
}

static void naive_col2im(float *out, const float *cols, const td_conv_params *p)
{
    int64_t width = p->kh * p->kw * p->c;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t iy = 0; iy < p->h; iy++)
            for (int64_t ix = 0; ix < p->w; ix++)
                for (int64_t ch = 0; ch < p->c; ch++) {
                    float sum = 0.0f;
                    for (int64_t oy = 0; oy < p->oh; oy++)
                        for (int64_t ox = 0; ox < p->ow; ox++)
                            for (int64_t i = 0; i < p->kh; i++)
                                for (int64_t j = 0; j < p->kw; j++)
                                    if (oy * p->stride_h - p->pad_top + i * p->dil_h == iy &&
                                        ox * p->stride_w - p->pad_left + j * p->dil_w == ix)
                                        sum += cols[((b * p->oh + oy) * p->ow + ox) * width + (i * p->kw + j) * p->c + ch];
                    out[img_at(p, b, iy, ix, ch)] = sum;
                }
}

/* The values of window (b, oy, ox, ch) inside the image, in (i, j) order,
 * and their image indices; returns how many. */
static int64_t window_taps(const td_conv_params *p, const float *x, int64_t b, int64_t oy, int64_t ox, int64_t ch,
                           float *vals, int64_t *where)
{
    int64_t k = 0;
    for (int64_t i = 0; i < p->kh; i++)
        for (int64_t j = 0; j < p->kw; j++) {
            int64_t iy = oy * p->stride_h - p->pad_top + i, ix = ox * p->stride_w - p->pad_left + j;
            if (inside(p, iy, ix)) {
                vals[k] = x[img_at(p, b, iy, ix, ch)];
                where[k++] = img_at(p, b, iy, ix, ch);
            }
        }
    return k;
}

static void naive_pool(float *out, const float *x, const td_pool_params *pp)
{
    const td_conv_params *p = &pp->geo;
    float *vals = malloc((size_t)(p->kh * p->kw) * sizeof *vals);
    int64_t *where = malloc((size_t)(p->kh * p->kw) * sizeof *where);
    for (int64_t b = 0, o = 0; b < p->n; b++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++)
                for (int64_t ch = 0; ch < p->c; ch++, o++) {
                    int64_t k = window_taps(p, x, b, oy, ox, ch, vals, where);
                    if (pp->mode == TD_POOL_MAX) {
                        float m = -INFINITY;
                        for (int64_t t = 0; t < k; t++)
                            if (t == 0 || vals[t] > m || isnan(vals[t]))
                                m = vals[t];
                        out[o] = m;
                    } else {
                        float s = 0.0f;
                        for (int64_t t = 0; t < k; t++)
                            s += vals[t];
                        out[o] = s / (float)(pp->count_include_pad ? p->kh * p->kw : k);
                    }
                }
    free(vals);
    free(where);
}

/* Gathers, for each input element, over every window in (oy, ox) order. */
static void naive_pool_backward(float *gx, const float *x, const float *y, const float *gy,
                                const td_pool_params *pp)
{
    const td_conv_params *p = &pp->geo;
    float *vals = malloc((size_t)(p->kh * p->kw) * sizeof *vals);
    int64_t *where = malloc((size_t)(p->kh * p->kw) * sizeof *where);
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t iy = 0; iy < p->h; iy++)
            for (int64_t ix = 0; ix < p->w; ix++)
                for (int64_t ch = 0; ch < p->c; ch++) {
                    int64_t me = img_at(p, b, iy, ix, ch);
                    float sum = 0.0f;
                    for (int64_t oy = 0; oy < p->oh; oy++)
                        for (int64_t ox = 0; ox < p->ow; ox++) {
                            int64_t w = ((b * p->oh + oy) * p->ow + ox) * p->c + ch;
                            int64_t k = window_taps(p, x, b, oy, ox, ch, vals, where);
                            int64_t chosen = -1;
                            for (int64_t t = 0; t < k && pp->mode == TD_POOL_MAX && chosen < 0; t++)
                                if (vals[t] == y[w] || (isnan(vals[t]) && isnan(y[w])))
                                    chosen = where[t];
                            for (int64_t t = 0; t < k; t++) {
                                if (where[t] != me)
                                    continue;
                                if (pp->mode == TD_POOL_MAX && chosen == me)
                                    sum += gy[w];
                                else if (pp->mode == TD_POOL_AVG)
                                    sum += gy[w] / (float)(pp->count_include_pad ? p->kh * p->kw : k);
                            }
                        }
                    gx[me] = sum;
                }
    free(vals);
    free(where);
}

static double dot(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

Test(conv_reference, im2col_and_col2im_match_naive_and_are_adjoint)
{
    for (size_t k = 0; k < N_CONV; k++) {
        td_conv_params p = geo_of(&conv_cases[k]);
        cr_assert_null(td_conv_check(&p, 0), "%s: %s", conv_cases[k].what, td_conv_check(&p, 0));
        int64_t ni = td_conv_image_count(&p), np = td_conv_patch_count(&p);
        cr_assert_eq(np, p.n * p.oh * p.ow * p.kh * p.kw * p.c);
        float *x = random_floats(10 + k, ni), *cols = random_floats(100 + k, np);
        float *got = malloc((size_t)(np + ni + 1) * 4), *want = malloc((size_t)(np + ni + 1) * 4);
        /* A poisoned buffer: every element must be written. */
        for (int64_t i = 0; i < np; i++)
            got[i] = NAN;
        td_reference_im2col(got, x, &p);
        naive_im2col(want, x, &p);
        expect_same(got, want, np, conv_cases[k].what);
        double lhs = dot(got, cols, np); /* <im2col(x), P> */

        for (int64_t i = 0; i < ni; i++)
            got[i] = NAN;
        td_reference_col2im(got, cols, &p);
        naive_col2im(want, cols, &p);
        expect_same(got, want, ni, conv_cases[k].what);
        double rhs = dot(x, got, ni); /* <x, col2im(P)> */
        cr_assert(test_close(lhs, rhs, 1e-5, 1e-5), "%s: adjoint identity %.9g vs %.9g", conv_cases[k].what, lhs,
                  rhs);
        free(x);
        free(cols);
        free(got);
        free(want);
    }
}

Test(conv_reference, im2col_hand_made)
{
    /* 1x3x3x1 image 1..9, 2x2 window, stride 1, padding 1 on top/left only:
     * oh = ow = 3; patch (0,0) sees padding except its last tap. */
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    td_conv_params p = {.n = 1, .h = 3, .w = 3, .c = 1, .kh = 2, .kw = 2, .oh = 3, .ow = 3, .stride_h = 1,
                        .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
    const float want[36] = {0, 0, 0, 1, 0, 0, 1, 2, 0, 0, 2, 3, 0, 1, 0, 4, 1, 2, 4, 5, 2, 3, 5, 6,
                            0, 4, 0, 7, 4, 5, 7, 8, 5, 6, 8, 9};
    float got[36];
    td_reference_im2col(got, x, &p);
    expect_same(got, want, 36, "im2col 3x3 pad 1");
    /* col2im of all-ones counts how many patches read each pixel. */
    float ones[36], counts[9];
    for (int i = 0; i < 36; i++)
        ones[i] = 1.0f;
    td_reference_col2im(counts, ones, &p);
    const float want_counts[9] = {4, 4, 2, 4, 4, 2, 2, 2, 1};
    expect_same(counts, want_counts, 9, "col2im coverage counts");
}

Test(conv_reference, pool_matches_naive_every_mode)
{
    for (size_t k = 0; k < N_POOL; k++)
        for (int mode = 0; mode < 3; mode++) {
            td_pool_params pp = {.geo = geo_of(&pool_cases[k]), .mode = mode == 0 ? TD_POOL_MAX : TD_POOL_AVG,
                                 .count_include_pad = mode == 2};
            cr_assert_null(td_pool_check(&pp));
            const td_conv_params *p = &pp.geo;
            int64_t ni = td_conv_image_count(p), no = td_conv_pooled_count(p);
            float *x = random_floats(20 + k, ni);
            /* Ties (the first maximum takes the gradient), a NaN, -inf. */
            for (int64_t i = 0; i < ni; i += 5)
                x[i] = 1.5f;
            /* Signed zeros in one channel's neighbouring taps: the max keeps
             * the first of equal values, +0.0 before -0.0. */
            for (int64_t i = 2; i + p->c < ni; i += 11) {
                x[i] = 0.0f;
                x[i + p->c] = -0.0f;
            }
            if (ni > 7) {
                x[7] = NAN;
                x[3] = -INFINITY;
            }
            float *y = malloc((size_t)no * 4 + 4), *wy = malloc((size_t)no * 4 + 4);
            for (int64_t i = 0; i < no; i++)
                y[i] = 12345.0f;
            td_reference_pool(y, x, &pp);
            naive_pool(wy, x, &pp);
            char what[160];
            snprintf(what, sizeof what, "pool mode %d: %s", mode, pool_cases[k].what);
            expect_same(y, wy, no, what);

            float *gy = random_floats(30 + k, no), *gx = malloc((size_t)ni * 4 + 4), *wgx = malloc((size_t)ni * 4 + 4);
            for (int64_t i = 0; i < ni; i++)
                gx[i] = NAN;
            td_reference_pool_backward(gx, x, y, gy, &pp);
            naive_pool_backward(wgx, x, y, gy, &pp);
            snprintf(what, sizeof what, "pool_backward mode %d: %s", mode, pool_cases[k].what);
            expect_same(gx, wgx, ni, what);
            free(x);
            free(y);
            free(wy);
            free(gy);
            free(gx);
            free(wgx);
        }
}

/* Average pooling is linear: <avg_pool(x), g> = <x, pool_backward(g)>. Max
 * pooling hands each window's gradient to exactly one input. */
/* The vector path for tiling max pools is taken exactly where it applies
 * (on a CPU with AVX-512; elsewhere it declines everything), and declines
 * averages, windows that do not tile and partial vectors of channels. */
Test(conv_reference, tiled_max_pool_path_is_taken_where_it_applies)
{
    const td_conv_params seed = geo_of(&pool_cases[7]);
    td_pool_params max = {.geo = seed, .mode = TD_POOL_MAX};
    td_pool_params avg = {.geo = seed, .mode = TD_POOL_AVG};
    td_pool_params odd = {.geo = geo_of(&pool_cases[9]), .mode = TD_POOL_MAX};  /* 35 channels */
    td_pool_params gaps = {.geo = geo_of(&pool_cases[12]), .mode = TD_POOL_MAX}; /* stride 3 over 2x2 */
    const int64_t ni = td_conv_image_count(&seed), no = td_conv_pooled_count(&seed);
    float *x = random_floats(99, ni), *y = malloc((size_t)no * 4), *gy = random_floats(98, no);
    float *gx = malloc((size_t)ni * 4);
    cr_assert(y && gx);
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    const bool vectors = __builtin_cpu_supports("avx512f");
#else
    const bool vectors = false;
#endif
    cr_assert_eq(td_reference_pool_tiled(y, x, &max), vectors);
    cr_assert_eq(td_reference_pool_backward_tiled(gx, x, y, gy, &max), vectors);
    cr_assert_not(td_reference_pool_tiled(y, x, &avg));
    cr_assert_not(td_reference_pool_backward_tiled(gx, x, y, gy, &avg));
    cr_assert_not(td_reference_pool_tiled(y, x, &odd));
    cr_assert_not(td_reference_pool_tiled(y, x, &gaps));
    free(x);
    free(y);
    free(gy);
    free(gx);
}

Test(conv_reference, pool_backward_identities)
{
    for (size_t k = 0; k < N_POOL; k++) {
        td_pool_params pp = {.geo = geo_of(&pool_cases[k]), .mode = TD_POOL_AVG, .count_include_pad = (int)(k % 2)};
        const td_conv_params *p = &pp.geo;
        int64_t ni = td_conv_image_count(p), no = td_conv_pooled_count(p);
        float *x = random_floats(40 + k, ni), *gy = random_floats(50 + k, no);
        float *y = malloc((size_t)no * 4 + 4), *gx = malloc((size_t)ni * 4 + 4);
        /* Windows entirely in padding give NaN without count_include_pad:
         * no gradient reaches x from them, so they drop out of the sum. */
        td_reference_pool(y, x, &pp);
        td_reference_pool_backward(gx, x, y, gy, &pp);
        double lhs = 0.0;
        for (int64_t i = 0; i < no; i++)
            lhs += isnan(y[i]) ? 0.0 : (double)y[i] * gy[i];
        cr_assert(test_close(lhs, dot(x, gx, ni), 1e-5, 1e-5), "avg adjoint: %s", pool_cases[k].what);

        pp.mode = TD_POOL_MAX;
        td_reference_pool(y, x, &pp);
        td_reference_pool_backward(gx, x, y, gy, &pp);
        double sum_gy = 0.0, sum_gx = 0.0;
        for (int64_t i = 0; i < no; i++)
            sum_gy += isinf(y[i]) ? 0.0 : gy[i]; /* -inf: a window with no tap inside */
        for (int64_t i = 0; i < ni; i++)
            sum_gx += gx[i];
        cr_assert(test_close(sum_gx, sum_gy, 1e-5, 1e-5), "max gradient mass: %s", pool_cases[k].what);
        free(x);
        free(gy);
        free(y);
        free(gx);
    }
}

Test(conv_reference, pool_hand_made_nan_inf_and_ties)
{
    /* 1x2x3x1, 2x2 window, stride 1, no padding: windows {x0,x1,x3,x4} and
     * {x1,x2,x4,x5}. */
    const float x[6] = {1.0f, 3.0f, NAN, 3.0f, -INFINITY, 2.0f};
    td_pool_params pp = {.geo = {.n = 1, .h = 2, .w = 3, .c = 1, .kh = 2, .kw = 2, .oh = 1, .ow = 2,
                                 .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1},
                         .mode = TD_POOL_MAX};
    float y[2], gx[6];
    td_reference_pool(y, x, &pp);
    cr_assert_eq(y[0], 3.0f);
    cr_assert(isnan(y[1]), "a NaN in the window is kept");
    const float gy[2] = {10.0f, 100.0f};
    td_reference_pool_backward(gx, x, y, gy, &pp);
    /* Window 0: the first 3 (x1) takes 10, not x3. Window 1: the NaN x2. */
    const float want[6] = {0.0f, 10.0f, 100.0f, 0.0f, 0.0f, 0.0f};
    expect_same(gx, want, 6, "max gradient to the first maximum");

    /* Avg with padding 1 all round, 3x3 window over a 1x1 image of 6:
     * count_include_pad divides by 9, otherwise by 1. */
    const float one[1] = {6.0f};
    td_pool_params avg = {.geo = {.n = 1, .h = 1, .w = 1, .c = 1, .kh = 3, .kw = 3, .oh = 1, .ow = 1, .stride_h = 1,
                                  .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1},
                          .mode = TD_POOL_AVG, .count_include_pad = 1};
    float v;
    td_reference_pool(&v, one, &avg);
    cr_assert_eq(v, 6.0f / 9.0f);
    avg.count_include_pad = 0;
    td_reference_pool(&v, one, &avg);
    cr_assert_eq(v, 6.0f);

    /* A window wholly in padding: max -inf, avg 0 (include pad) or NaN. */
    td_pool_params far = {.geo = {.n = 1, .h = 1, .w = 1, .c = 1, .kh = 1, .kw = 1, .oh = 1, .ow = 1, .stride_h = 1,
                                  .stride_w = 1, .pad_top = 1, .pad_left = 0, .dil_h = 1, .dil_w = 1},
                          .mode = TD_POOL_MAX};
    td_reference_pool(&v, one, &far);
    cr_assert(isinf(v) && v < 0);
    far.mode = TD_POOL_AVG;
    far.count_include_pad = 1;
    td_reference_pool(&v, one, &far);
    cr_assert(v == 0.0f && !signbit(v));
    far.count_include_pad = 0;
    td_reference_pool(&v, one, &far);
    cr_assert(isnan(v));
    float g = 5.0f, back = 99.0f;
    td_reference_pool_backward(&back, one, &v, &g, &far);
    cr_assert_eq(back, 0.0f, "a pixel no window reads gets 0");
}

Test(conv_reference, geometry_checks)
{
    td_conv_params ok = {.n = 1, .h = 4, .w = 4, .c = 1, .kh = 2, .kw = 2, .oh = 3, .ow = 3, .stride_h = 1,
                         .stride_w = 1, .dil_h = 1, .dil_w = 1};
    cr_assert_null(td_conv_check(&ok, 0));
    td_conv_params bad = ok;
    bad.stride_w = 0;
    cr_assert_not_null(td_conv_check(&bad, 0));
    bad = ok;
    bad.kh = 0;
    cr_assert_not_null(td_conv_check(&bad, 0));
    bad = ok;
    bad.n = -1;
    cr_assert_not_null(td_conv_check(&bad, 0));
    bad = ok;
    bad.dil_h = 2;
    cr_assert_null(td_conv_check(&bad, 0));
    cr_assert_not_null(td_conv_check(&bad, 1), "pooling has no dilation");
    bad = ok;
    bad.n = bad.h = bad.w = bad.c = (int64_t)1 << 30; /* 2^120 elements */
    cr_assert_not_null(td_conv_check(&bad, 0));
    td_pool_params pp = {.geo = ok, .mode = 2};
    cr_assert_not_null(td_pool_check(&pp));
}

/* ---- through the CPU backend's vtable ---- */

static td_context *ctx;
static td_device *dev;
static const td_backend_ops *ops = &td_cpu_backend;

static void setup(void)
{
    ctx = test_context(0);
    TEST_OK(ctx, ops->open(ctx, 0, 0, &dev));
}

static void teardown(void)
{
    ops->close(dev);
    td_context_destroy(ctx);
}

TestSuite(conv_cpu_backend, .init = setup, .fini = teardown);

static void run_one(const td_kernel_call *call)
{
    td_segment *seg = NULL;
    TEST_OK(ctx, ops->segment_create(dev, call, 1, &seg));
    TEST_OK(ctx, ops->segment_run(dev, seg));
    uint64_t t;
    TEST_OK(ctx, ops->submit(dev, &t));
    TEST_OK(ctx, ops->wait(dev, t, 1000));
    ops->segment_destroy(dev, seg);
}

Test(conv_cpu_backend, every_kernel_at_offsets)
{
    td_pool_params pp = {.geo = geo_of(&pool_cases[0]), .mode = TD_POOL_MAX};
    td_conv_params cp = geo_of(&conv_cases[1]);
    int64_t ni = td_conv_image_count(&cp), np = td_conv_patch_count(&cp);
    int64_t pi = td_conv_image_count(&pp.geo), po = td_conv_pooled_count(&pp.geo);
    const int64_t total = 4096;
    cr_assert_lt(ni + np + 16, total);
    float *mem = random_floats(77, total), *want = malloc(total * 4), *got = malloc(total * 4);
    td_buffer *buf = NULL;
    TEST_OK(ctx, ops->buffer_create(dev, total * 4, &buf));
    float *dev_mem = ops->buffer_host_pointer(dev, buf);

    td_kernel_call calls[5] = {
        {.kernel = TD_KERNEL_IM2COL, .out = {buf, 7 + ni}, .a = {buf, 3}, .p.conv = cp},
        {.kernel = TD_KERNEL_COL2IM, .out = {buf, 3}, .a = {buf, 7 + ni}, .p.conv = cp},
        {.kernel = TD_KERNEL_POOL, .out = {buf, 11 + pi}, .a = {buf, 5}, .p.pool = pp},
        {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {buf, 2000}, .a = {buf, 5}, .b = {buf, 11 + pi},
         .c = {buf, 3000}, .p.pool = pp},
        {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {buf, 2000}, .a = {buf, 5}, .b = {buf, 11 + pi},
         .c = {buf, 3000}, .p.pool = pp},
    };
    calls[4].p.pool.mode = TD_POOL_AVG;
    for (int k = 0; k < 5; k++) {
        memcpy(dev_mem, mem, total * 4);
        memcpy(want, mem, total * 4);
        const td_kernel_call *c = &calls[k];
        switch (c->kernel) {
        case TD_KERNEL_IM2COL: naive_im2col(want + c->out.offset, want + c->a.offset, &cp); break;
        case TD_KERNEL_COL2IM: naive_col2im(want + c->out.offset, want + c->a.offset, &cp); break;
        case TD_KERNEL_POOL: naive_pool(want + c->out.offset, want + c->a.offset, &c->p.pool); break;
        default:
            naive_pool_backward(want + c->out.offset, want + c->a.offset, want + c->b.offset, want + c->c.offset,
                                &c->p.pool);
            break;
        }
        run_one(c);
        memcpy(got, dev_mem, total * 4);
        expect_same(got, want, total, td_kernel_name(c->kernel)); /* nothing else written */
    }
    (void)po;
    ops->buffer_destroy(dev, buf);
    free(mem);
    free(want);
    free(got);
}

Test(conv_cpu_backend, bad_arguments_are_statuses)
{
    td_buffer *buf = NULL;
    TEST_OK(ctx, ops->buffer_create(dev, 1000 * 4, &buf));
    td_conv_params cp = {.n = 1, .h = 4, .w = 4, .c = 2, .kh = 3, .kw = 3, .oh = 4, .ow = 4, .stride_h = 1,
                         .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
    td_pool_params pp = {.geo = cp, .mode = TD_POOL_MAX};
    /* Patches: 288 elements; image and pooled output: 32. */
    td_kernel_call cases[] = {
        {.kernel = TD_KERNEL_IM2COL, .out = {buf, 800}, .a = {buf, 0}, .p.conv = cp},
        {.kernel = TD_KERNEL_IM2COL, .out = {buf, 0}, .a = {buf, 990}, .p.conv = cp},
        {.kernel = TD_KERNEL_COL2IM, .out = {buf, 0}, .a = {buf, 713}, .p.conv = cp},
        {.kernel = TD_KERNEL_COL2IM, .out = {buf, 1000}, .a = {buf, 0}, .p.conv = cp},
        {.kernel = TD_KERNEL_POOL, .out = {buf, 969}, .a = {buf, 0}, .p.pool = pp},
        {.kernel = TD_KERNEL_POOL, .out = {buf, 0}, .a = {NULL, 0}, .p.pool = pp},
        {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {buf, 0}, .a = {buf, 0}, .b = {buf, 0}, .c = {buf, 980},
         .p.pool = pp},
        {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {buf, 0}, .a = {buf, 0}, .b = {buf, 5000}, .c = {buf, 0},
         .p.pool = pp},
    };
    td_segment *seg = NULL;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        td_kernel_call two[2] = {{.kernel = TD_KERNEL_FILL, .n = 1, .out = {buf, 0}}, cases[k]};
        TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, td_kernel_name(cases[k].kernel),
                   ops->segment_create(dev, two, 2, &seg));
        cr_assert(test_message_mentions(ctx, "call 1"), "%s", td_last_error(ctx));
    }
    td_kernel_call geo = {.kernel = TD_KERNEL_IM2COL, .out = {buf, 0}, .a = {buf, 0}, .p.conv = cp};
    geo.p.conv.stride_h = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "stride", ops->segment_create(dev, &geo, 1, &seg));
    td_kernel_call mode = {.kernel = TD_KERNEL_POOL, .out = {buf, 0}, .a = {buf, 0}, .p.pool = pp};
    mode.p.pool.mode = 7;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "mode", ops->segment_create(dev, &mode, 1, &seg));
    mode.p.pool.mode = TD_POOL_AVG;
    mode.p.pool.geo.dil_w = 2;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "dilation", ops->segment_create(dev, &mode, 1, &seg));
    /* Average pooling's backward reads neither x nor y: they may be absent. */
    td_kernel_call avg = {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {buf, 0}, .c = {buf, 100}, .p.pool = pp};
    avg.p.pool.mode = TD_POOL_AVG;
    TEST_OK(ctx, ops->segment_create(dev, &avg, 1, &seg));
    ops->segment_destroy(dev, seg);
    ops->buffer_destroy(dev, buf);
}
