/* ELEMENTWISE and REDUCE: the reference kernels' fast paths (axes folded
 * into long rows, bias-style broadcast rows, row sums in vector blocks of
 * accumulators) against plain scalar loops written here from the
 * contract's words, bitwise, at the seed models' shapes and at awkward ones
 * that reach every path: broadcast strides, axes of extent 1 with odd
 * strides, layouts that fold only in part, odd lengths, blocks of
 * 64/32/16/8 outputs and the few past them, NaN, infinities and signed
 * zeros among the inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_fixed_math.h"
#include "td_reference.h"

/* ---- ELEMENTWISE ---- */

/* The ops' expressions with the reference's functions, except tanh, which
 * the reference keeps private: the ops built on it are checked against the
 * reference's own one-element calls instead (below). */
#define TD_EXP td_fixed_expf
#define TD_LOG td_fixed_logf
#define TD_SQRT sqrtf
#define TD_ERF td_fixed_erff
#define TD_ISNAN isnan
#define TD_TANH(v) (NAN + (v))
static bool uses_tanh(int32_t op)
{
    return op == TD_EW_TANH || op == TD_EW_GELU_TANH || op == TD_EW_GELU_TANH_GRAD;
}

static float plain_op(int32_t op, float x, float y, float alpha)
{
    (void)x;
    (void)y;
    (void)alpha;
    switch (op) {
#define PLAIN_CASE(id, NAME, arity, exact, expr) \
    case id: return (expr);
        TD_EW_OPS(PLAIN_CASE)
#undef PLAIN_CASE
    default: return NAN;
    }
}

/* The contract's loop: out row-major over dims, each element one
 * evaluation of the op at its strided operands. */
static void plain_elementwise(float *out, const float *a, const float *b, const td_ew_params *p)
{
    const int64_t *d = p->dims, *sa = p->a_strides, *sb = p->b_strides;
    int binary = td_ew_arity(p->op) == 2;
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < d[0]; i0++)
        for (int64_t i1 = 0; i1 < d[1]; i1++)
            for (int64_t i2 = 0; i2 < d[2]; i2++)
                for (int64_t i3 = 0; i3 < d[3]; i3++, o++) {
                    float x = a[i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3]];
                    float y = binary ? b[i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3]] : 0.0f;
                    out[o] = plain_op(p->op, x, y, p->alpha);
                }
}

/* The same elements, each through a reference call of one element (no
 * folding, no rows): the oracle for the tanh ops. */
static void one_by_one_elementwise(float *out, const float *a, const float *b, const td_ew_params *p)
{
    const int64_t *d = p->dims, *sa = p->a_strides, *sb = p->b_strides;
    td_ew_params one = {.op = p->op, .alpha = p->alpha, .dims = {1, 1, 1, 1}};
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < d[0]; i0++)
        for (int64_t i1 = 0; i1 < d[1]; i1++)
            for (int64_t i2 = 0; i2 < d[2]; i2++)
                for (int64_t i3 = 0; i3 < d[3]; i3++, o++)
                    td_reference_elementwise(out + o, a + i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3],
                                             b + i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3], &one);
}

typedef struct ew_layout {
    const char *what;
    int64_t dims[TD_KERNEL_RANK], a_strides[TD_KERNEL_RANK], b_strides[TD_KERNEL_RANK];
} ew_layout;

static const ew_layout ew_layouts[] = {
    {"seed input scaling [2,28,28,1], b a scalar", {2, 28, 28, 1}, {784, 28, 1, 1}, {0, 0, 0, 0}},
    {"seed conv1 activation [2,28,28,32] dense", {2, 28, 28, 32}, {25088, 896, 32, 1}, {25088, 896, 32, 1}},
    {"seed conv1 bias [2,28,28,32], b broadcast along the last axis", {2, 28, 28, 32}, {25088, 896, 32, 1},
     {0, 0, 0, 1}},
    {"seed MLP bias [1,1,9,512], b a row", {1, 1, 9, 512}, {0, 0, 512, 1}, {0, 0, 0, 1}},
    {"odd lengths, folds to one row of 1155", {3, 5, 7, 11}, {385, 77, 11, 1}, {385, 77, 11, 1}},
    {"extent-1 axes with stray strides", {5, 1, 1, 17}, {17, 999, -3, 1}, {17, 5, 7, 1}},
    {"a folds, b broadcast over axis 1 does not", {3, 4, 5, 6}, {120, 30, 6, 1}, {30, 0, 6, 1}},
    {"a broadcast over axes 1 and 2 (a column), b dense", {3, 4, 5, 6}, {6, 0, 0, 1}, {120, 30, 6, 1}},
    {"b a column broadcast along the last axis", {2, 3, 7, 13}, {273, 91, 13, 1}, {21, 7, 1, 0}},
    {"a transposed (no fold), b a scalar", {2, 3, 4, 5}, {1, 2, 6, 24}, {0, 0, 0, 0}},
    {"a strided rows (a view of every other row)", {1, 4, 6, 9}, {0, 108, 18, 1}, {0, 54, 9, 1}},
    {"a strided elements", {1, 1, 3, 33}, {0, 0, 66, 2}, {0, 0, 33, 1}},
    {"every extent 1", {1, 1, 1, 1}, {7, 7, 7, 7}, {9, 9, 9, 9}},
    {"an empty axis", {2, 0, 3, 4}, {0, 12, 4, 1}, {0, 12, 4, 1}},
};

/* Floats from the operand's start to past its last element reached
 * (strides on extent-1 axes, negative ones too, are never applied). */
static int64_t extent_of(const int64_t dims[TD_KERNEL_RANK], const int64_t strides[TD_KERNEL_RANK])
{
    int64_t hi = 0;
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        if (dims[k] > 1 && strides[k] > 0)
            hi += (dims[k] - 1) * strides[k];
    return hi + 1;
}

static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f, 3.4e38f, -1e-30f, 1.0f, -1.0f};
enum { SPECIALS = sizeof specials / sizeof specials[0] };

static float *inputs(uint64_t seed, int64_t n, int shift)
{
    test_rng r = {seed};
    float *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    test_fill_uniform(&r, v, (size_t)n, -3.0f, 3.0f);
    /* Specials spread over the buffer, so every path meets some. */
    for (int64_t i = shift; i < n; i += 37)
        v[i] = specials[(i / 37) % SPECIALS];
    return v;
}

/* Equal bits, or both NaN (a NaN's payload is not part of any contract). */
static void expect_same(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) && isnan(want[i]))
            continue;
        uint32_t g, w;
        memcpy(&g, &got[i], 4);
        memcpy(&w, &want[i], 4);
        cr_assert_eq(g, w, "%s: element %lld is %a, expected %a", what, (long long)i, (double)got[i],
                     (double)want[i]);
    }
}

Test(fast_paths, elementwise_every_op_matches_the_plain_loop)
{
    for (size_t l = 0; l < sizeof ew_layouts / sizeof ew_layouts[0]; l++) {
        const ew_layout *L = &ew_layouts[l];
        const int64_t n = L->dims[0] * L->dims[1] * L->dims[2] * L->dims[3];
        const int64_t na = extent_of(L->dims, L->a_strides), nb = extent_of(L->dims, L->b_strides);
        float *a = inputs(1 + l, na, 1), *b = inputs(100 + l, nb, 5);
        float *got = malloc((size_t)(n + 1) * 4), *want = malloc((size_t)(n + 1) * 4);
        for (int32_t op = 0; op < TD_EW_OPS_COUNT; op++) {
            td_ew_params p = {.op = op, .alpha = -0.75f};
            memcpy(p.dims, L->dims, sizeof p.dims);
            memcpy(p.a_strides, L->a_strides, sizeof p.a_strides);
            memcpy(p.b_strides, L->b_strides, sizeof p.b_strides);
            for (int64_t i = 0; i <= n; i++)
                got[i] = 12345.0f; /* got[n] must survive */
            td_reference_elementwise(got, a, b, &p);
            if (uses_tanh(op))
                one_by_one_elementwise(want, a, b, &p);
            else
                plain_elementwise(want, a, b, &p);
            char what[200];
            snprintf(what, sizeof what, "op %s on %s", td_ew_name(op), L->what);
            expect_same(got, want, n, what);
            cr_assert_eq(got[n], 12345.0f, "%s: wrote past the output", what);
        }
        free(a);
        free(b);
        free(got);
        free(want);
    }
}

/* In place (out = a, dense): each element is read before it is written,
 * as in the contract's loop. */
Test(fast_paths, elementwise_in_place_folded)
{
    enum { N = 2 * 28 * 28 * 32 };
    float *x = inputs(7, N, 3), *want = malloc(N * sizeof *want), *bias = inputs(8, 32, 2);
    td_ew_params p = {.op = TD_EW_ADD, .dims = {2, 28, 28, 32}, .a_strides = {25088, 896, 32, 1},
                      .b_strides = {0, 0, 0, 1}};
    plain_elementwise(want, x, bias, &p);
    td_reference_elementwise(x, x, bias, &p);
    expect_same(x, want, N, "bias add in place");
    free(x);
    free(want);
    free(bias);
}

/* ---- REDUCE ---- */

static void plain_reduce(float *out, const float *a, const td_reduce_params *p)
{
    const int64_t *od = p->out_dims, *os = p->out_strides, *rd = p->red_dims, *rs = p->red_strides;
    int64_t o = 0;
    for (int64_t o0 = 0; o0 < od[0]; o0++)
        for (int64_t o1 = 0; o1 < od[1]; o1++)
            for (int64_t o2 = 0; o2 < od[2]; o2++)
                for (int64_t o3 = 0; o3 < od[3]; o3++, o++) {
                    float sum = 0.0f;
                    for (int64_t r0 = 0; r0 < rd[0]; r0++)
                        for (int64_t r1 = 0; r1 < rd[1]; r1++)
                            for (int64_t r2 = 0; r2 < rd[2]; r2++)
                                for (int64_t r3 = 0; r3 < rd[3]; r3++)
                                    sum += a[o0 * os[0] + o1 * os[1] + o2 * os[2] + o3 * os[3] + r0 * rs[0] +
                                             r1 * rs[1] + r2 * rs[2] + r3 * rs[3]];
                    out[o] = p->alpha * sum;
                }
}

typedef struct reduce_case {
    const char *what;
    int64_t outputs, row_stride; /* outputs per row, floats between rows */
    int64_t red_dims[TD_KERNEL_RANK], red_strides[TD_KERNEL_RANK]; /* in rows; scaled by row_stride */
} reduce_case;

/* Sums of rows into a vector (bias gradients, batch statistics): every
 * block width and the rows reached through folded and unfoldable axes. */
static const reduce_case reduce_cases[] = {
    {"seed conv1 bias gradient: [2,28,28] rows of 32", 32, 32, {1, 2, 28, 28}, {0, 784, 28, 1}},
    {"seed conv2 bias gradient: [2,14,14] rows of 64", 64, 64, {1, 2, 14, 14}, {0, 196, 14, 1}},
    {"a split part: 16 outputs of rows of 32", 16, 32, {1, 3, 28, 28}, {0, 784, 28, 1}},
    {"MLP bias gradient: 512 outputs, 9 rows", 512, 512, {1, 1, 1, 9}, {0, 0, 0, 1}},
    {"every block: 64 + 32 + 16 + 8 + 7 outputs", 127, 130, {1, 1, 5, 7}, {0, 0, 7, 1}},
    {"3 outputs only", 3, 3, {1, 1, 1, 50}, {0, 0, 0, 1}},
    {"rows not folded: a gap between row groups", 40, 40, {1, 1, 3, 5}, {0, 0, 9, 1}},
    {"rows in reversed axis order (a transposed walk)", 24, 24, {1, 1, 6, 4}, {0, 0, 1, 6}},
    {"extent-1 axes with stray strides", 17, 17, {1, 1, 1, 11}, {99, -5, 3, 1}},
};

Test(fast_paths, reduce_rows_match_the_plain_loop)
{
    for (size_t k = 0; k < sizeof reduce_cases / sizeof reduce_cases[0]; k++) {
        const reduce_case *R = &reduce_cases[k];
        td_reduce_params p = {.alpha = k % 2 ? 1.0f : 0.125f,
                              .out_dims = {1, 1, 1, R->outputs},
                              .out_strides = {0, 0, 0, 1}};
        int64_t rows_reached = 1;
        for (int d = 0; d < TD_KERNEL_RANK; d++) {
            p.red_dims[d] = R->red_dims[d];
            p.red_strides[d] = R->red_strides[d] * R->row_stride;
            if (R->red_dims[d] > 1)
                rows_reached += (R->red_dims[d] - 1) * R->red_strides[d];
        }
        const int64_t na = rows_reached * R->row_stride;
        float *a = inputs(300 + k, na, 2);
        float *got = malloc((size_t)(R->outputs + 1) * 4), *want = malloc((size_t)R->outputs * 4);
        got[R->outputs] = 12345.0f;
        td_reference_reduce(got, a, &p);
        plain_reduce(want, a, &p);
        expect_same(got, want, R->outputs, R->what);
        cr_assert_eq(got[R->outputs], 12345.0f, "%s: wrote past the output", R->what);
        /* The specials make most sums NaN or infinite: the finite inputs
         * alone, too, so that rounding order is what is compared. */
        for (int64_t i = 0; i < na; i++)
            if (!isfinite(a[i]))
                a[i] = 0.5f + (float)(i % 7) * 0.3f;
        td_reference_reduce(got, a, &p);
        plain_reduce(want, a, &p);
        expect_same(got, want, R->outputs, R->what);
        free(a);
        free(got);
        free(want);
    }
}
