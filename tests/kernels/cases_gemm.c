/* GEMM: awkward shapes, every transpose, beta 0 (C holds NaN, which must
 * not reach the result) and 1, padded leading dimensions whose padding
 * must keep its bits. Sums may run in any order: normalised MSE. The bf16
 * rows (precision TD_GEMM_BF16) are held to the same bound: the reference
 * rounds the inputs too, and a product of bfloat16 values is exact, so
 * only the order of the sums may differ; a backend that did not round
 * would be about 1e-5 away. */
#include "td_conformance.h"

#include <math.h>

#include "td_call_extents.h"
#include "td_case_inputs.h"

typedef enum gemm_layout {
    ONE_BUFFER,    /* A at 5, then B, then C, in one buffer */
    THREE_BUFFERS, /* A at 0, B at 3, C at 1, each in its own buffer */
} gemm_layout;

enum { ALL_TRANSPOSES = 0xf, NN = 1 << 0 };

typedef struct gemm_row {
    int64_t m, n, k;
    gemm_layout layout;
    int64_t pad_a, pad_b, pad_c; /* leading dimensions past a row's length */
    float alpha;
    uint32_t transposes; /* bit 2 * trans_a + trans_b */
    int32_t precision;   /* td_gemm_precision */
} gemm_row;

#define ONE(m, n, k) {m, n, k, ONE_BUFFER, 1, 2, 3, 1.25f, ALL_TRANSPOSES, TD_GEMM_FP32}

static const gemm_row rows[] = {
    ONE(1, 1, 1), ONE(7, 1, 33), ONE(1, 130, 7), ONE(33, 7, 130), ONE(130, 33, 1), ONE(33, 130, 7),
    ONE(64, 64, 64), ONE(7, 33, 130), ONE(130, 7, 33),
    ONE(5, 6, 0), /* k = 0: C = beta C */
    ONE(0, 7, 5), ONE(4, 0, 3), /* nothing to compute */
    {520, 260, 300, ONE_BUFFER, 1, 2, 3, 1.25f, NN, TD_GEMM_FP32}, /* big enough for a library's tiled path */
    {10, 12, 9, THREE_BUFFERS, 0, 0, 0, 1.0f, ALL_TRANSPOSES, TD_GEMM_FP32},
    /* a language model's head: 256 positions x a 40000-token table, b^T */
    {256, 40000, 64, THREE_BUFFERS, 0, 0, 0, 1.0f, 1u << 1, TD_GEMM_FP32},
    /* bf16: edges of every tile size, odd k (a half pair), k past a
     * k-block, a 3x3 convolution's k = 9 and 288 */
    {1, 1, 1, ONE_BUFFER, 1, 2, 3, 1.25f, ALL_TRANSPOSES, TD_GEMM_BF16},
    {33, 130, 7, ONE_BUFFER, 1, 2, 3, 1.25f, ALL_TRANSPOSES, TD_GEMM_BF16},
    {130, 33, 401, THREE_BUFFERS, 3, 3, 1, 0.75f, ALL_TRANSPOSES, TD_GEMM_BF16},
    {5, 6, 0, ONE_BUFFER, 1, 2, 3, 1.25f, NN, TD_GEMM_BF16},
    {520, 64, 9, THREE_BUFFERS, 0, 0, 0, 1.0f, NN, TD_GEMM_BF16},
    {400, 64, 288, THREE_BUFFERS, 0, 0, 0, 1.0f, NN | 1u << 1 | 1u << 2, TD_GEMM_BF16},
    /* its backward: the gradient into the hidden states sums over the
     * vocabulary (k = 50257), the table's over the positions (a^T) */
    {64, 128, 50257, THREE_BUFFERS, 0, 0, 0, 1.0f, NN, TD_GEMM_FP32},
    {50257, 64, 256, THREE_BUFFERS, 0, 0, 0, 1.0f, 1u << 2, TD_GEMM_FP32},
};

/* Every m, n, k from this list, each transpose, in three buffers. */
static const int64_t grid_sizes[] = {1, 7, 33, 130};

static void nan_in_c(const td_conformance_case *c, float *const *buffers)
{
    if (c->calls[0].p.gemm.beta != 0.0f)
        return;
    td_arg_extent ext[TD_ROW_SLOTS];
    td_call_extents(&c->calls[0], ext);
    float *cm = td_case_arg(c, buffers, 0, TD_ROW_OUT);
    for (int64_t i = 0; i < ext[TD_ROW_OUT].end; i += 2)
        cm[i] = NAN;
}

static void add_case(td_case_list *list, const gemm_row *row, int transpose, int beta)
{
    td_gemm_params p = {.trans_a = transpose >> 1, .trans_b = transpose & 1, .m = row->m, .n = row->n, .k = row->k,
                        .alpha = row->alpha, .beta = (float)beta, .precision = row->precision};
    p.lda = (p.trans_a ? p.m : p.k) + row->pad_a;
    p.ldb = (p.trans_b ? p.k : p.n) + row->pad_b;
    p.ldc = p.n + row->pad_c;
    /* A row-major matrix needs a leading dimension of at least 1. */
    if (p.lda == 0)
        p.lda = 1;
    if (p.ldb == 0)
        p.ldb = 1;
    if (p.ldc == 0)
        p.ldc = 1;
    td_case_args at = {.a = {0, 0}, .b = {1, 3}, .out = {2, 1}};
    if (row->layout == ONE_BUFFER) {
        uint64_t a_size = (uint64_t)((p.trans_a ? p.k : p.m) * p.lda);
        uint64_t b_size = (uint64_t)((p.trans_b ? p.n : p.k) * p.ldb);
        at = (td_case_args){.a = {0, 5}, .b = {0, 5 + a_size}, .out = {0, 5 + a_size + b_size}};
    }
    td_conformance_case *c =
        td_case_add(list, "gemm%s %lldx%lldx%lld %c%c beta %d, alpha %g, pads %lld/%lld/%lld, %s",
                    p.precision == TD_GEMM_BF16 ? " bf16" : "", (long long)p.m,
                    (long long)p.n, (long long)p.k, p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N', beta,
                    (double)row->alpha, (long long)row->pad_a, (long long)row->pad_b, (long long)row->pad_c,
                    row->layout == ONE_BUFFER ? "one buffer" : "three buffers");
    td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_GEMM, .p.gemm = p}, at, TD_COMPARE_NMSE);
    c->inputs = nan_in_c;
}

static void add_transposes_and_betas(td_case_list *list, const gemm_row *row)
{
    for (int t = 0; t < 4; t++)
        for (int beta = 0; beta < 2; beta++)
            if (row->transposes & (1u << t))
                add_case(list, row, t, beta);
}

/* A convolution's forward as the lowering emits it, in one segment: GEMM
 * (patches x kernel), bias add along the channels and ReLU in place, then a
 * 2x2 / 2 max pool of the activations (2 images of 20 x 30 pixels, 24
 * channels). The CPU backend runs the three after the GEMM on blocks of
 * C's rows as it computes them (backends/cpu/cpu_epilogue.c; with a pool,
 * parts of 960 rows on the split device); every backend must give what
 * the four calls give one after the other. Sums upstream of every output:
 * normalised MSE. */
static void add_epilogue_case(td_case_list *list)
{
    enum { IMAGES = 2, H = 20, W = 30, C = 24, K = 7, M = IMAGES * H * W };
    td_kernel_call gemm = {.kernel = TD_KERNEL_GEMM};
    gemm.p.gemm = (td_gemm_params){.m = M, .n = C, .k = K, .lda = K, .ldb = C, .ldc = C, .alpha = 1.0f};
    td_kernel_call bias = {.kernel = TD_KERNEL_ELEMENTWISE};
    bias.p.ew = (td_ew_params){.op = TD_EW_ADD, .dims = {1, 1, M, C}, .a_strides = {0, 0, C, 1},
                               .b_strides = {0, 0, 0, 1}};
    td_kernel_call relu = {.kernel = TD_KERNEL_ELEMENTWISE};
    relu.p.ew = (td_ew_params){.op = TD_EW_RELU, .dims = {1, 1, M, C}, .a_strides = {0, 0, C, 1}};
    td_kernel_call pool = {.kernel = TD_KERNEL_POOL};
    pool.p.pool = (td_pool_params){.geo = {.n = IMAGES, .h = H, .w = W, .c = C, .kh = 2, .kw = 2, .oh = H / 2,
                                           .ow = W / 2, .stride_h = 2, .stride_w = 2, .dil_h = 1, .dil_w = 1},
                                   .mode = TD_POOL_MAX};
    const td_case_at x = {0, 0}, w = {1, 0}, act = {2, 1}, b = {3, 0}, pooled = {4, 2};
    td_conformance_case *c = td_case_add(list, "gemm %dx%dx%d, bias add, ReLU and a 2x2 max pool in one segment", M,
                                         C, K);
    td_case_call(c, gemm, (td_case_args){.out = act, .a = x, .b = w}, TD_COMPARE_NMSE);
    td_case_call(c, bias, (td_case_args){.out = act, .a = act, .b = b}, TD_COMPARE_NMSE);
    td_case_call(c, relu, (td_case_args){.out = act, .a = act}, TD_COMPARE_NMSE);
    td_case_call(c, pool, (td_case_args){.out = pooled, .a = act}, TD_COMPARE_NMSE);
}

/* A convolution's forward with its IM2COL in the same segment: the CPU
 * backend writes the patches of each block of whole images right before
 * the GEMM multiplies them (td_cpu_prologue_im2col), then the bias add and
 * ReLU as above (a case holds at most 4 calls: the pool's end of the chain
 * is the case above's, and tests/engine/test_cpu_epilogue.c runs all
 * five). 4 images of 10 x 12 pixels, 3 channels, 3x3 SAME to 16. */
static void add_prologue_case(td_case_list *list)
{
    enum { IMAGES = 4, H = 10, W = 12, C = 3, C_OUT = 16, K = 9 * C, M = IMAGES * H * W };
    td_kernel_call im2col = {.kernel = TD_KERNEL_IM2COL};
    im2col.p.conv = (td_conv_params){.n = IMAGES, .h = H, .w = W, .c = C, .kh = 3, .kw = 3, .oh = H, .ow = W,
                                     .stride_h = 1, .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1,
                                     .dil_w = 1};
    td_kernel_call gemm = {.kernel = TD_KERNEL_GEMM};
    gemm.p.gemm = (td_gemm_params){.m = M, .n = C_OUT, .k = K, .lda = K, .ldb = C_OUT, .ldc = C_OUT, .alpha = 1.0f};
    td_kernel_call bias = {.kernel = TD_KERNEL_ELEMENTWISE};
    bias.p.ew = (td_ew_params){.op = TD_EW_ADD, .dims = {1, 1, M, C_OUT}, .a_strides = {0, 0, C_OUT, 1},
                               .b_strides = {0, 0, 0, 1}};
    td_kernel_call relu = {.kernel = TD_KERNEL_ELEMENTWISE};
    relu.p.ew = (td_ew_params){.op = TD_EW_RELU, .dims = {1, 1, M, C_OUT}, .a_strides = {0, 0, C_OUT, 1}};
    const td_case_at image = {0, 0}, patches = {1, 0}, w = {2, 0}, act = {3, 1}, b = {4, 0};
    td_conformance_case *c = td_case_add(list, "im2col, gemm %dx%dx%d, bias add and ReLU in one segment", M, C_OUT, K);
    td_case_call(c, im2col, (td_case_args){.out = patches, .a = image}, TD_COMPARE_BITWISE);
    td_case_call(c, gemm, (td_case_args){.out = act, .a = patches, .b = w}, TD_COMPARE_NMSE);
    td_case_call(c, bias, (td_case_args){.out = act, .a = act, .b = b}, TD_COMPARE_NMSE);
    td_case_call(c, relu, (td_case_args){.out = act, .a = act}, TD_COMPARE_NMSE);
}

/* A convolution's input gradient in one segment: GEMM (patch gradients)
 * and COL2IM of its output, which the CPU backend runs on blocks of whole
 * images as the GEMM computes them (5 images of 7 x 9 windows, 3x3 SAME
 * over 4 channels: 63 rows an image, blocks of 4 images). */
static void add_col2im_case(td_case_list *list)
{
    enum { IMAGES = 5, H = 7, W = 9, C = 4, K = 8, N = 9 * C, M = IMAGES * H * W };
    td_kernel_call gemm = {.kernel = TD_KERNEL_GEMM};
    gemm.p.gemm = (td_gemm_params){.m = M, .n = N, .k = K, .lda = K, .ldb = N, .ldc = N, .alpha = 1.0f};
    td_kernel_call col2im = {.kernel = TD_KERNEL_COL2IM};
    col2im.p.conv = (td_conv_params){.n = IMAGES, .h = H, .w = W, .c = C, .kh = 3, .kw = 3, .oh = H, .ow = W,
                                     .stride_h = 1, .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1,
                                     .dil_w = 1};
    const td_case_at dy = {0, 0}, w = {1, 0}, grads = {2, 0}, image = {3, 1};
    td_conformance_case *c = td_case_add(list, "gemm %dx%dx%d and col2im of its output in one segment", M, N, K);
    td_case_call(c, gemm, (td_case_args){.out = grads, .a = dy, .b = w}, TD_COMPARE_NMSE);
    td_case_call(c, col2im, (td_case_args){.out = image, .a = grads}, TD_COMPARE_NMSE);
}

void td_cases_gemm(td_case_list *list)
{
    add_epilogue_case(list);
    add_prologue_case(list);
    add_col2im_case(list);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        add_transposes_and_betas(list, &rows[i]);
    enum { SIZES = sizeof grid_sizes / sizeof grid_sizes[0] };
    for (int mi = 0; mi < SIZES; mi++)
        for (int ni = 0; ni < SIZES; ni++)
            for (int ki = 0; ki < SIZES; ki++) {
                gemm_row row = {grid_sizes[mi], grid_sizes[ni], grid_sizes[ki], THREE_BUFFERS, 3, 3, 1, 0.75f,
                                ALL_TRANSPOSES, TD_GEMM_FP32};
                add_transposes_and_betas(list, &row);
            }
}
