/* GEMM epilogues on the CPU backend (backends/cpu/cpu_epilogue.c): a GEMM
 * followed by a bias add and a ReLU in one segment, run block by block,
 * gives bitwise what the three calls give run one segment each, at the
 * seed models' shapes and at row counts that cut the blocks unevenly, on
 * both GEMM engines, with the host pool splitting the GEMM or not, with
 * and without a tiling pool at the chain's end; likewise a pooling's
 * gradient with the activation's gradient after it; and the chain rules
 * take exactly the calls that cannot see a difference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_epilogue.h"
#include "cpu_gemm.h"
#include "engine_test_util.h"
#include "td_backend.h"
#include "td_host_pool.h"

typedef struct shape {
    int64_t m, n, k;
    const char *what;
} shape;

static const shape shapes[] = {
    {2000, 32, 9, "conv1-like: 2000 patches of 9, 32 channels (blocks of 960 and 1040 rows)"},
    {777, 64, 288, "conv2-like: 777 rows of 288, 64 channels (a tail off the 192 grid)"},
    {300, 128, 200, "a dense layer: 300 x 200 x 128 (blocks of 192 rows)"},
    {5, 10, 3, "smaller than one block"},
};

static td_kernel_call gemm_call(td_buffer *x, td_buffer *w, td_buffer *y, const shape *s)
{
    td_kernel_call c = {.kernel = TD_KERNEL_GEMM, .a = {x, 0}, .b = {w, 0}, .out = {y, 0}};
    c.p.gemm = (td_gemm_params){.m = s->m, .n = s->n, .k = s->k, .lda = s->k, .ldb = s->n, .ldc = s->n,
                                .alpha = 1.0f, .beta = 0.0f};
    return c;
}

/* out = a (+) b over [m, n] as the seed's lowering emits it: dims
 * [1, 1, m, n], a dense, b a row (bias) or nothing. */
static td_kernel_call ew_call(int32_t op, td_arg out, td_arg a, td_arg b, int64_t m, int64_t n, bool b_row)
{
    td_kernel_call c = {.kernel = TD_KERNEL_ELEMENTWISE, .out = out, .a = a, .b = b};
    c.p.ew = (td_ew_params){.op = op, .dims = {1, 1, m, n}, .a_strides = {0, 0, n, 1},
                            .b_strides = {0, 0, b_row ? 0 : n, 1}};
    return c;
}

static td_buffer *filled(const td_backend_ops *ops, td_device *dev, td_context *ctx, size_t n, uint64_t seed,
                         bool specials)
{
    float *host = malloc(n * sizeof *host);
    test_rng r = {seed};
    test_fill_uniform(&r, host, n, -1.0f, 1.0f);
    if (specials) /* NaN, infinities and signed zeros through the bias */
        for (size_t i = 0; i + 4 < n; i += 7) {
            host[i] = -0.0f;
            host[i + 1] = NAN;
            host[i + 2] = INFINITY;
            host[i + 3] = 0.0f;
        }
    td_buffer *b = NULL;
    TEST_OK(ctx, ops->buffer_create(dev, n * sizeof(float), &b));
    TEST_OK(ctx, ops->write(dev, b, 0, host, n * sizeof(float)));
    free(host);
    return b;
}

/* A CPU device of a context of `threads` threads, whose host pool splits
 * every call it can when split_everything (set while the pool is held
 * across the open, so that the flag stays with the device's pool). */
static td_device *open_cpu_device(uint32_t threads, bool split_everything, bool deterministic, td_context **ctx)
{
    td_context_options options;
    cr_assert_eq(td_context_options_init(&options), TD_OK);
    options.cpu_threads = threads;
    options.deterministic = deterministic;
    cr_assert_eq(td_context_create(&options, ctx), TD_OK);
    td_host_pool *pool = td_context_host_pool_acquire(*ctx);
    cr_assert_not_null(pool, "%s", td_last_error(*ctx));
    td_host_pool_set_split_everything(pool, split_everything);
    td_device *dev = NULL;
    TEST_OK(*ctx, td_cpu_backend.open(*ctx, 0, 0, &dev));
    td_context_host_pool_release(*ctx);
    return dev;
}

static void run_segment(const td_backend_ops *ops, td_device *dev, td_context *ctx, const td_kernel_call *calls,
                        size_t count)
{
    td_segment *seg = NULL;
    TEST_OK(ctx, ops->segment_create(dev, calls, count, &seg));
    TEST_OK(ctx, ops->segment_run(dev, seg));
    uint64_t ticket = 0;
    TEST_OK(ctx, ops->submit(dev, &ticket));
    TEST_OK(ctx, ops->wait(dev, ticket, 10000));
    ops->segment_destroy(dev, seg);
}

/* From `initial` (n floats of buf) each time: the calls one segment
 * each, read into want, then all of them in one segment, read into got. */
static void run_alone_then_together(td_context *ctx, td_device *dev, td_buffer *buf, const float *initial, size_t n,
                                    const td_kernel_call *calls, size_t count, float *want, float *got)
{
    const td_backend_ops *ops = &td_cpu_backend;
    TEST_OK(ctx, ops->write(dev, buf, 0, initial, n * sizeof(float)));
    for (size_t c = 0; c < count; c++)
        run_segment(ops, dev, ctx, &calls[c], 1);
    TEST_OK(ctx, ops->read(dev, buf, 0, want, n * sizeof(float)));
    TEST_OK(ctx, ops->write(dev, buf, 0, initial, n * sizeof(float)));
    run_segment(ops, dev, ctx, calls, count);
    TEST_OK(ctx, ops->read(dev, buf, 0, got, n * sizeof(float)));
}

static void expect_same_bits(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(memcmp(&got[i], &want[i], 4) == 0, "%s: element %zu is %a, run call by call %a", what, i,
                  (double)got[i], (double)want[i]);
}

/* One configuration: the fused segment against the calls run alone; the
 * ReLU in place on the sum (as the lowering does it) or into a third
 * buffer. */
static void check_fused(uint32_t threads, bool split_everything, bool deterministic)
{
    td_context *ctx = NULL;
    td_device *dev = open_cpu_device(threads, split_everything, deterministic, &ctx);
    const td_backend_ops *ops = &td_cpu_backend;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const shape *s = &shapes[t];
        const size_t mn = (size_t)(s->m * s->n);
        td_buffer *x = filled(ops, dev, ctx, (size_t)(s->m * s->k), 1 + t, false);
        td_buffer *w = filled(ops, dev, ctx, (size_t)(s->k * s->n), 2 + t, false);
        td_buffer *bias = filled(ops, dev, ctx, (size_t)s->n, 3 + t, true);
        td_buffer *y = filled(ops, dev, ctx, 3 * mn, 4 + t, false); /* [gemm | sum | relu] */
        for (int in_place = 0; in_place < 2; in_place++) {
            const td_arg sum = {y, in_place ? 0 : mn}, act = {y, in_place ? 0 : 2 * mn};
            const td_kernel_call calls[3] = {
                gemm_call(x, w, y, s),
                ew_call(TD_EW_ADD, sum, (td_arg){y, 0}, (td_arg){bias, 0}, s->m, s->n, true),
                ew_call(TD_EW_RELU, act, sum, (td_arg){NULL, 0}, s->m, s->n, false),
            };
            cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 2, "%s: the chain is taken", s->what);
            float *want = malloc(3 * mn * sizeof *want), *got = malloc(3 * mn * sizeof *got);
            float *initial = malloc(3 * mn * sizeof *initial);
            for (size_t i = 0; i < 3 * mn; i++)
                initial[i] = (float)(i % 13) - 6.5f; /* both runs start from these */
            run_alone_then_together(ctx, dev, y, initial, 3 * mn, calls, 3, want, got);
            char what[256];
            snprintf(what, sizeof what, "%s, threads %u%s%s%s", s->what, threads, split_everything ? ", split" : "",
                     deterministic ? ", own GEMM" : "", in_place ? ", in place" : "");
            expect_same_bits(got, want, 3 * mn, what);
            free(want);
            free(got);
            free(initial);
        }
        ops->buffer_destroy(dev, x);
        ops->buffer_destroy(dev, w);
        ops->buffer_destroy(dev, bias);
        ops->buffer_destroy(dev, y);
    }
    ops->close(dev);
    td_context_destroy(ctx);
}

/* A convolution's chain to its pooling: [n, h, w, c] pixels = C's rows. */
typedef struct pool_shape {
    int64_t images, h, w, c, k, window;
    int32_t mode;
    const char *what;
} pool_shape;

static const pool_shape pool_shapes[] = {
    {5, 28, 28, 32, 9, 2, TD_POOL_MAX, "conv1-like, 2x2 max: bands of 56 rows, blocks of 1344"},
    {3, 14, 14, 64, 288, 2, TD_POOL_MAX, "conv2-like, 2x2 max: one block"},
    {40, 6, 10, 16, 5, 2, TD_POOL_AVG, "2x2 average over 10-wide rows: granule 960, two parts"},
    {7, 9, 12, 16, 4, 3, TD_POOL_MAX, "3x3 / 3 max: bands of 36 rows, granule 576"},
};

static void check_fused_pool(uint32_t threads, bool split_everything, bool deterministic)
{
    td_context *ctx = NULL;
    td_device *dev = open_cpu_device(threads, split_everything, deterministic, &ctx);
    const td_backend_ops *ops = &td_cpu_backend;
    for (size_t t = 0; t < sizeof pool_shapes / sizeof pool_shapes[0]; t++) {
        const pool_shape *ps = &pool_shapes[t];
        const shape s = {ps->images * ps->h * ps->w, ps->c, ps->k, ps->what};
        const size_t mn = (size_t)(s.m * s.n);
        const int64_t oh = ps->h / ps->window, ow = ps->w / ps->window;
        const size_t pooled = (size_t)(ps->images * oh * ow * ps->c);
        td_buffer *x = filled(ops, dev, ctx, (size_t)(s.m * s.k), 11 + t, false);
        td_buffer *w = filled(ops, dev, ctx, (size_t)(s.k * s.n), 12 + t, false);
        td_buffer *bias = filled(ops, dev, ctx, (size_t)s.n, 13 + t, true);
        const size_t all = mn + pooled;
        td_buffer *y = filled(ops, dev, ctx, all, 14 + t, false); /* [activations | pooled] */
        td_kernel_call pool_call = {.kernel = TD_KERNEL_POOL, .out = {y, mn}, .a = {y, 0}};
        pool_call.p.pool = (td_pool_params){
            .geo = {.n = ps->images, .h = ps->h, .w = ps->w, .c = ps->c, .kh = ps->window, .kw = ps->window,
                    .oh = oh, .ow = ow, .stride_h = ps->window, .stride_w = ps->window, .dil_h = 1, .dil_w = 1},
            .mode = ps->mode};
        const td_kernel_call calls[4] = {
            gemm_call(x, w, y, &s),
            ew_call(TD_EW_ADD, (td_arg){y, 0}, (td_arg){y, 0}, (td_arg){bias, 0}, s.m, s.n, true),
            ew_call(TD_EW_RELU, (td_arg){y, 0}, (td_arg){y, 0}, (td_arg){NULL, 0}, s.m, s.n, false),
            pool_call,
        };
        cr_assert_eq(td_cpu_epilogue_length(calls, 4, 0), 3, "%s: the chain takes the pooling", s.what);
        float *want = malloc(all * sizeof *want), *got = malloc(all * sizeof *got);
        float *initial = malloc(all * sizeof *initial);
        for (size_t i = 0; i < all; i++)
            initial[i] = (float)(i % 11) - 5.5f;
        run_alone_then_together(ctx, dev, y, initial, all, calls, 4, want, got);
        char what[256];
        snprintf(what, sizeof what, "%s, threads %u%s%s", s.what, threads, split_everything ? ", split" : "",
                 deterministic ? ", own GEMM" : "");
        expect_same_bits(got, want, all, what);
        free(want);
        free(got);
        free(initial);
        ops->buffer_destroy(dev, x);
        ops->buffer_destroy(dev, w);
        ops->buffer_destroy(dev, bias);
        ops->buffer_destroy(dev, y);
    }
    ops->close(dev);
    td_context_destroy(ctx);
}

Test(cpu_epilogue, chain_ending_in_a_pool_is_bitwise_the_calls_one_by_one)
{
    check_fused_pool(1, false, false);
    check_fused_pool(2, false, false);
    check_fused_pool(3, true, false);
    check_fused_pool(2, true, true);
}

/* A pooling's gradient and the activation's gradient after it: POOL_BACKWARD
 * into gx, then ReLU's gradient written over the activation x (dead by then,
 * as the lowering does it) and a per-channel add, run in blocks of whole
 * images, against the calls one segment each. */
typedef struct pool_backward_shape {
    int64_t images, h, w, c, window, stride, pad;
    int32_t mode;
    const char *what;
} pool_backward_shape;

static const pool_backward_shape pool_backward_shapes[] = {
    {5, 28, 28, 32, 2, 2, 0, TD_POOL_MAX, "conv1-like, 2x2 / 2 max: an image a block"},
    {7, 14, 14, 64, 2, 2, 0, TD_POOL_MAX, "conv2-like, 2x2 / 2 max: 2 images a block, 3 and a half blocks"},
    {6, 9, 12, 16, 3, 2, 1, TD_POOL_MAX, "3x3 / 2 max, padded: overlapping windows"},
    {4, 10, 10, 8, 3, 1, 1, TD_POOL_AVG, "3x3 / 1 average, padded: every pixel in 9 windows"},
};

static td_kernel_call pool_backward_call(const pool_backward_shape *ps, td_arg gx, td_arg x, td_arg y, td_arg gy)
{
    td_kernel_call c = {.kernel = TD_KERNEL_POOL_BACKWARD, .out = gx, .a = x, .b = y, .c = gy};
    const int64_t oh = (ps->h + 2 * ps->pad - ps->window) / ps->stride + 1;
    const int64_t ow = (ps->w + 2 * ps->pad - ps->window) / ps->stride + 1;
    c.p.pool = (td_pool_params){
        .geo = {.n = ps->images, .h = ps->h, .w = ps->w, .c = ps->c, .kh = ps->window, .kw = ps->window, .oh = oh,
                .ow = ow, .stride_h = ps->stride, .stride_w = ps->stride, .pad_top = ps->pad, .pad_left = ps->pad,
                .dil_h = 1, .dil_w = 1},
        .mode = ps->mode};
    return c;
}

static void check_fused_pool_backward(uint32_t threads, bool split_everything)
{
    td_context *ctx = NULL;
    td_device *dev = open_cpu_device(threads, split_everything, false, &ctx);
    const td_backend_ops *ops = &td_cpu_backend;
    for (size_t t = 0; t < sizeof pool_backward_shapes / sizeof pool_backward_shapes[0]; t++) {
        const pool_backward_shape *ps = &pool_backward_shapes[t];
        /* One buffer: [z | x | gx | y | gy], z the pre-activation. */
        td_kernel_call pb = pool_backward_call(ps, (td_arg){NULL, 0}, (td_arg){NULL, 0}, (td_arg){NULL, 0},
                                               (td_arg){NULL, 0});
        const td_conv_params *g = &pb.p.pool.geo;
        const uint64_t pixels = (uint64_t)(g->n * g->h * g->w), image = pixels * (uint64_t)g->c;
        const uint64_t pooled = (uint64_t)(g->n * g->oh * g->ow * g->c);
        const uint64_t z0 = 0, x0 = image, gx0 = 2 * image, y0 = 3 * image, gy0 = 3 * image + pooled;
        const size_t all = (size_t)(3 * image + 2 * pooled);
        td_buffer *buf = filled(ops, dev, ctx, all, 31 + t, false);
        td_buffer *bias = filled(ops, dev, ctx, (size_t)g->c, 41 + t, true);
        /* x = relu(z), y = pool(x): what the forward left. */
        const td_kernel_call forward[2] = {
            ew_call(TD_EW_RELU, (td_arg){buf, x0}, (td_arg){buf, z0}, (td_arg){NULL, 0}, (int64_t)pixels, g->c,
                    false),
            {.kernel = TD_KERNEL_POOL, .out = {buf, y0}, .a = {buf, x0}, .p.pool = pb.p.pool},
        };
        run_segment(ops, dev, ctx, &forward[0], 1);
        run_segment(ops, dev, ctx, &forward[1], 1);
        pb.out = (td_arg){buf, gx0};
        pb.a = (td_arg){buf, x0};
        pb.b = (td_arg){buf, y0};
        pb.c = (td_arg){buf, gy0};
        const td_kernel_call calls[3] = {
            pb,
            ew_call(TD_EW_RELU_GRAD, (td_arg){buf, x0}, (td_arg){buf, z0}, (td_arg){buf, gx0}, (int64_t)pixels,
                    g->c, false),
            ew_call(TD_EW_ADD, (td_arg){buf, x0}, (td_arg){buf, x0}, (td_arg){bias, 0}, (int64_t)pixels, g->c,
                    true),
        };
        cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 3, 0), 2, "%s: the chain takes both calls",
                     ps->what);
        float *initial = malloc(all * sizeof *initial), *want = malloc(all * sizeof *want),
              *got = malloc(all * sizeof *got);
        TEST_OK(ctx, ops->read(dev, buf, 0, initial, all * sizeof(float)));
        run_alone_then_together(ctx, dev, buf, initial, all, calls, 3, want, got);
        char what[256];
        snprintf(what, sizeof what, "%s, threads %u%s", ps->what, threads, split_everything ? ", split" : "");
        expect_same_bits(got, want, all, what);
        free(initial);
        free(want);
        free(got);
        ops->buffer_destroy(dev, buf);
        ops->buffer_destroy(dev, bias);
    }
    ops->close(dev);
    td_context_destroy(ctx);
}

Test(cpu_epilogue, pool_backward_chain_is_bitwise_the_calls_one_by_one)
{
    check_fused_pool_backward(1, false);
    check_fused_pool_backward(2, false);
    check_fused_pool_backward(3, true);
}

/* What a pooling gradient's chain takes: calls over gx or x pixel for pixel;
 * not a call that writes y or gy (read by later blocks' pooling), not one
 * over another shape, not a call that is not elementwise. */
Test(cpu_epilogue, pool_backward_chain_rules)
{
    td_buffer *const buf = (td_buffer *)(uintptr_t)0x1000, *const bias = (td_buffer *)(uintptr_t)0x2000;
    const pool_backward_shape ps = {4, 8, 8, 16, 2, 2, 0, TD_POOL_MAX, "rules"};
    const int64_t pixels = 4 * 8 * 8, image = pixels * 16, pooled = 4 * 4 * 4 * 16;
    const uint64_t z0 = 0, x0 = (uint64_t)image, gx0 = 2 * (uint64_t)image, y0 = 3 * (uint64_t)image,
                   gy0 = y0 + (uint64_t)pooled;
    const td_kernel_call pb = pool_backward_call(&ps, (td_arg){buf, gx0}, (td_arg){buf, x0}, (td_arg){buf, y0},
                                                 (td_arg){buf, gy0});
    const td_kernel_call relu_grad = ew_call(TD_EW_RELU_GRAD, (td_arg){buf, x0}, (td_arg){buf, z0},
                                             (td_arg){buf, gx0}, pixels, 16, false);
    td_kernel_call calls[3] = {pb, relu_grad, relu_grad};
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 2, 0), 1, "ReLU's gradient over x");
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 2, 1), 0, "not a POOL_BACKWARD");
    calls[1].out = (td_arg){buf, gx0}; /* in place over gx */
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 2, 0), 1, "in place over gx");
    calls[1].out = (td_arg){buf, y0}; /* over y: later blocks' pooling reads it */
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 2, 0), 0, "a call writing y");
    calls[1] = ew_call(TD_EW_ADD, (td_arg){buf, gy0}, (td_arg){buf, gy0}, (td_arg){bias, 0}, pooled / 16, 16, true);
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 2, 0), 0, "a call over gy's shape");
    calls[1] = relu_grad;
    calls[1].out = (td_arg){buf, x0 + 16}; /* x shifted by a pixel */
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 2, 0), 0, "x shifted by a pixel");
    calls[1] = relu_grad;
    calls[2] = ew_call(TD_EW_ADD, (td_arg){buf, z0}, (td_arg){buf, x0}, (td_arg){bias, 0}, pixels, 16, true);
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 3, 0), 1,
                 "a call writing z, which ReLU's gradient read for every image");
    calls[2].out = (td_arg){buf, x0};
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 3, 0), 2, "a bias add over x, in place");
    calls[2] = (td_kernel_call){.kernel = TD_KERNEL_FILL, .out = {buf, x0}, .n = (uint64_t)image};
    cr_assert_eq(td_cpu_pool_backward_epilogue_length(calls, 3, 0), 1, "a FILL is not elementwise");
}

/* A convolution's input gradient: patch gradients = GEMM, then COL2IM
 * summing them into the image, run in blocks of whole images. */
typedef struct col2im_shape {
    int64_t images, h, w, c, k, window, stride, pad;
    const char *what;
} col2im_shape;

static const col2im_shape col2im_shapes[] = {
    {9, 14, 14, 32, 64, 3, 1, 1, "conv2-like: 3x3 SAME over 14x14x32, k = 64 (granule 588 rows: 3 images)"},
    {7, 9, 11, 5, 6, 3, 2, 0, "3x3 stride 2 unpadded over 9x11x5 (20 windows an image)"},
    {4, 6, 6, 16, 9, 5, 1, 2, "5x5 SAME over 6x6x16: every pixel in many windows"},
};

static void check_fused_col2im(uint32_t threads, bool split_everything, bool deterministic)
{
    td_context *ctx = NULL;
    td_device *dev = open_cpu_device(threads, split_everything, deterministic, &ctx);
    const td_backend_ops *ops = &td_cpu_backend;
    for (size_t t = 0; t < sizeof col2im_shapes / sizeof col2im_shapes[0]; t++) {
        const col2im_shape *cs = &col2im_shapes[t];
        const int64_t oh = (cs->h + 2 * cs->pad - cs->window) / cs->stride + 1;
        const int64_t ow = (cs->w + 2 * cs->pad - cs->window) / cs->stride + 1;
        const shape s = {cs->images * oh * ow, cs->window * cs->window * cs->c, cs->k, cs->what};
        const size_t mn = (size_t)(s.m * s.n), image = (size_t)(cs->images * cs->h * cs->w * cs->c);
        td_buffer *x = filled(ops, dev, ctx, (size_t)(s.m * s.k), 21 + t, true);
        td_buffer *w = filled(ops, dev, ctx, (size_t)(s.k * s.n), 22 + t, false);
        const size_t all = mn + image;
        td_buffer *y = filled(ops, dev, ctx, all, 23 + t, false); /* [patch gradients | image gradient] */
        td_kernel_call col2im = {.kernel = TD_KERNEL_COL2IM, .out = {y, mn}, .a = {y, 0}};
        col2im.p.conv = (td_conv_params){.n = cs->images, .h = cs->h, .w = cs->w, .c = cs->c, .kh = cs->window,
                                         .kw = cs->window, .oh = oh, .ow = ow, .stride_h = cs->stride,
                                         .stride_w = cs->stride, .pad_top = cs->pad, .pad_left = cs->pad,
                                         .dil_h = 1, .dil_w = 1};
        const td_kernel_call calls[2] = {gemm_call(x, w, y, &s), col2im};
        cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 1, "%s: the chain takes the COL2IM", s.what);
        float *want = malloc(all * sizeof *want), *got = malloc(all * sizeof *got);
        float *initial = malloc(all * sizeof *initial);
        for (size_t i = 0; i < all; i++)
            initial[i] = (float)(i % 11) - 5.5f;
        run_alone_then_together(ctx, dev, y, initial, all, calls, 2, want, got);
        char what[256];
        snprintf(what, sizeof what, "%s, threads %u%s%s", s.what, threads, split_everything ? ", split" : "",
                 deterministic ? ", own GEMM" : "");
        expect_same_bits(got, want, all, what);
        free(want);
        free(got);
        free(initial);
        ops->buffer_destroy(dev, x);
        ops->buffer_destroy(dev, w);
        ops->buffer_destroy(dev, y);
    }
    ops->close(dev);
    td_context_destroy(ctx);
}

Test(cpu_epilogue, chain_ending_in_a_col2im_is_bitwise_the_calls_one_by_one)
{
    check_fused_col2im(1, false, false);
    check_fused_col2im(2, false, false);
    check_fused_col2im(3, true, false);
    check_fused_col2im(2, true, true);
}

/* A convolution's forward as the seed lowers it: IM2COL, GEMM, bias add,
 * ReLU, 2x2 max pool; the IM2COL runs as the GEMM's prologue, images at a
 * time. With `pool` false the chain is IM2COL and GEMM alone. */
typedef struct conv_shape {
    int64_t images, h, w, c, c_out;
    const char *what;
} conv_shape;

static const conv_shape conv_shapes[] = {
    {5, 28, 28, 1, 32, "conv1-like: 28x28x1 -> 32 (granule 2352 rows: 3 images)"},
    {7, 14, 14, 32, 64, "conv2-like: 14x14x32 -> 64 (granule 588: 3 images, a tail of 1)"},
    {4, 6, 10, 3, 16, "6x10x3 -> 16"},
};

static void check_fused_im2col(uint32_t threads, bool split_everything, bool deterministic, bool pool)
{
    td_context *ctx = NULL;
    td_device *dev = open_cpu_device(threads, split_everything, deterministic, &ctx);
    const td_backend_ops *ops = &td_cpu_backend;
    for (size_t t = 0; t < sizeof conv_shapes / sizeof conv_shapes[0]; t++) {
        const conv_shape *cs = &conv_shapes[t];
        const int64_t pixels = cs->images * cs->h * cs->w, k = 9 * cs->c;
        const shape s = {pixels, cs->c_out, k, cs->what};
        const size_t image = (size_t)(pixels * cs->c), patches = (size_t)(pixels * k), mn = (size_t)(s.m * s.n);
        const size_t pooled = (size_t)(pixels / 4 * cs->c_out);
        td_buffer *x = filled(ops, dev, ctx, image, 31 + t, true);
        td_buffer *w = filled(ops, dev, ctx, (size_t)(k * s.n), 32 + t, false);
        td_buffer *bias = filled(ops, dev, ctx, (size_t)s.n, 33 + t, false);
        const size_t all = patches + mn + pooled;
        td_buffer *y = filled(ops, dev, ctx, all, 34 + t, false); /* [patches | activations | pooled] */
        td_kernel_call im2col = {.kernel = TD_KERNEL_IM2COL, .out = {y, 0}, .a = {x, 0}};
        im2col.p.conv = (td_conv_params){.n = cs->images, .h = cs->h, .w = cs->w, .c = cs->c, .kh = 3, .kw = 3,
                                         .oh = cs->h, .ow = cs->w, .stride_h = 1, .stride_w = 1, .pad_top = 1,
                                         .pad_left = 1, .dil_h = 1, .dil_w = 1};
        td_kernel_call gemm = gemm_call(y, w, y, &s);
        gemm.out.offset = patches;
        td_kernel_call pool_call = {.kernel = TD_KERNEL_POOL, .out = {y, patches + mn}, .a = {y, patches}};
        pool_call.p.pool = (td_pool_params){
            .geo = {.n = cs->images, .h = cs->h, .w = cs->w, .c = cs->c_out, .kh = 2, .kw = 2, .oh = cs->h / 2,
                    .ow = cs->w / 2, .stride_h = 2, .stride_w = 2, .dil_h = 1, .dil_w = 1},
            .mode = TD_POOL_MAX};
        const td_arg act = {y, patches};
        const td_kernel_call calls[5] = {
            im2col,
            gemm,
            ew_call(TD_EW_ADD, act, act, (td_arg){bias, 0}, s.m, s.n, true),
            ew_call(TD_EW_RELU, act, act, (td_arg){NULL, 0}, s.m, s.n, false),
            pool_call,
        };
        const size_t count = pool ? 5 : 2;
        cr_assert_eq(td_cpu_epilogue_length(calls, count, 1), pool ? 3 : 0);
        cr_assert(td_cpu_prologue_im2col(calls, count, 1, pool ? 3 : 0), "%s: the IM2COL is a prologue", s.what);
        float *want = malloc(all * sizeof *want), *got = malloc(all * sizeof *got);
        float *initial = malloc(all * sizeof *initial);
        for (size_t i = 0; i < all; i++)
            initial[i] = (float)(i % 11) - 5.5f;
        run_alone_then_together(ctx, dev, y, initial, all, calls, count, want, got);
        char what[256];
        snprintf(what, sizeof what, "%s%s, threads %u%s%s", s.what, pool ? ", to the pool" : "", threads,
                 split_everything ? ", split" : "", deterministic ? ", own GEMM" : "");
        expect_same_bits(got, want, all, what);
        free(want);
        free(got);
        free(initial);
        ops->buffer_destroy(dev, x);
        ops->buffer_destroy(dev, w);
        ops->buffer_destroy(dev, bias);
        ops->buffer_destroy(dev, y);
    }
    ops->close(dev);
    td_context_destroy(ctx);
}

Test(cpu_epilogue, im2col_prologue_is_bitwise_the_calls_one_by_one)
{
    for (int pool = 0; pool < 2; pool++) {
        check_fused_im2col(1, false, false, pool);
        check_fused_im2col(2, false, false, pool);
        check_fused_im2col(3, true, false, pool);
        check_fused_im2col(2, true, true, pool);
    }
}

/* The prologue's rules on calls alone: A exactly the patches, and nothing
 * the chain writes over the image or the patches. */
Test(cpu_epilogue, im2col_prologue_rules)
{
    static char buffers[4];
    td_buffer *img = (td_buffer *)&buffers[0], *pat = (td_buffer *)&buffers[1], *wt = (td_buffer *)&buffers[2],
              *act = (td_buffer *)&buffers[3];
    td_kernel_call im2col = {.kernel = TD_KERNEL_IM2COL, .out = {pat, 0}, .a = {img, 0}};
    im2col.p.conv = (td_conv_params){.n = 2, .h = 4, .w = 4, .c = 2, .kh = 3, .kw = 3, .oh = 4, .ow = 4,
                                     .stride_h = 1, .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1,
                                     .dil_w = 1};
    const shape s = {32, 8, 18, ""};
    td_kernel_call calls[3] = {im2col, gemm_call(pat, wt, act, &s),
                               ew_call(TD_EW_RELU, (td_arg){act, 0}, (td_arg){act, 0}, (td_arg){NULL, 0}, 32, 8,
                                       false)};
    cr_assert(td_cpu_prologue_im2col(calls, 3, 1, 1));
    cr_assert_not(td_cpu_prologue_im2col(calls, 3, 0, 0), "no call before the first");
    cr_assert_not(td_cpu_prologue_im2col(calls, 3, 2, 0), "not before an elementwise call");
    td_kernel_call shifted[3] = {calls[0], calls[1], calls[2]};
    shifted[1].a.offset = 1;
    cr_assert_not(td_cpu_prologue_im2col(shifted, 3, 1, 1), "A is not the patches");
    td_kernel_call onto_image[3] = {calls[0], calls[1], calls[2]};
    onto_image[2].out = (td_arg){img, 0};
    cr_assert_not(td_cpu_prologue_im2col(onto_image, 3, 1, 1), "the epilogue writes the image");
    td_kernel_call onto_patches[3] = {calls[0], calls[1], calls[2]};
    onto_patches[1].out = (td_arg){pat, 32 * 18 - 1};
    cr_assert_not(td_cpu_prologue_im2col(onto_patches, 3, 1, 0), "C over the patches");
    td_kernel_call transposed[3] = {calls[0], calls[1], calls[2]};
    transposed[1].p.gemm.trans_a = 1;
    cr_assert_not(td_cpu_prologue_im2col(transposed, 3, 1, 0), "A transposed");
}

Test(cpu_epilogue, fused_is_bitwise_the_calls_one_by_one)
{
    check_fused(1, false, false);
    check_fused(2, false, false);
    check_fused(3, true, false);
    check_fused(1, false, true);
    check_fused(2, true, true);
}

/* The chain rules on calls alone (buffers are only compared, never
 * touched): fake distinct buffer addresses. */
static td_buffer *const X = (td_buffer *)(uintptr_t)0x1000, *const W = (td_buffer *)(uintptr_t)0x2000,
                        *const Y = (td_buffer *)(uintptr_t)0x3000, *const B = (td_buffer *)(uintptr_t)0x4000;

Test(cpu_epilogue, chain_rules)
{
    const shape s = {100, 8, 5, ""};
    const td_kernel_call g = gemm_call(X, W, Y, &s);
    const td_arg c = {Y, 0}, bias = {B, 0}, none = {NULL, 0};
    const td_kernel_call add = ew_call(TD_EW_ADD, c, c, bias, 100, 8, true);
    const td_kernel_call relu = ew_call(TD_EW_RELU, c, c, none, 100, 8, false);
    td_kernel_call calls[4] = {g, add, relu, relu};
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 2, "GEMM, bias add, ReLU in place");
    cr_assert_eq(td_cpu_epilogue_length(calls, 4, 0), 3, "a second ReLU joins too");
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 1), 0, "only a GEMM starts a chain");

    /* The bias add written as [100, 8] with a broadcast over axes 0..2 of
     * a [4, 5, 5, 8] view folds to the same rows. */
    calls[1].p.ew = (td_ew_params){.op = TD_EW_ADD, .dims = {4, 5, 5, 8}, .a_strides = {200, 40, 8, 1},
                                   .b_strides = {0, 0, 0, 1}};
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 1, "a 4-D bias add");

    /* Refused: each breaks the chain where it stands. */
    td_kernel_call bad;
    bad = add;
    bad.p.ew.b_strides[2] = 1; /* b steps one element per row: neither dense nor a row */
    calls[1] = bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "an operand neither dense nor a row");
    bad = add;
    bad.out = (td_arg){W, 0}; /* writes the GEMM's B */
    calls[1] = bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "an output over the GEMM's operand");
    bad = add;
    bad.out = (td_arg){Y, 8}; /* C shifted by one row */
    calls[1] = bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "an output overlapping C off its rows");
    bad = add;
    bad.a = (td_arg){Y, 8};
    calls[1] = bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "reading C off its rows");
    bad = add;
    bad.p.ew.dims[2] = 99; /* fewer rows than C */
    calls[1] = bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "another element count");
    bad = add;
    bad.b = (td_arg){Y, 800}; /* a "bias" that a later call writes */
    calls[1] = bad;
    calls[2] = ew_call(TD_EW_RELU, (td_arg){Y, 800}, c, none, 100, 8, false);
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 1, "a later call writing what an earlier one read");
    calls[1] = add;
    calls[2] = g;
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 1, "a GEMM ends the chain");
    const shape mlp = {1024, 512, 784, ""};
    calls[0] = gemm_call(X, W, Y, &mlp);
    calls[1] = ew_call(TD_EW_ADD, c, c, bias, 1024, 512, true);
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "B (784 x 512) larger than a block of C");
    /* A pooling ends a chain only where its windows tile the image. */
    const shape img = {2 * 4 * 10, 8, 5, ""};
    td_kernel_call p2 = {.kernel = TD_KERNEL_POOL, .out = {Y, 1000}, .a = c};
    p2.p.pool = (td_pool_params){.geo = {.n = 2, .h = 4, .w = 10, .c = 8, .kh = 2, .kw = 2, .oh = 2, .ow = 5,
                                         .stride_h = 2, .stride_w = 2, .dil_h = 1, .dil_w = 1},
                                 .mode = TD_POOL_MAX};
    calls[0] = gemm_call(X, W, Y, &img);
    calls[1] = ew_call(TD_EW_RELU, c, c, none, img.m, 8, false);
    calls[2] = p2;
    calls[3] = ew_call(TD_EW_RELU, c, c, none, img.m, 8, false);
    cr_assert_eq(td_cpu_epilogue_length(calls, 4, 0), 2, "ReLU, then a 2x2 / 2 pool ends the chain");
    cr_assert_eq(td_cpu_epilogue_granule(calls, 2, TD_CPU_GEMM_TILE_ROWS), 960, "granule: 192 rows and bands of 20 pixels");
    cr_assert_eq(td_cpu_epilogue_granule(calls, 1, TD_CPU_GEMM_TILE_ROWS), 192, "granule without a pool");
    td_kernel_call p_bad = p2;
    p_bad.p.pool.geo.stride_w = 1; /* overlapping windows */
    p_bad.p.pool.geo.ow = 9;
    calls[2] = p_bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 1, "overlapping windows");
    p_bad = p2;
    p_bad.a = (td_arg){X, 0}; /* pools something the chain did not write */
    calls[2] = p_bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 1, "a pool of another tensor");
    p_bad = p2;
    p_bad.out = (td_arg){Y, 40}; /* over C */
    calls[2] = p_bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 1, "a pool written over C");
    p_bad = p2;
    p_bad.p.pool.geo.n = 8; /* images of one row: a band would straddle two */
    p_bad.p.pool.geo.h = 1;
    p_bad.p.pool.geo.oh = 0;
    calls[2] = p_bad;
    cr_assert_eq(td_cpu_epilogue_length(calls, 3, 0), 1, "h not a multiple of the window");

    td_kernel_call padded = g;
    padded.p.gemm.ldc = 9; /* C with a gap between rows */
    calls[0] = padded;
    calls[1] = add;
    cr_assert_eq(td_cpu_epilogue_length(calls, 2, 0), 0, "C not dense");
}
