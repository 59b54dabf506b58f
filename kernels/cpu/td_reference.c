/* Serial reference kernels. Compiled with -ffp-contract=off (see meson.build)
 * so a*b+c is two roundings, the same as the GPU kernels are told to do. */
#include "td_reference.h"

#include "td_fixed_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void td_reference_fill(float *out, int64_t n, float value)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = value;
}

void td_reference_copy(float *out, const float *a, int64_t n)
{
    if (n > 0 && out != a)
        memmove(out, a, (size_t)n * sizeof(float));
}

/* tanh in float arithmetic the compiler can vectorise (glibc's tanhf is a
 * call per element: GELU(tanh) and its gradient took 46% of a character
 * GPT's kernel time on one core). An odd Taylor polynomial below |x| 0.3
 * (the first omitted term is below 6e-10 relative); above, 1 - 2/(e^2|x| +
 * 1) with e^y = 2^k e^r, |r| <= ln2/2, e^r by its degree-7 Taylor polynomial
 * (truncation below 6e-9): within about 2e-7 relative of the true tanh
 * everywhere, well inside the ulp-level bounds every backend is held to.
 * Branch-free (selects), NaN in gives NaN out, +-0 gives +-0, +-inf gives
 * +-1. Measured over [-20, 20]: at most 2.3e-7 relative from tanh in
 * double. */
static inline float td_reference_tanh(float x)
{
    const float ax = fabsf(x), x2 = x * x;
    const float small =
        x + x * x2 *
                (-0.333333333f +
                 x2 * (0.133333333f + x2 * (-0.0539682540f + x2 * (0.0218694885f + x2 * -0.00886323552f))));
    const float y = 2.0f * ax < 40.0f ? 2.0f * ax : 40.0f; /* tanh(20) is 1 in float */
    const int k = (int)(y * 1.44269504f + 0.5f);
    const float kf = (float)k;
    const float r = (y - kf * 0.693145752f) - kf * 1.42860677e-6f; /* ln 2 in two parts */
    const float p =
        1.0f + r * (1.0f + r * (0.5f + r * (0.166666667f + r * (0.0416666667f + r * (0.00833333333f +
                                                                                         r * (0.00138888889f +
                                                                                              r * 0.000198412698f))))));
    const int32_t bits = (k + 127) << 23; /* 2^k, k in [0, 58] */
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    const float large = copysignf(1.0f - 2.0f / (p * two_k + 1.0f), x);
    const float t = ax < 0.3f ? small : large;
    return (x != x || ax == 0.0f) ? x : t; /* NaN, and the sign of a zero, kept */
}

/* The elementwise list (td_ew_ops.h) in tandem's own fixed-arithmetic
 * functions (td_fixed_math.h: the same bits on every machine) and C's
 * sqrtf (correctly rounded by IEEE-754, so the same everywhere too). */
#define TD_EXP td_fixed_expf
#define TD_LOG td_fixed_logf
#define TD_SQRT sqrtf
#define TD_TANH td_reference_tanh
#define TD_ERF td_fixed_erff
#define TD_ISNAN isnan

/* One function per op over one row of the innermost axis, so the op is
 * chosen once per row rather than per element, and the common dense and
 * broadcast-scalar rows are plain loops the compiler vectorises. Each
 * element is still exactly (expr) of its two operands: the results are the
 * same bits whichever path or copy runs.
 *
 * Copies: each row function also comes in AVX2 and AVX-512 copies
 * (TD_FIXED_MATH_CLONES), which doubles the speed of the exp and log ops
 * over the baseline build's two double lanes -- except the ops built on
 * td_reference_tanh, whose selects GCC 12 leaves as branches inside a
 * target copy (measured: 2.4x slower than the baseline's vector loop), so
 * they keep the one baseline function. TD_EW_ROW_COPIES(NAME) is the
 * attribute, or nothing for the NAMEs marked TD_EW_ONE_COPY_##NAME (the
 * usual "probe" idiom: a marked name expands to two arguments, shifting
 * the empty one into place). */
#define TD_EW_PROBE ~,
#define TD_EW_ONE_COPY_TANH TD_EW_PROBE
#define TD_EW_ONE_COPY_GELU_TANH TD_EW_PROBE
#define TD_EW_ONE_COPY_GELU_TANH_GRAD TD_EW_PROBE
#define TD_EW_SECOND(a, b, ...) b
#define TD_EW_PICK(...) TD_EW_SECOND(__VA_ARGS__, TD_FIXED_MATH_CLONES, )
#define TD_EW_ROW_COPIES(NAME) TD_EW_PICK(TD_EW_ONE_COPY_##NAME)
#define TD_EW_ROW_FN(id, NAME, arity, exact, expr)                                                               \
    TD_EW_ROW_COPIES(NAME)                                                                                        \
    static void ew_row_##NAME(float *out, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n,      \
                              float alpha)                                                                        \
    {                                                                                                             \
        (void)alpha;                                                                                              \
        if (sa == 1 && (arity == 1 || sb == 1)) {                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                float x = a[i], y = arity == 2 ? b[i] : 0.0f;                                                     \
                (void)x;                                                                                          \
                (void)y;                                                                                          \
                out[i] = (expr);                                                                                  \
            }                                                                                                     \
        } else if (sa == 1 && sb == 0) {                                                                          \
            const float y = b[0];                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                float x = a[i];                                                                                   \
                (void)x;                                                                                          \
                (void)y;                                                                                          \
                out[i] = (expr);                                                                                  \
            }                                                                                                     \
        } else {                                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                float x = a[i * sa], y = arity == 2 ? b[i * sb] : 0.0f;                                           \
                (void)x;                                                                                          \
                (void)y;                                                                                          \
                out[i] = (expr);                                                                                  \
            }                                                                                                     \
        }                                                                                                         \
    }
TD_EW_OPS(TD_EW_ROW_FN)
#undef TD_EW_ROW_FN

typedef void (*ew_row_fn)(float *out, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n, float alpha);

static ew_row_fn ew_row_of(int32_t op)
{
    switch (op) {
#define TD_EW_ROW_CASE(id, NAME, arity, exact, expr) \
    case id: return ew_row_##NAME;
        TD_EW_OPS(TD_EW_ROW_CASE)
#undef TD_EW_ROW_CASE
    default: return NULL;
    }
}

void td_reference_elementwise(float *out, const float *a, const float *b, const td_ew_params *p)
{
    const int64_t *d = p->dims;
    const int64_t *sa = p->a_strides, *sb = p->b_strides;
    ew_row_fn row = ew_row_of(p->op);
    int binary = td_ew_arity(p->op) == 2;
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < d[0]; i0++)
        for (int64_t i1 = 0; i1 < d[1]; i1++)
            for (int64_t i2 = 0; i2 < d[2]; i2++, o += d[3]) {
                int64_t ia = i0 * sa[0] + i1 * sa[1] + i2 * sa[2];
                int64_t ib = i0 * sb[0] + i1 * sb[1] + i2 * sb[2];
                if (!row) { /* an unknown op: NaN, as the contract's other backends give */
                    for (int64_t i3 = 0; i3 < d[3]; i3++)
                        out[o + i3] = NAN;
                    continue;
                }
                row(out + o, a + ia, sa[3], binary ? b + ib : NULL, sb[3], d[3], p->alpha);
            }
}

/* Sums over leading axes that keep a contiguous last axis (batch
 * statistics, bias gradients) walk `a` once, row by row, adding each row
 * into the outputs; every output still adds its terms one at a time in the
 * contract's order, from 0.0f, so the bits are those of the plain loop,
 * which strides through memory once per output instead. */
static void reduce_rows(float *out, const float *a, const td_reduce_params *p)
{
    const int64_t *rd = p->red_dims, *rs = p->red_strides;
    const int64_t n = p->out_dims[3];
    for (int64_t o = 0; o < n; o++)
        out[o] = 0.0f;
    for (int64_t r0 = 0; r0 < rd[0]; r0++)
        for (int64_t r1 = 0; r1 < rd[1]; r1++)
            for (int64_t r2 = 0; r2 < rd[2]; r2++)
                for (int64_t r3 = 0; r3 < rd[3]; r3++) {
                    const float *row = a + r0 * rs[0] + r1 * rs[1] + r2 * rs[2] + r3 * rs[3];
                    for (int64_t o = 0; o < n; o++)
                        out[o] += row[o];
                }
    for (int64_t o = 0; o < n; o++)
        out[o] = p->alpha * out[o];
}

void td_reference_reduce(float *out, const float *a, const td_reduce_params *p)
{
    const int64_t *od = p->out_dims, *os = p->out_strides;
    const int64_t *rd = p->red_dims, *rs = p->red_strides;
    /* The row walk writes out before it has read all of a: only when they
     * do not overlap. */
    int64_t extent = od[3];
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        extent += (rd[k] - 1) * rs[k];
    if (od[0] == 1 && od[1] == 1 && od[2] == 1 && od[3] > 1 && os[3] == 1 && rd[0] * rd[1] * rd[2] * rd[3] > 1 &&
        (out + od[3] <= a || out >= a + extent)) {
        reduce_rows(out, a, p);
        return;
    }
    int64_t o = 0;
    for (int64_t o0 = 0; o0 < od[0]; o0++)
        for (int64_t o1 = 0; o1 < od[1]; o1++)
            for (int64_t o2 = 0; o2 < od[2]; o2++)
                for (int64_t o3 = 0; o3 < od[3]; o3++, o++) {
                    const float *base = a + o0 * os[0] + o1 * os[1] + o2 * os[2] + o3 * os[3];
                    float sum = 0.0f;
                    for (int64_t r0 = 0; r0 < rd[0]; r0++)
                        for (int64_t r1 = 0; r1 < rd[1]; r1++)
                            for (int64_t r2 = 0; r2 < rd[2]; r2++)
                                for (int64_t r3 = 0; r3 < rd[3]; r3++)
                                    sum += base[r0 * rs[0] + r1 * rs[1] + r2 * rs[2] + r3 * rs[3]];
                    out[o] = p->alpha * sum;
                }
}

void td_reference_gemm(float *c, const float *a, const float *b, const td_gemm_params *p)
{
    const bool bf16 = p->precision == TD_GEMM_BF16;
    for (int64_t m = 0; m < p->m; m++)
        for (int64_t n = 0; n < p->n; n++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p->k; k++) {
                float x = p->trans_a ? a[k * p->lda + m] : a[m * p->lda + k];
                float y = p->trans_b ? b[n * p->ldb + k] : b[k * p->ldb + n];
                if (bf16) {
                    x = td_bf16_round(x);
                    y = td_bf16_round(y);
                }
                acc += x * y;
            }
            float *dst = &c[m * p->ldc + n];
            *dst = p->beta == 0.0f ? p->alpha * acc : p->alpha * acc + p->beta * *dst;
        }
}

void td_reference_xent_forward(float *loss, float *prob, const float *logits, const int32_t *labels,
                               const td_xent_params *p)
{
    for (int64_t r = 0; r < p->rows; r++) {
        const float *row = logits + r * p->cols;
        float *prow = prob + r * p->cols;
        float max = -INFINITY;
        for (int64_t c = 0; c < p->cols; c++)
            max = row[c] > max ? row[c] : max;
        float sum = 0.0f;
        td_fixed_exp_shifted(prow, row, max, p->cols);
        for (int64_t c = 0; c < p->cols; c++)
            sum += prow[c];
        float inv = 1.0f / sum;
        for (int64_t c = 0; c < p->cols; c++)
            prow[c] *= inv;
        int32_t label = labels[r];
        loss[r] = (label < 0 || label >= p->cols) ? NAN : td_fixed_logf(sum) - (row[label] - max);
    }
}

void td_reference_xent_backward(float *grad, const float *prob, const int32_t *labels,
                                const float *upstream, const td_xent_params *p)
{
    for (int64_t r = 0; r < p->rows; r++) {
        float g = upstream[r];
        for (int64_t c = 0; c < p->cols; c++) {
            float onehot = c == labels[r] ? 1.0f : 0.0f;
            grad[r * p->cols + c] = g * (prob[r * p->cols + c] - onehot);
        }
    }
}
