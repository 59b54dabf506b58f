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

/* One function per op over a block of rows of the innermost axis, so the
 * op is chosen once per call rather than per row or element, and the
 * common dense and broadcast rows are plain loops the compiler vectorises.
 * Each element is still exactly (expr) of its two operands, and elements
 * are produced in the same row-major order: the results are the same bits
 * whichever path or copy runs.
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
/* `rows` rows of n elements: row r of out starts at out + r * n, of a at
 * a + r * ra, of b at b + r * rb; inside a row a and b step by sa and sb. */
#define TD_EW_ROW_FN(id, NAME, arity, exact, expr)                                                               \
    TD_EW_ROW_COPIES(NAME)                                                                                        \
    static void ew_rows_##NAME(float *out, const float *a, int64_t ra, int64_t sa, const float *b, int64_t rb,    \
                               int64_t sb, int64_t rows, int64_t n, float alpha)                                  \
    {                                                                                                             \
        (void)alpha;                                                                                              \
        if (sa == 1 && (arity == 1 || sb == 1)) {                                                                 \
            for (int64_t r = 0, ia = 0, ib = 0; r < rows; r++, out += n, ia += ra, ib += rb)                      \
                for (int64_t i = 0; i < n; i++) {                                                                 \
                    float x = a[ia + i], y = arity == 2 ? b[ib + i] : 0.0f;                                       \
                    (void)x;                                                                                      \
                    (void)y;                                                                                      \
                    out[i] = (expr);                                                                              \
                }                                                                                                 \
        } else if (sa == 1 && sb == 0) {                                                                          \
            for (int64_t r = 0, ia = 0, ib = 0; r < rows; r++, out += n, ia += ra, ib += rb) {                    \
                const float y = b[ib];                                                                            \
                for (int64_t i = 0; i < n; i++) {                                                                 \
                    float x = a[ia + i];                                                                          \
                    (void)x;                                                                                      \
                    (void)y;                                                                                      \
                    out[i] = (expr);                                                                              \
                }                                                                                                 \
            }                                                                                                     \
        } else {                                                                                                  \
            for (int64_t r = 0, ia = 0, ib = 0; r < rows; r++, out += n, ia += ra, ib += rb)                      \
                for (int64_t i = 0; i < n; i++) {                                                                 \
                    float x = a[ia + i * sa], y = arity == 2 ? b[ib + i * sb] : 0.0f;                             \
                    (void)x;                                                                                      \
                    (void)y;                                                                                      \
                    out[i] = (expr);                                                                              \
                }                                                                                                 \
        }                                                                                                         \
    }
TD_EW_OPS(TD_EW_ROW_FN)
#undef TD_EW_ROW_FN

typedef void (*ew_rows_fn)(float *out, const float *a, int64_t ra, int64_t sa, const float *b, int64_t rb, int64_t sb,
                           int64_t rows, int64_t n, float alpha);

static ew_rows_fn ew_rows_of(int32_t op)
{
    switch (op) {
#define TD_EW_ROW_CASE(id, NAME, arity, exact, expr) \
    case id: return ew_rows_##NAME;
        TD_EW_OPS(TD_EW_ROW_CASE)
#undef TD_EW_ROW_CASE
    default: return NULL;
    }
}

/* The call's axes with the ones of extent 1 dropped and each axis folded
 * into the next inner one wherever both operands step over it as over one
 * longer axis (a stride equal to the inner axis's stride times its
 * extent): the same elements in the same row-major order, but in longer
 * rows. The seed models' calls are [b, h, w, 1] images (rows of one
 * element, a call per pixel before) and dense or bias-broadcast
 * activations [b, h, w, c] (rows of c); folded, they are one long row or
 * b*h*w rows of c in one call. Right-aligned, padded with extent 1. */
typedef struct ew_shape {
    int64_t dims[TD_KERNEL_RANK], sa[TD_KERNEL_RANK], sb[TD_KERNEL_RANK];
} ew_shape;

static ew_shape ew_folded(const td_ew_params *p, int binary)
{
    ew_shape f;
    int k = TD_KERNEL_RANK; /* f's axes [k, RANK) are filled, innermost last */
    for (int d = TD_KERNEL_RANK - 1; d >= 0; d--) {
        const int64_t n = p->dims[d], sa = p->a_strides[d], sb = binary ? p->b_strides[d] : 0;
        if (n == 1)
            continue;
        const int inner = k < TD_KERNEL_RANK;
        if (inner && sa == f.sa[k] * f.dims[k] && sb == f.sb[k] * f.dims[k]) {
            f.dims[k] *= n;
            continue;
        }
        k--;
        f.dims[k] = n;
        f.sa[k] = sa;
        f.sb[k] = sb;
    }
    if (k == TD_KERNEL_RANK) { /* every extent 1: one element */
        k--;
        f.dims[k] = 1;
        f.sa[k] = f.sb[k] = 0;
    }
    for (int d = 0; d < k; d++) {
        f.dims[d] = 1;
        f.sa[d] = f.sb[d] = 0;
    }
    return f;
}

void td_reference_elementwise(float *out, const float *a, const float *b, const td_ew_params *p)
{
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        if (p->dims[k] <= 0)
            return;
    ew_rows_fn rows = ew_rows_of(p->op);
    int binary = td_ew_arity(p->op) == 2;
    const ew_shape f = ew_folded(p, binary);
    const int64_t *d = f.dims, *sa = f.sa, *sb = f.sb;
    const int64_t n = d[3], row_block = d[2] * n;
    if (!rows) { /* an unknown op: NaN, as the contract's other backends give */
        for (int64_t e = 0, all = d[0] * d[1] * row_block; e < all; e++)
            out[e] = NAN;
        return;
    }
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < d[0]; i0++)
        for (int64_t i1 = 0; i1 < d[1]; i1++, o += row_block) {
            int64_t ia = i0 * sa[0] + i1 * sa[1];
            int64_t ib = i0 * sb[0] + i1 * sb[1];
            rows(out + o, a + ia, sa[2], sa[3], binary ? b + ib : NULL, sb[2], sb[3], d[2], n, p->alpha);
        }
}

/* Sums over leading axes that keep a contiguous last axis (batch
 * statistics, bias gradients) walk `a` row by row, adding each row into a
 * block of accumulators the compiler keeps in vector registers (a lane per
 * output, never a sum across lanes); every output still adds its terms one
 * at a time in the contract's order, from 0.0f, so the bits are those of
 * the plain loop, which strides through memory once per output instead.
 * The reduced axes come folded (reduce_folded): a bias gradient's [b, h, w]
 * rows are one axis of b*h*w rows. Blocks of 64, 32, 16 and 8 outputs have
 * their own fixed-width copies (a fixed width is what lets the compiler
 * hold the block in registers); the last few outputs take a plain loop. */
typedef struct reduce_axes {
    int64_t dims[TD_KERNEL_RANK], strides[TD_KERNEL_RANK];
} reduce_axes;

#define TD_REDUCE_BLOCK_FN(W)                                                                                    \
    TD_FIXED_MATH_CLONES                                                                                          \
    static void reduce_block_##W(float *out, const float *a, const reduce_axes *r)                               \
    {                                                                                                             \
        float acc[W];                                                                                             \
        for (int q = 0; q < W; q++)                                                                               \
            acc[q] = 0.0f;                                                                                        \
        const int64_t *rd = r->dims, *rs = r->strides;                                                            \
        for (int64_t r0 = 0; r0 < rd[0]; r0++)                                                                    \
            for (int64_t r1 = 0; r1 < rd[1]; r1++)                                                                \
                for (int64_t r2 = 0; r2 < rd[2]; r2++) {                                                          \
                    const float *row = a + r0 * rs[0] + r1 * rs[1] + r2 * rs[2];                                  \
                    for (int64_t r3 = 0; r3 < rd[3]; r3++, row += rs[3])                                          \
                        for (int q = 0; q < W; q++)                                                               \
                            acc[q] += row[q];                                                                     \
                }                                                                                                 \
        for (int q = 0; q < W; q++)                                                                               \
            out[q] = acc[q];                                                                                      \
    }
TD_REDUCE_BLOCK_FN(64)
TD_REDUCE_BLOCK_FN(32)
TD_REDUCE_BLOCK_FN(16)
TD_REDUCE_BLOCK_FN(8)
#undef TD_REDUCE_BLOCK_FN

/* The last n < 8 outputs, summed in out itself. */
static void reduce_block_few(float *out, const float *a, int64_t n, const reduce_axes *r)
{
    const int64_t *rd = r->dims, *rs = r->strides;
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
}

/* The reduced axes without those of extent 1, each folded into the next
 * inner one where its stride is that axis's stride times its extent (the
 * same terms in the same order), right-aligned and padded with extent 1. */
static reduce_axes reduce_folded(const td_reduce_params *p)
{
    reduce_axes f;
    int k = TD_KERNEL_RANK;
    for (int d = TD_KERNEL_RANK - 1; d >= 0; d--) {
        const int64_t n = p->red_dims[d], s = p->red_strides[d];
        if (n == 1)
            continue;
        if (k < TD_KERNEL_RANK && s == f.strides[k] * f.dims[k]) {
            f.dims[k] *= n;
            continue;
        }
        k--;
        f.dims[k] = n;
        f.strides[k] = s;
    }
    for (int d = 0; d < k; d++) {
        f.dims[d] = 1;
        f.strides[d] = 0;
    }
    return f;
}

static void reduce_rows(float *out, const float *a, const td_reduce_params *p)
{
    const reduce_axes r = reduce_folded(p);
    const int64_t n = p->out_dims[3];
    int64_t o = 0;
    for (; n - o >= 64; o += 64)
        reduce_block_64(out + o, a + o, &r);
    if (n - o >= 32) {
        reduce_block_32(out + o, a + o, &r);
        o += 32;
    }
    if (n - o >= 16) {
        reduce_block_16(out + o, a + o, &r);
        o += 16;
    }
    if (n - o >= 8) {
        reduce_block_8(out + o, a + o, &r);
        o += 8;
    }
    if (o < n)
        reduce_block_few(out + o, a + o, n - o, &r);
    for (o = 0; o < n; o++)
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
