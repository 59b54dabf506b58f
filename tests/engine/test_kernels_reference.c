/* The CPU backend through its vtable (td_cpu_backend): buffers, copies,
 * segments of kernel calls, checked against hand-computed values, double
 * precision computations and the reference kernels (td_reference_*). */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_backend.h"
#include "td_reference.h"

static td_context *ctx;
static const td_backend_ops *ops = &td_cpu_backend;
static td_device *dev;

static void setup(void)
{
    ctx = test_context(0);
    TEST_OK(ctx, ops->open(ctx, 0, 0, &dev));
    cr_assert_not_null(dev);
}

static void teardown(void)
{
    ops->close(dev);
    td_context_destroy(ctx);
}

TestSuite(cpu_backend, .init = setup, .fini = teardown);

static td_buffer *buffer_of(size_t floats)
{
    td_buffer *b = NULL;
    TEST_OK(ctx, ops->buffer_create(dev, floats * sizeof(float), &b));
    cr_assert_not_null(b);
    return b;
}

static void upload(td_buffer *b, size_t offset, const void *host, size_t floats)
{
    TEST_OK(ctx, ops->write(dev, b, offset * sizeof(float), host, floats * sizeof(float)));
}

static void finish(void)
{
    uint64_t ticket = 0;
    TEST_OK(ctx, ops->submit(dev, &ticket));
    TEST_OK(ctx, ops->wait(dev, ticket, 1000));
}

static void download(td_buffer *b, size_t offset, void *host, size_t floats)
{
    TEST_OK(ctx, ops->read(dev, b, offset * sizeof(float), host, floats * sizeof(float)));
    finish();
}

/* Reads n floats of b and asserts each equals want exactly. */
static void expect_floats(td_buffer *b, const float *want, size_t n, const char *what)
{
    float *got = malloc(n * sizeof *got);
    cr_assert_not_null(got);
    download(b, 0, got, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s[%zu] = %g, want %g", what, i, (double)got[i], (double)want[i]);
    free(got);
}

static void release_buffers(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        ops->buffer_destroy(dev, va_arg(ap, td_buffer *));
    va_end(ap);
}

/* Runs the calls as one segment and waits. */
static void run_calls(const td_kernel_call *calls, size_t count)
{
    td_segment *seg = NULL;
    TEST_OK(ctx, ops->segment_create(dev, calls, count, &seg));
    TEST_OK(ctx, ops->segment_run(dev, seg));
    finish();
    ops->segment_destroy(dev, seg);
}

static td_arg arg(td_buffer *b, uint64_t offset)
{
    td_arg a = {b, offset};
    return a;
}

/* ---- device description ---- */

Test(cpu_backend, probe_and_describe)
{
    td_backend_info info = {.struct_size = sizeof(td_backend_info)};
    memset(&info, 0, sizeof info);
    TEST_OK(ctx, ops->probe(ctx, &info));
    cr_assert(info.available);
    cr_assert_eq(info.device_count, 1);
    td_device_info d = {.struct_size = sizeof(td_device_info)};
    TEST_OK(ctx, ops->describe(ctx, 0, &d));
    cr_assert_str_eq(d.backend, "cpu");
    cr_assert(d.unified_memory);
    cr_assert_eq(ops->describe(ctx, 1, &d), TD_ERR_UNKNOWN_DEVICE);
    td_device *other = NULL;
    cr_assert_eq(ops->open(ctx, 1, 0, &other), TD_ERR_UNKNOWN_DEVICE);
}

/* ---- buffers and copies ---- */

Test(cpu_backend, write_read_copy_ranges)
{
    td_buffer *a = buffer_of(64), *b = buffer_of(64);
    cr_assert_not_null(ops->buffer_host_pointer(dev, a), "cpu buffers are host memory");
    cr_assert_eq((uintptr_t)ops->buffer_host_pointer(dev, a) % 64, 0, "buffers are 64-byte aligned");
    float src[64], out[64];
    for (int i = 0; i < 64; i++)
        src[i] = (float)i + 0.5f;
    upload(a, 0, src, 64);
    /* b = -1 everywhere, then b[10..20) = a[5..15) */
    float minus[64];
    for (int i = 0; i < 64; i++)
        minus[i] = -1.0f;
    upload(b, 0, minus, 64);
    TEST_OK(ctx, ops->copy(dev, a, 5 * 4, b, 10 * 4, 10 * 4));
    download(b, 0, out, 64);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(out[i], i >= 10 && i < 20 ? src[i - 5] : -1.0f, "b[%d] = %g", i, (double)out[i]);
    /* A read of a sub-range, and one that ends exactly at the end. */
    float tail[3] = {0};
    download(a, 61, tail, 3);
    cr_assert_eq(tail[0], 61.5f);
    cr_assert_eq(tail[2], 63.5f);
    /* An overlapping copy within one buffer behaves like memmove. */
    TEST_OK(ctx, ops->copy(dev, a, 0, a, 4, 8 * 4));
    download(a, 0, out, 12);
    cr_assert_eq(out[0], 0.5f);
    for (int i = 1; i < 9; i++)
        cr_assert_eq(out[i], (float)(i - 1) + 0.5f, "a[%d] = %g", i, (double)out[i]);
    /* Zero-byte operations are valid at any in-range offset. */
    TEST_OK(ctx, ops->write(dev, a, 64 * 4, src, 0));
    TEST_OK(ctx, ops->read(dev, a, 64 * 4, out, 0));
    release_buffers(2, a, b);
}

Test(cpu_backend, out_of_range_transfers_are_invalid_arguments)
{
    td_buffer *a = buffer_of(16), *b = buffer_of(8);
    float host[32] = {0};
    cr_assert_eq(ops->write(dev, a, 0, host, 17 * 4), TD_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(td_last_error(ctx), "write") != NULL, "%s", td_last_error(ctx));
    cr_assert_eq(ops->write(dev, a, 15 * 4, host, 2 * 4), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ops->write(dev, a, SIZE_MAX - 3, host, 8), TD_ERR_INVALID_ARGUMENT, "offset + bytes overflow");
    cr_assert_eq(ops->read(dev, a, 65, host, 0), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ops->read(dev, b, 4, host, 8 * 4), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ops->copy(dev, a, 0, b, 0, 9 * 4), TD_ERR_INVALID_ARGUMENT, "destination too small");
    cr_assert_eq(ops->copy(dev, b, 4, a, 0, 8 * 4), TD_ERR_INVALID_ARGUMENT, "source too small");
    release_buffers(2, a, b);
}

Test(cpu_backend, empty_buffer_and_staging)
{
    td_buffer *empty = NULL;
    TEST_OK(ctx, ops->buffer_create(dev, 0, &empty));
    TEST_OK(ctx, ops->write(dev, empty, 0, NULL, 0));
    cr_assert_eq(ops->write(dev, empty, 0, &(float){1.0f}, 4), TD_ERR_INVALID_ARGUMENT);
    ops->buffer_destroy(dev, empty);
    td_staging *st = NULL;
    void *host = NULL;
    TEST_OK(ctx, ops->staging_create(dev, 1000, &st, &host));
    cr_assert_not_null(host);
    memset(host, 0x7F, 1000); /* the whole range is writable */
    ops->staging_destroy(dev, st);
}

Test(cpu_backend, wait_for_a_ticket_never_issued_is_an_error)
{
    uint64_t t = 0;
    TEST_OK(ctx, ops->submit(dev, &t));
    TEST_OK(ctx, ops->wait(dev, t, 10));
    cr_assert_eq(ops->wait(dev, t + 5, 10), TD_ERR_INVALID_ARGUMENT);
}

Test(cpu_backend, unknown_kernel_id_is_rejected_at_segment_creation)
{
    td_kernel_call c;
    memset(&c, 0, sizeof c);
    c.kernel = TD_KERNEL_COUNT;
    td_segment *seg = NULL;
    cr_assert_eq(ops->segment_create(dev, &c, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    c.kernel = -1;
    cr_assert_eq(ops->segment_create(dev, &c, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    /* An empty segment is fine. */
    TEST_OK(ctx, ops->segment_create(dev, NULL, 0, &seg));
    TEST_OK(ctx, ops->segment_run(dev, seg));
    ops->segment_destroy(dev, seg);
}

Test(cpu_backend, kernel_names)
{
    for (int k = 0; k < TD_KERNEL_COUNT; k++) {
        cr_assert_not_null(td_kernel_name(k));
        cr_assert_gt(strlen(td_kernel_name(k)), 0);
    }
    cr_assert_str_eq(td_kernel_name(TD_KERNEL_GEMM), "gemm");
    cr_assert_not_null(td_kernel_name(TD_KERNEL_COUNT));
    cr_assert_not_null(td_kernel_name(-7));
}

/* ---- fill, copy ---- */

Test(cpu_backend, fill_and_copy_at_element_offsets)
{
    td_buffer *b = buffer_of(40);
    td_kernel_call calls[3];
    memset(calls, 0, sizeof calls);
    calls[0].kernel = TD_KERNEL_FILL;
    calls[0].out = arg(b, 0);
    calls[0].n = 40;
    calls[0].alpha = 2.5f;
    calls[1].kernel = TD_KERNEL_FILL;
    calls[1].out = arg(b, 3);
    calls[1].n = 5;
    calls[1].alpha = -1.0f;
    calls[2].kernel = TD_KERNEL_COPY; /* b[20..27) = b[1..8) */
    calls[2].out = arg(b, 20);
    calls[2].a = arg(b, 1);
    calls[2].n = 7;
    run_calls(calls, 3);
    float out[40];
    download(b, 0, out, 40);
    float expect[40];
    for (int i = 0; i < 40; i++)
        expect[i] = i >= 3 && i < 8 ? -1.0f : 2.5f;
    for (int i = 0; i < 7; i++)
        expect[20 + i] = expect[1 + i];
    for (int i = 0; i < 40; i++)
        cr_assert_eq(out[i], expect[i], "b[%d] = %g, expected %g", i, (double)out[i], (double)expect[i]);
    ops->buffer_destroy(dev, b);
}

/* ---- elementwise with broadcasting strides ---- */

static td_kernel_call ew_call(td_ew_op op, float alpha, td_buffer *out, td_buffer *a, td_buffer *b, const int64_t dims[4],
                              const int64_t sa[4], const int64_t sb[4])
{
    td_kernel_call c;
    memset(&c, 0, sizeof c);
    c.kernel = TD_KERNEL_ELEMENTWISE;
    c.out = arg(out, 0);
    c.a = arg(a, 0);
    c.b = arg(b, 0);
    c.p.ew.op = op;
    c.p.ew.alpha = alpha;
    memcpy(c.p.ew.dims, dims, sizeof c.p.ew.dims);
    memcpy(c.p.ew.a_strides, sa, sizeof c.p.ew.a_strides);
    memcpy(c.p.ew.b_strides, sb, sizeof c.p.ew.b_strides);
    return c;
}

Test(cpu_backend, elementwise_binary_ops_with_broadcasting)
{
    /* out [2,3,4] = f(a [2,3,4], b [3,1] broadcast): b's strides (0, 1, 0). */
    enum { N = 24 };
    float a[N], b[3] = {10.0f, -2.0f, 0.5f};
    for (int i = 0; i < N; i++)
        a[i] = (float)i - 7.25f;
    td_buffer *ba = buffer_of(N), *bb = buffer_of(3), *bo = buffer_of(N);
    upload(ba, 0, a, N);
    upload(bb, 0, b, 3);
    const int64_t dims[4] = {1, 2, 3, 4}, sa[4] = {0, 12, 4, 1}, sb[4] = {0, 0, 1, 0};
    const td_ew_op opsv[] = {TD_EW_ADD, TD_EW_SUB, TD_EW_MUL, TD_EW_AXPY, TD_EW_RELU_GRAD};
    for (size_t k = 0; k < sizeof opsv / sizeof opsv[0]; k++) {
        td_kernel_call c = ew_call(opsv[k], 0.75f, bo, ba, bb, dims, sa, sb);
        run_calls(&c, 1);
        float out[N];
        download(bo, 0, out, N);
        for (int i0 = 0; i0 < 2; i0++)
            for (int i1 = 0; i1 < 3; i1++)
                for (int i2 = 0; i2 < 4; i2++) {
                    int i = i0 * 12 + i1 * 4 + i2;
                    float x = a[i], y = b[i1], want;
                    switch (opsv[k]) {
                    case TD_EW_ADD: want = x + y; break;
                    case TD_EW_SUB: want = x - y; break;
                    case TD_EW_MUL: want = x * y; break;
                    case TD_EW_AXPY: { float t = 0.75f * y; want = x + t; } break;
                    default: want = x > 0.0f ? y : 0.0f; break;
                    }
                    cr_assert_eq(out[i], want, "op %d at (%d,%d,%d): %g, expected %g", opsv[k], i0, i1, i2,
                                 (double)out[i], (double)want);
                }
    }
    release_buffers(3, ba, bb, bo);
}

Test(cpu_backend, elementwise_transposed_and_row_broadcast)
{
    /* out [3,2] = a^T (a stored [2,3]: strides (1, 3)) + row vector b [2]. */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {100, 200};
    td_buffer *ba = buffer_of(6), *bb = buffer_of(2), *bo = buffer_of(6);
    upload(ba, 0, a, 6);
    upload(bb, 0, b, 2);
    const int64_t dims[4] = {1, 1, 3, 2}, sa[4] = {0, 0, 1, 3}, sb[4] = {0, 0, 0, 1};
    td_kernel_call c = ew_call(TD_EW_ADD, 0.0f, bo, ba, bb, dims, sa, sb);
    run_calls(&c, 1);
    const float want[6] = {101, 204, 102, 205, 103, 206};
    expect_floats(bo, want, 6, "out");
    release_buffers(3, ba, bb, bo);
}

Test(cpu_backend, elementwise_unary_ops_and_in_place)
{
    float a[6] = {-2.0f, -0.0f, 0.0f, 1.5f, NAN, 3.0f};
    td_buffer *ba = buffer_of(6), *bo = buffer_of(6);
    upload(ba, 0, a, 6);
    const int64_t dims[4] = {1, 1, 1, 6}, dense[4] = {0, 0, 0, 1}, zero[4] = {0};
    td_kernel_call c = ew_call(TD_EW_RELU, 0.0f, bo, ba, ba, dims, dense, zero);
    c.b.buffer = NULL; /* unary: b is never read */
    run_calls(&c, 1);
    float out[6];
    download(bo, 0, out, 6);
    cr_assert_eq(out[0], 0.0f);
    cr_assert_eq(out[1], 0.0f);
    cr_assert_eq(out[3], 1.5f);
    cr_assert(isnan(out[4]), "relu(NaN) stays NaN");
    cr_assert_eq(out[5], 3.0f);
    /* SCALE in place: out aliases a exactly. */
    c = ew_call(TD_EW_SCALE, -4.0f, ba, ba, NULL, dims, dense, zero);
    run_calls(&c, 1);
    download(ba, 0, out, 6);
    cr_assert_eq(out[0], 8.0f);
    cr_assert_eq(out[3], -6.0f);
    cr_assert_eq(out[5], -12.0f);
    release_buffers(2, ba, bo);
}

/* ---- reduce ---- */

Test(cpu_backend, reduce_over_chosen_axes)
{
    /* a [2,3,4] with a[i,j,k] = 100 i + 10 j + k. */
    float a[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                a[i * 12 + j * 4 + k] = (float)(100 * i + 10 * j + k);
    td_buffer *ba = buffer_of(24), *bo = buffer_of(24);
    upload(ba, 0, a, 24);
    td_kernel_call c;
    memset(&c, 0, sizeof c);
    c.kernel = TD_KERNEL_REDUCE;
    c.out = arg(bo, 0);
    c.a = arg(ba, 0);
    float out[24];

    /* Sum over axis 1 (j): out [2,4] = 3*100 i + 30 + 3 k. */
    c.p.reduce = (td_reduce_params){.alpha = 1.0f,
                                    .out_dims = {1, 1, 2, 4}, .out_strides = {0, 0, 12, 1},
                                    .red_dims = {1, 1, 1, 3}, .red_strides = {0, 0, 0, 4}};
    run_calls(&c, 1);
    download(bo, 0, out, 8);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            cr_assert_eq(out[i * 4 + k], (float)(300 * i + 30 + 3 * k), "(%d,%d): %g", i, k, (double)out[i * 4 + k]);

    /* Mean (alpha) over axes 0 and 2: out [3] = (sum_i sum_k ...) / 8. */
    c.p.reduce = (td_reduce_params){.alpha = 0.125f,
                                    .out_dims = {1, 1, 1, 3}, .out_strides = {0, 0, 0, 4},
                                    .red_dims = {1, 1, 2, 4}, .red_strides = {0, 0, 12, 1}};
    run_calls(&c, 1);
    download(bo, 0, out, 3);
    for (int j = 0; j < 3; j++) {
        double sum = 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++)
                sum += 100 * i + 10 * j + k;
        cr_assert_float_eq(out[j], sum / 8.0, 1e-4, "j=%d: %g vs %g", j, (double)out[j], sum / 8.0);
    }

    /* Everything into a scalar, and an empty reduction (gives 0). */
    c.p.reduce = (td_reduce_params){.alpha = 1.0f,
                                    .out_dims = {1, 1, 1, 1}, .out_strides = {0},
                                    .red_dims = {1, 2, 3, 4}, .red_strides = {0, 12, 4, 1}};
    run_calls(&c, 1);
    download(bo, 0, out, 1);
    cr_assert_eq(out[0], (float)(12 * 100 + 8 * 30 + 6 * 6));
    c.p.reduce.red_dims[3] = 0;
    run_calls(&c, 1);
    download(bo, 0, out, 1);
    cr_assert_eq(out[0], 0.0f);
    release_buffers(2, ba, bo);
}

/* ---- softmax cross-entropy ---- */

Test(cpu_backend, xent_forward_and_backward_match_double_precision)
{
    enum { ROWS = 5, COLS = 7 };
    test_rng rng = {42};
    float logits[ROWS * COLS], upstream[ROWS];
    int32_t labels[ROWS] = {0, 6, 3, 3, 1};
    test_fill_uniform(&rng, logits, ROWS * COLS, -4.0f, 4.0f);
    logits[2 * COLS + 1] = 80.0f; /* large logits must not overflow exp */
    test_fill_uniform(&rng, upstream, ROWS, 0.1f, 2.0f);
    td_buffer *bl = buffer_of(ROWS * COLS), *blab = buffer_of(ROWS), *bloss = buffer_of(ROWS),
              *bprob = buffer_of(ROWS * COLS), *bup = buffer_of(ROWS), *bgrad = buffer_of(ROWS * COLS);
    upload(bl, 0, logits, ROWS * COLS);
    upload(blab, 0, labels, ROWS);
    upload(bup, 0, upstream, ROWS);
    td_kernel_call calls[2];
    memset(calls, 0, sizeof calls);
    calls[0].kernel = TD_KERNEL_XENT_FORWARD;
    calls[0].out = arg(bloss, 0);
    calls[0].out2 = arg(bprob, 0);
    calls[0].a = arg(bl, 0);
    calls[0].b = arg(blab, 0);
    calls[0].p.xent = (td_xent_params){ROWS, COLS};
    calls[1].kernel = TD_KERNEL_XENT_BACKWARD;
    calls[1].out = arg(bgrad, 0);
    calls[1].a = arg(bprob, 0);
    calls[1].b = arg(blab, 0);
    calls[1].c = arg(bup, 0);
    calls[1].p.xent = (td_xent_params){ROWS, COLS};
    run_calls(calls, 2);
    float loss[ROWS], prob[ROWS * COLS], grad[ROWS * COLS];
    download(bloss, 0, loss, ROWS);
    download(bprob, 0, prob, ROWS * COLS);
    download(bgrad, 0, grad, ROWS * COLS);
    for (int r = 0; r < ROWS; r++) {
        double max = -INFINITY, sum = 0.0;
        for (int c = 0; c < COLS; c++)
            max = fmax(max, logits[r * COLS + c]);
        for (int c = 0; c < COLS; c++)
            sum += exp((double)logits[r * COLS + c] - max);
        double want_loss = log(sum) - ((double)logits[r * COLS + labels[r]] - max);
        cr_assert(isfinite(loss[r]));
        cr_assert(test_close(loss[r], want_loss, 1e-5, 1e-6), "row %d: loss %g vs %g", r, (double)loss[r], want_loss);
        double prob_sum = 0;
        for (int c = 0; c < COLS; c++) {
            double p = exp((double)logits[r * COLS + c] - max) / sum;
            prob_sum += prob[r * COLS + c];
            cr_assert(test_close(prob[r * COLS + c], p, 1e-5, 1e-7), "prob[%d,%d] %g vs %g", r, c,
                      (double)prob[r * COLS + c], p);
            double g = upstream[r] * (p - (c == labels[r] ? 1.0 : 0.0));
            cr_assert(test_close(grad[r * COLS + c], g, 1e-5, 1e-6), "grad[%d,%d] %g vs %g", r, c,
                      (double)grad[r * COLS + c], g);
        }
        cr_assert(test_close(prob_sum, 1.0, 1e-5, 0), "row %d probabilities sum to %g", r, prob_sum);
    }
    /* A label outside [0, cols) gives NaN for that row (documented). */
    int32_t bad[ROWS] = {0, COLS, -1, 3, 1};
    upload(blab, 0, bad, ROWS);
    run_calls(calls, 1);
    download(bloss, 0, loss, ROWS);
    cr_assert(isnan(loss[1]) && isnan(loss[2]));
    cr_assert(isfinite(loss[0]) && isfinite(loss[3]));
    td_buffer *all[] = {bl, blab, bloss, bprob, bup, bgrad};
    for (size_t i = 0; i < 6; i++)
        ops->buffer_destroy(dev, all[i]);
}

/* ---- GEMM: the CPU backend's default engine against the reference ---- */

/* Runs GEMM through the backend (its default engine: the own FMA GEMM on a
 * CPU with FMA, CBLAS elsewhere; backends/cpu/cpu_gemm.c) and
 * td_reference_gemm on the same
 * inputs; the tolerance is 1e-4 relative to sum_k |a_mk b_kn| + |beta c_mn|,
 * the natural scale of each result's rounding error. Leading dimensions are
 * padded by `pad` so the tests also check that ld is honoured and the pad
 * columns of C are left alone. */
static void check_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float beta, int pad, test_rng *rng)
{
    int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    td_gemm_params p = {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
                        .lda = a_cols + pad, .ldb = b_cols + pad, .ldc = n + pad,
                        .alpha = 1.25f, .beta = beta};
    size_t na = (size_t)(a_rows * p.lda), nb = (size_t)(b_rows * p.ldb), nc = (size_t)(m * p.ldc);
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c0 = malloc(nc * 4), *cref = malloc(nc * 4), *cout = malloc(nc * 4);
    cr_assert(a && b && c0 && cref && cout);
    test_fill_uniform(rng, a, na, -1.0f, 1.0f);
    test_fill_uniform(rng, b, nb, -1.0f, 1.0f);
    if (beta == 0.0f)
        for (size_t i = 0; i < nc; i++)
            c0[i] = NAN; /* must not leak into the result */
    else
        test_fill_uniform(rng, c0, nc, -1.0f, 1.0f);
    memcpy(cref, c0, nc * 4);
    td_reference_gemm(cref, a, b, &p);

    td_buffer *ba = buffer_of(na), *bb = buffer_of(nb), *bc = buffer_of(nc);
    upload(ba, 0, a, na);
    upload(bb, 0, b, nb);
    upload(bc, 0, c0, nc);
    td_kernel_call call;
    memset(&call, 0, sizeof call);
    call.kernel = TD_KERNEL_GEMM;
    call.a = arg(ba, 0);
    call.b = arg(bb, 0);
    call.out = arg(bc, 0);
    call.p.gemm = p;
    run_calls(&call, 1);
    download(bc, 0, cout, nc);

    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double scale = 0.0;
            for (int64_t l = 0; l < k; l++) {
                double x = trans_a ? a[l * p.lda + i] : a[i * p.lda + l];
                double y = trans_b ? b[j * p.ldb + l] : b[l * p.ldb + j];
                scale += fabs(x * y);
            }
            scale = 1.25 * scale + (beta != 0.0f ? fabs(beta * c0[i * p.ldc + j]) : 0.0);
            float got = cout[i * p.ldc + j], want = cref[i * p.ldc + j];
            cr_assert(isfinite(got) && isfinite(want), "ta=%d tb=%d m=%lld n=%lld k=%lld beta=%g: C[%lld,%lld] = %g "
                      "(reference %g)", trans_a, trans_b, (long long)m, (long long)n, (long long)k, (double)beta,
                      (long long)i, (long long)j, (double)got, (double)want);
            cr_assert(fabs((double)got - want) <= 1e-4 * (scale + 1e-30),
                      "ta=%d tb=%d m=%lld n=%lld k=%lld beta=%g: C[%lld,%lld] = %.8g, reference %.8g", trans_a,
                      trans_b, (long long)m, (long long)n, (long long)k, (double)beta, (long long)i, (long long)j,
                      (double)got, (double)want);
        }
        for (int64_t j = n; j < p.ldc; j++)
            cr_assert(memcmp(&cout[i * p.ldc + j], &c0[i * p.ldc + j], 4) == 0, "pad column %lld of row %lld written",
                      (long long)j, (long long)i);
    }
    release_buffers(3, ba, bb, bc);
    free(a);
    free(b);
    free(c0);
    free(cref);
    free(cout);
}

static const int64_t gemm_sizes[] = {1, 7, 33, 130};

static void check_gemm_all_sizes(int trans_a, int trans_b)
{
    test_rng rng = {(uint64_t)(1000 + 2 * trans_a + trans_b)};
    for (int beta_one = 0; beta_one < 2; beta_one++)
        for (size_t im = 0; im < 4; im++)
            for (size_t in = 0; in < 4; in++)
                for (size_t ik = 0; ik < 4; ik++)
                    check_gemm(trans_a, trans_b, gemm_sizes[im], gemm_sizes[in], gemm_sizes[ik],
                               beta_one ? 1.0f : 0.0f, (int)((im + in + ik) % 3), &rng);
}

Test(cpu_backend, gemm_nn_matches_reference) { check_gemm_all_sizes(0, 0); }
Test(cpu_backend, gemm_tn_matches_reference) { check_gemm_all_sizes(1, 0); }
Test(cpu_backend, gemm_nt_matches_reference) { check_gemm_all_sizes(0, 1); }
Test(cpu_backend, gemm_tt_matches_reference) { check_gemm_all_sizes(1, 1); }

Test(cpu_backend, gemm_small_exact_values)
{
    /* [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]], alpha 2, beta 0.5 on C = 10. */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {10, 10, 10, 10};
    td_buffer *ba = buffer_of(4), *bb = buffer_of(4), *bc = buffer_of(4);
    upload(ba, 0, a, 4);
    upload(bb, 0, b, 4);
    upload(bc, 0, c, 4);
    td_kernel_call call;
    memset(&call, 0, sizeof call);
    call.kernel = TD_KERNEL_GEMM;
    call.a = arg(ba, 0);
    call.b = arg(bb, 0);
    call.out = arg(bc, 0);
    call.p.gemm = (td_gemm_params){.m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .alpha = 2.0f, .beta = 0.5f};
    run_calls(&call, 1);
    const float want[4] = {43, 49, 91, 105};
    expect_floats(bc, want, 4, "C");
    release_buffers(3, ba, bb, bc);
}

Test(cpu_backend, gemm_with_k_zero_scales_or_clears_c)
{
    float c[6] = {NAN, NAN, NAN, 1, 2, 3};
    td_buffer *ba = buffer_of(1), *bb = buffer_of(1), *bc = buffer_of(6);
    upload(bc, 0, c, 6);
    td_kernel_call call;
    memset(&call, 0, sizeof call);
    call.kernel = TD_KERNEL_GEMM;
    call.a = arg(ba, 0);
    call.b = arg(bb, 0);
    call.out = arg(bc, 0);
    call.p.gemm = (td_gemm_params){.m = 1, .n = 3, .k = 0, .lda = 1, .ldb = 3, .ldc = 3, .alpha = 1.0f, .beta = 0.0f};
    run_calls(&call, 1); /* row 0: beta 0, NaN is not read */
    call.out = arg(bc, 3);
    call.p.gemm.beta = 2.0f;
    run_calls(&call, 1); /* row 1: scaled by beta */
    const float want[6] = {0, 0, 0, 2, 4, 6};
    expect_floats(bc, want, 6, "C");
    release_buffers(3, ba, bb, bc);
}

Test(cpu_backend, gemm_at_element_offsets)
{
    /* Tensors packed in one buffer: A at 3, B at 11, C at 20. */
    float host[32];
    for (int i = 0; i < 32; i++)
        host[i] = (float)(i % 5) - 2.0f;
    td_buffer *buf = buffer_of(32);
    upload(buf, 0, host, 32);
    td_gemm_params p = {.m = 2, .n = 2, .k = 3, .lda = 3, .ldb = 2, .ldc = 2, .alpha = 1.0f, .beta = 0.0f};
    td_kernel_call call;
    memset(&call, 0, sizeof call);
    call.kernel = TD_KERNEL_GEMM;
    call.a = arg(buf, 3);
    call.b = arg(buf, 11);
    call.out = arg(buf, 20);
    call.p.gemm = p;
    run_calls(&call, 1);
    float out[32], want[4];
    download(buf, 0, out, 32);
    td_reference_gemm(want, host + 3, host + 11, &p);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[20 + i], want[i]);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(out[i], host[i], "element %d outside C changed", i);
    for (int i = 24; i < 32; i++)
        cr_assert_eq(out[i], host[i], "element %d outside C changed", i);
    ops->buffer_destroy(dev, buf);
}
