/* Shared helpers of the Vulkan backend tests (see vk_test_util.h). */
#include "vk_test_util.h"
#include "td_test_compare.h"

#include "td_vulkan.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vt_init(vt *t)
{
    memset(t, 0, sizeof *t);
    t->ops = &td_vulkan_backend;
    cr_assert_eq(td_context_create(NULL, &t->ctx), TD_OK);
    td_backend_info info;
    cr_assert_eq(t->ops->probe(t->ctx, &info), TD_OK);
    if (!info.available) {
        td_context_destroy(t->ctx);
        t->ctx = NULL;
        cr_skip_test("no Vulkan device: %s", info.reason);
    }
    t->device_count = info.device_count;
}

void vt_open(vt *t, uint32_t index, uint32_t instance)
{
    td_status s = t->ops->open(t->ctx, index, instance, &t->dev);
    cr_assert_eq(s, TD_OK, "open(%u, %u): %s", index, instance, td_last_error(t->ctx));
}

void vt_fini(vt *t)
{
    if (t->dev != NULL)
        t->ops->close(t->dev);
    t->dev = NULL;
    td_context_destroy(t->ctx);
    t->ctx = NULL;
    /* Under TD_VULKAN_VALIDATION=1 every test doubles as a validation test. */
    if (td_vulkan_validation_active())
        cr_assert_eq(td_vulkan_validation_message_count(), 0,
                     "the validation layer reported %u messages (printed on stderr)",
                     td_vulkan_validation_message_count());
}

td_buffer *vt_buffer(vt *t, size_t floats)
{
    td_buffer *buf = NULL;
    td_status s = t->ops->buffer_create(t->dev, floats * sizeof(float), &buf);
    cr_assert_eq(s, TD_OK, "buffer_create(%zu floats): %s", floats, td_last_error(t->ctx));
    return buf;
}

void vt_sync(vt *t)
{
    uint64_t ticket = 0;
    cr_assert_eq(t->ops->submit(t->dev, &ticket), TD_OK, "submit: %s", td_last_error(t->ctx));
    cr_assert_eq(t->ops->wait(t->dev, ticket, 60000), TD_OK, "wait: %s", td_last_error(t->ctx));
}

void vt_write(vt *t, td_buffer *buf, size_t offset_floats, const void *data, size_t floats)
{
    td_status s = t->ops->write(t->dev, buf, offset_floats * 4, data, floats * 4);
    cr_assert_eq(s, TD_OK, "write: %s", td_last_error(t->ctx));
    vt_sync(t);
}

td_buffer *vt_upload(vt *t, const void *data, size_t floats)
{
    td_buffer *buf = vt_buffer(t, floats);
    vt_write(t, buf, 0, data, floats);
    return buf;
}

void vt_download(vt *t, td_buffer *buf, size_t offset_floats, void *out, size_t floats)
{
    td_status s = t->ops->read(t->dev, buf, offset_floats * 4, out, floats * 4);
    cr_assert_eq(s, TD_OK, "read: %s", td_last_error(t->ctx));
    vt_sync(t);
}

td_status vt_run(vt *t, const td_kernel_call *calls, size_t count)
{
    td_segment *seg = NULL;
    td_status s = t->ops->segment_create(t->dev, calls, count, &seg);
    if (s != TD_OK)
        return s;
    cr_assert_eq(t->ops->segment_run(t->dev, seg), TD_OK, "segment_run: %s", td_last_error(t->ctx));
    vt_sync(t);
    t->ops->segment_destroy(t->dev, seg);
    return TD_OK;
}

void vt_random(float *x, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffffff) / 8388608.0f - 1.0f;
    }
}

float *vt_floats(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    cr_assert_not_null(x, "malloc(%zu floats)", n);
    return x;
}

void vt_expect_bitwise(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, &got[i], 4);
        memcpy(&w, &want[i], 4);
        /* Any NaN matches any NaN: payloads are not part of the contract. */
        if (g != w && !(isnan(got[i]) && isnan(want[i])))
            cr_assert_fail("%s: element %zu is %.9g (0x%08x), reference %.9g (0x%08x)", what, i, got[i], g,
                           want[i], w);
    }
}

void vt_expect_close(const float *got, const float *want, size_t n, const char *what)
{
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        bool gn = isnan(got[i]), wn = isnan(want[i]);
        bool gi = isinf(got[i]), wi = isinf(want[i]);
        cr_assert(gn == wn, "%s: element %zu is %g, reference %g (NaN placement)", what, i, got[i], want[i]);
        cr_assert(gi == wi && (!gi || got[i] == want[i]), "%s: element %zu is %g, reference %g (Inf placement)",
                  what, i, got[i], want[i]);
        if (gn || gi)
            continue;
        double d = (double)got[i] - (double)want[i];
        err += d * d;
        norm += (double)want[i] * (double)want[i];
    }
    double nmse = norm > 0.0 ? err / norm : err;
    cr_assert(nmse < 1e-10, "%s: normalized MSE %g >= 1e-10", what, nmse);
}

/* One of each kernel with offsets, checked; the validation binary runs it
 * with the layer on. */
void vt_check_all_kernels(vt *t)
{
    enum { N = 300, OFF = 5 };
    float *a = vt_floats(N + OFF), *b = vt_floats(N + OFF), *got = vt_floats(N), *want = vt_floats(N);
    vt_random(a, N + OFF, 1);
    vt_random(b, N + OFF, 2);
    td_buffer *ba = vt_upload(t, a, N + OFF), *bb = vt_upload(t, b, N + OFF), *bo = vt_buffer(t, N + OFF);

    td_kernel_call fill = {.kernel = TD_KERNEL_FILL, .n = N, .alpha = 2.5f, .out = {bo, OFF}};
    cr_assert_eq(vt_run(t, &fill, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, N);
    td_reference_fill(want, N, 2.5f);
    vt_expect_bitwise(got, want, N, "fill");

    td_kernel_call copy = {.kernel = TD_KERNEL_COPY, .n = N, .out = {bo, OFF}, .a = {ba, OFF}};
    cr_assert_eq(vt_run(t, &copy, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, N);
    vt_expect_bitwise(got, a + OFF, N, "copy");

    for (int op = 0; op < TD_EW_OP_COUNT; op++) {
        td_kernel_call ew = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {bo, OFF}, .a = {ba, OFF}, .b = {bb, 1},
                             .p.ew = {.op = op, .alpha = 0.75f, .dims = {1, 3, 10, 10},
                                      .a_strides = {0, 100, 10, 1}, .b_strides = {0, 0, 10, 1}}};
        cr_assert_eq(vt_run(t, &ew, 1), TD_OK, "%s", td_last_error(t->ctx));
        vt_download(t, bo, OFF, got, N);
        td_reference_elementwise(want, a + OFF, b + 1, &ew.p.ew);
        int64_t bad = td_test_ew_first_mismatch(op, got, want, N);
        cr_assert(bad < 0, "elementwise %s: element %lld is %.9g, reference %.9g", td_ew_name(op), (long long)bad,
                  bad < 0 ? 0.0 : (double)got[bad], bad < 0 ? 0.0 : (double)want[bad]);
    }

    td_kernel_call red = {.kernel = TD_KERNEL_REDUCE, .out = {bo, OFF}, .a = {ba, OFF},
                          .p.reduce = {.alpha = 0.5f, .out_dims = {1, 1, 1, 10}, .out_strides = {0, 0, 0, 1},
                                       .red_dims = {1, 1, 1, 30}, .red_strides = {0, 0, 0, 10}}};
    cr_assert_eq(vt_run(t, &red, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 10);
    td_reference_reduce(want, a + OFF, &red.p.reduce);
    vt_expect_close(got, want, 10, "reduce");

    td_kernel_call gemm = {.kernel = TD_KERNEL_GEMM, .out = {bo, OFF}, .a = {ba, OFF}, .b = {bb, 3},
                           .p.gemm = {.m = 10, .n = 12, .k = 9, .lda = 9, .ldb = 12, .ldc = 12, .alpha = 1.0f}};
    cr_assert_eq(vt_run(t, &gemm, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 120);
    td_reference_gemm(want, a + OFF, b + 3, &gemm.p.gemm);
    vt_expect_close(got, want, 120, "gemm");

    int32_t labels[6] = {0, 4, 9, -1, 10, 3};
    td_buffer *bl = vt_upload(t, labels, 6), *bp = vt_buffer(t, 60), *bg = vt_buffer(t, 60);
    td_kernel_call xf = {.kernel = TD_KERNEL_XENT_FORWARD, .out = {bo, OFF}, .out2 = {bp, 0}, .a = {ba, OFF},
                         .b = {bl, 0}, .p.xent = {.rows = 6, .cols = 10}};
    td_kernel_call xb = {.kernel = TD_KERNEL_XENT_BACKWARD, .out = {bg, 0}, .a = {bp, 0}, .b = {bl, 0},
                         .c = {bb, 0}, .p.xent = {.rows = 6, .cols = 10}};
    td_kernel_call both[2] = {xf, xb};
    cr_assert_eq(vt_run(t, both, 2), TD_OK, "%s", td_last_error(t->ctx));
    float loss[6], prob[60], grad[60], wloss[6], wprob[60], wgrad[60];
    vt_download(t, bo, OFF, loss, 6);
    vt_download(t, bp, 0, prob, 60);
    vt_download(t, bg, 0, grad, 60);
    td_reference_xent_forward(wloss, wprob, a + OFF, labels, &xf.p.xent);
    td_reference_xent_backward(wgrad, prob, labels, b, &xb.p.xent);
    vt_expect_close(loss, wloss, 6, "xent loss");
    vt_expect_close(prob, wprob, 60, "xent prob");
    vt_expect_bitwise(grad, wgrad, 60, "xent grad");

    /* The row kernels, each argument in its own buffer. */
    td_kernel_call sm = {.kernel = TD_KERNEL_SOFTMAX, .out = {bo, OFF}, .a = {ba, OFF}, .p.rows = {6, 10, 1}};
    cr_assert_eq(vt_run(t, &sm, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 60);
    td_reference_softmax(want, a + OFF, &sm.p.rows);
    vt_expect_close(got, want, 60, "log-softmax");
    td_kernel_call am = {.kernel = TD_KERNEL_ARGMAX, .out = {bo, OFF}, .a = {ba, OFF}, .p.rows = {6, 10, 0}};
    cr_assert_eq(vt_run(t, &am, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 6);
    td_reference_argmax(want, a + OFF, &am.p.rows);
    vt_expect_bitwise(got, want, 6, "argmax");
    td_kernel_call cast = {.kernel = TD_KERNEL_CAST, .out = {bo, OFF}, .a = {bl, 1}, .p.cast = {17, TD_CAST_U8}};
    cr_assert_eq(vt_run(t, &cast, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 17);
    td_reference_cast(want, labels + 1, &cast.p.cast);
    vt_expect_bitwise(got, want, 17, "cast u8");
    uint32_t step[2] = {3, 1000};
    td_buffer *bs = vt_upload(t, step, 2);
    td_kernel_call dm = {.kernel = TD_KERNEL_DROPOUT_MASK, .out = {bo, OFF}, .b = {bs, 0},
                         .p.dropout = {5, 11, 7, 8, 1u << 31, 2.0f}};
    cr_assert_eq(vt_run(t, &dm, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 55);
    td_reference_dropout_mask(want, step, &dm.p.dropout);
    vt_expect_bitwise(got, want, 55, "dropout mask");
    td_kernel_call ga = {.kernel = TD_KERNEL_GATHER_ROWS, .out = {bo, OFF}, .a = {ba, OFF}, .b = {bl, 0},
                         .p.gather = {6, 10, 7}};
    cr_assert_eq(vt_run(t, &ga, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 42);
    td_reference_gather_rows(want, a + OFF, labels, &ga.p.gather);
    vt_expect_bitwise(got, want, 42, "gather rows");
    td_kernel_call sc = {.kernel = TD_KERNEL_SCATTER_ADD_ROWS, .out = {bo, OFF}, .a = {bb, 2}, .b = {bl, 0},
                         .p.gather = {6, 10, 7}};
    cr_assert_eq(vt_run(t, &sc, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bo, OFF, got, 70);
    td_reference_scatter_add_rows(want, b + 2, labels, &sc.p.gather);
    vt_expect_bitwise(got, want, 70, "scatter-add rows");
    t->ops->buffer_destroy(t->dev, bs);
    /* Convolution and pooling: 1x5x6x2 image from a, 3x3 window, stride 2,
     * padding 1 (3x3 outputs), so every binding these kernels use is bound. */
    td_conv_params cp = {.n = 1, .h = 5, .w = 6, .c = 2, .kh = 3, .kw = 3, .oh = 3, .ow = 3, .stride_h = 2,
                         .stride_w = 2, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
    td_pool_params pp = {.geo = cp, .mode = TD_POOL_MAX};
    float cols[162], wcols[162], img[60], wimg[60], pooled[18], wpooled[18];
    td_buffer *bc = vt_buffer(t, 162), *bi = vt_buffer(t, 60);
    td_kernel_call conv[4] = {
        {.kernel = TD_KERNEL_IM2COL, .out = {bc, 0}, .a = {ba, OFF}, .p.conv = cp},
        {.kernel = TD_KERNEL_COL2IM, .out = {bi, 0}, .a = {bc, 0}, .p.conv = cp},
        {.kernel = TD_KERNEL_POOL, .out = {bo, OFF}, .a = {ba, OFF}, .p.pool = pp},
        {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {bg, 0}, .a = {ba, OFF}, .b = {bo, OFF}, .c = {bb, 0},
         .p.pool = pp},
    };
    cr_assert_eq(vt_run(t, conv, 4), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, bc, 0, cols, 162);
    vt_download(t, bi, 0, img, 60);
    vt_download(t, bo, OFF, pooled, 18);
    vt_download(t, bg, 0, grad, 60);
    td_reference_im2col(wcols, a + OFF, &cp);
    td_reference_col2im(wimg, wcols, &cp);
    td_reference_pool(wpooled, a + OFF, &pp);
    td_reference_pool_backward(wgrad, a + OFF, wpooled, b, &pp);
    vt_expect_bitwise(cols, wcols, 162, "im2col");
    vt_expect_bitwise(img, wimg, 60, "col2im");
    vt_expect_bitwise(pooled, wpooled, 18, "max pool");
    vt_expect_bitwise(grad, wgrad, 60, "max pool backward");
    t->ops->buffer_destroy(t->dev, bc);
    t->ops->buffer_destroy(t->dev, bi);

    t->ops->buffer_destroy(t->dev, ba);
    t->ops->buffer_destroy(t->dev, bb);
    t->ops->buffer_destroy(t->dev, bo);
    t->ops->buffer_destroy(t->dev, bl);
    t->ops->buffer_destroy(t->dev, bp);
    t->ops->buffer_destroy(t->dev, bg);
    free(a);
    free(b);
    free(got);
    free(want);
}
