/* The Vulkan backend through its vtable, on every Vulkan device found, against
 * the CPU reference: discovery, copies (small, offset, > maxStorageBufferRange),
 * staging, every kernel, segments run many times, barriers, two logical
 * devices on one physical device, the wait timeout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "td_vulkan.h"
#include "vk_test_util.h"
#include "td_test_compare.h"

#define EACH_DEVICE(t) for (uint32_t dev_i = 0; dev_i < (t).device_count; dev_i++)

static void reopen(vt *t, uint32_t index)
{
    if (t->dev != NULL)
        t->ops->close(t->dev);
    t->dev = NULL;
    vt_open(t, index, 0);
}

Test(vulkan_backend, probe_and_describe)
{
    vt t;
    vt_init(&t);
    cr_assert_gt(t.device_count, 0);
    EACH_DEVICE(t)
    {
        td_device_info info;
        cr_assert_eq(t.ops->describe(t.ctx, dev_i, &info), TD_OK, "%s", td_last_error(t.ctx));
        cr_assert_str_eq(info.backend, "vulkan");
        cr_assert_eq(info.index, dev_i);
        cr_assert_neq(info.name[0], '\0');
        cr_assert_neq(info.vendor[0], '\0');
        cr_assert_neq(info.driver_version[0], '\0');
        cr_assert(strncmp(info.language_version, "Vulkan 1.", 9) == 0, "%s", info.language_version);
        cr_assert_gt(info.max_buffer_range, 0);
        cr_assert_geq(info.max_allocation, info.max_buffer_range);
        cr_assert_gt(info.global_memory, 0);
        cr_assert_geq(info.max_workgroup_size, 256);
        cr_assert_gt(info.subgroup_size, 0);
        cr_log_info("vulkan:%u %s / %s / %s / %s, range %llu, subgroup %u", dev_i, info.name, info.vendor,
                    info.driver_version, info.language_version, (unsigned long long)info.max_buffer_range,
                    info.subgroup_size);
    }
    td_device_info info;
    cr_assert_eq(t.ops->describe(t.ctx, t.device_count, &info), TD_ERR_UNKNOWN_DEVICE);
    td_device *dev = NULL;
    cr_assert_eq(t.ops->open(t.ctx, t.device_count + 3, 0, &dev), TD_ERR_UNKNOWN_DEVICE);
    cr_assert_null(dev);
    vt_fini(&t);
}

Test(vulkan_backend, result_names)
{
    cr_assert_str_eq(td_vulkan_result_name(-4), "VK_ERROR_DEVICE_LOST");
    cr_assert_str_eq(td_vulkan_result_name(-2), "VK_ERROR_OUT_OF_DEVICE_MEMORY");
    cr_assert_str_eq(td_vulkan_result_name(2), "VK_TIMEOUT");
    cr_assert_str_eq(td_vulkan_result_name(12345), "VK_RESULT_12345");
}

Test(vulkan_backend, write_read_roundtrip_with_offsets)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        enum { N = 1000 };
        float *x = vt_floats(N), *y = vt_floats(N);
        vt_random(x, N, 7);
        td_buffer *buf = vt_buffer(&t, N);
        /* Unaligned byte offsets and sizes, several enqueued before one submit. */
        cr_assert_eq(t.ops->write(t.dev, buf, 0, x, 12), TD_OK);
        cr_assert_eq(t.ops->write(t.dev, buf, 12, (char *)x + 12, 4 * N - 12 - 7), TD_OK);
        cr_assert_eq(t.ops->write(t.dev, buf, 4 * N - 7, (char *)x + 4 * N - 7, 7), TD_OK);
        memset(y, 0, 4 * N);
        cr_assert_eq(t.ops->read(t.dev, buf, 3, (char *)y + 3, 4 * N - 3), TD_OK);
        cr_assert_eq(t.ops->read(t.dev, buf, 0, y, 3), TD_OK);
        vt_sync(&t);
        cr_assert(memcmp(x, y, 4 * N) == 0);
        /* Zero bytes is a no-op; out of range is an error. */
        cr_assert_eq(t.ops->write(t.dev, buf, 4 * N, x, 0), TD_OK);
        cr_assert_eq(t.ops->read(t.dev, buf, 4 * N - 4, y, 8), TD_ERR_INVALID_ARGUMENT);
        td_buffer *empty;
        cr_assert_eq(t.ops->buffer_create(t.dev, 0, &empty), TD_OK);
        t.ops->buffer_destroy(t.dev, empty);
        t.ops->buffer_destroy(t.dev, buf);
        free(x);
        free(y);
    }
    vt_fini(&t);
}

Test(vulkan_backend, roundtrip_over_max_storage_buffer_range)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    td_device_info info;
    cr_assert_eq(t.ops->describe(t.ctx, 0, &info), TD_OK);
    size_t bytes = (size_t)info.max_buffer_range + (32u << 20);
    if (info.max_buffer_range > (1u << 30))
        bytes = (size_t)160 << 20; /* big-range devices: still beyond the arena size */
    size_t n = bytes / 4;
    uint32_t *x = malloc(bytes), *y = malloc(bytes);
    cr_assert(x != NULL && y != NULL);
    for (size_t i = 0; i < n; i++)
        x[i] = (uint32_t)(i * 2654435761u);
    td_buffer *buf = NULL;
    cr_assert_eq(t.ops->buffer_create(t.dev, bytes, &buf), TD_OK, "%s", td_last_error(t.ctx));
    cr_assert_eq(t.ops->write(t.dev, buf, 0, x, bytes), TD_OK, "%s", td_last_error(t.ctx));
    memset(y, 0, bytes);
    cr_assert_eq(t.ops->read(t.dev, buf, 0, y, bytes), TD_OK, "%s", td_last_error(t.ctx));
    vt_sync(&t);
    cr_assert(memcmp(x, y, bytes) == 0, "round trip of %zu bytes differs", bytes);

    /* A kernel on tensors beyond the first maxStorageBufferRange bytes binds a window. */
    if (info.max_buffer_range < bytes) {
        uint64_t hi = (uint64_t)n - 4096;
        float ones[4096], got[4096];
        for (int i = 0; i < 4096; i++)
            ones[i] = (float)i;
        cr_assert_eq(t.ops->write(t.dev, buf, hi * 4, ones, sizeof ones), TD_OK);
        td_kernel_call call = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {buf, hi - 4096}, .a = {buf, hi},
                               .b = {buf, hi},
                               .p.ew = {.op = TD_EW_ADD, .dims = {1, 1, 1, 4096}, .a_strides = {0, 0, 0, 1},
                                        .b_strides = {0, 0, 0, 1}}};
        cr_assert_eq(vt_run(&t, &call, 1), TD_OK, "%s", td_last_error(t.ctx));
        vt_download(&t, buf, hi - 4096, got, 4096);
        for (int i = 0; i < 4096; i++)
            cr_assert_eq(got[i], 2.0f * (float)i);
        /* One tensor larger than the range is refused, clearly. */
        td_kernel_call big = {.kernel = TD_KERNEL_FILL, .n = (int64_t)(n - 16), .out = {buf, 0}};
        td_segment *seg = NULL;
        cr_assert_eq(t.ops->segment_create(t.dev, &big, 1, &seg), TD_ERR_UNSUPPORTED);
        cr_assert(strstr(td_last_error(t.ctx), "maxStorageBufferRange") != NULL, "%s", td_last_error(t.ctx));
    }
    t.ops->buffer_destroy(t.dev, buf);
    free(x);
    free(y);
    vt_fini(&t);
}

Test(vulkan_backend, device_copy)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        float x[256], y[256];
        vt_random(x, 256, 3);
        td_buffer *a = vt_upload(&t, x, 256), *b = vt_buffer(&t, 256);
        cr_assert_eq(t.ops->copy(t.dev, a, 16, b, 40, 512), TD_OK);
        cr_assert_eq(t.ops->read(t.dev, b, 40, y, 512), TD_OK);
        vt_sync(&t);
        cr_assert(memcmp(y, (char *)x + 16, 512) == 0);
        cr_assert_eq(t.ops->copy(t.dev, a, 0, a, 8, 64), TD_ERR_UNSUPPORTED);
        cr_assert_eq(t.ops->copy(t.dev, a, 0, b, 1000, 64), TD_ERR_INVALID_ARGUMENT);
        t.ops->buffer_destroy(t.dev, a);
        t.ops->buffer_destroy(t.dev, b);
    }
    vt_fini(&t);
}

Test(vulkan_backend, staging_fast_path)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        enum { N = 1 << 16 };
        td_staging *st;
        void *host;
        cr_assert_eq(t.ops->staging_create(t.dev, 2 * N * 4, &st, &host), TD_OK, "%s", td_last_error(t.ctx));
        cr_assert_not_null(host);
        float *h = host;
        vt_random(h, N, 11);
        td_buffer *buf = vt_buffer(&t, N);
        /* staging -> device -> staging, with a kernel in between */
        cr_assert_eq(t.ops->write(t.dev, buf, 0, h, N * 4), TD_OK);
        td_kernel_call scale = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {buf, 0}, .a = {buf, 0},
                                .p.ew = {.op = TD_EW_SCALE, .alpha = 3.0f, .dims = {1, 1, 1, N},
                                         .a_strides = {0, 0, 0, 1}}};
        td_segment *seg;
        cr_assert_eq(t.ops->segment_create(t.dev, &scale, 1, &seg), TD_OK);
        cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
        cr_assert_eq(t.ops->read(t.dev, buf, 0, h + N, N * 4), TD_OK);
        vt_sync(&t);
        for (int i = 0; i < N; i++)
            cr_assert_eq(h[N + i], 3.0f * h[i], "element %d", i);
        t.ops->segment_destroy(t.dev, seg);
        t.ops->buffer_destroy(t.dev, buf);
        t.ops->staging_destroy(t.dev, st);
    }
    vt_fini(&t);
}

Test(vulkan_backend, every_kernel_basic)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        vt_check_all_kernels(&t);
    }
    vt_fini(&t);
}

/* Elementwise: every op, dense and broadcast, with NaN/Inf/-0 in the data,
 * aliasing out == a, all compared bitwise. */
Test(vulkan_backend, elementwise_within_contract)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        enum { D0 = 2, D1 = 3, D2 = 4, D3 = 37, N = D0 * D1 * D2 * D3, OFF = 13 };
        float *a = vt_floats(N + OFF), *b = vt_floats(N + OFF), *got = vt_floats(N), *want = vt_floats(N);
        vt_random(a, N + OFF, 21);
        vt_random(b, N + OFF, 22);
        a[OFF + 1] = NAN;
        a[OFF + 2] = INFINITY;
        a[OFF + 3] = -INFINITY;
        a[OFF + 4] = -0.0f;
        a[OFF + 5] = 0.0f;
        b[OFF + 6] = NAN;
        b[OFF + 7] = 1e-30f;
        td_buffer *ba = vt_upload(&t, a, N + OFF), *bb = vt_upload(&t, b, N + OFF), *bo = vt_buffer(&t, N + 3);
        const struct {
            int64_t as[4], bs[4];
        } layouts[] = {
            {{D1 * D2 * D3, D2 * D3, D3, 1}, {D1 * D2 * D3, D2 * D3, D3, 1}}, /* dense */
            {{D1 * D2 * D3, D2 * D3, D3, 1}, {0, D3, 0, 1}},                  /* b broadcast over 0, 2 */
            {{0, 0, D3, 1}, {D1 * D2 * D3, D2 * D3, D3, 1}},                  /* a broadcast */
            {{1, D0, D0 * D1, D0 * D1 * D2}, {0, 0, 0, 0}},                   /* a transposed, b scalar */
        };
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
            for (int op = 0; op < TD_EW_OP_COUNT; op++) {
                td_kernel_call c = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {bo, 3}, .a = {ba, OFF},
                                    .b = {bb, OFF},
                                    .p.ew = {.op = op, .alpha = -1.7f, .dims = {D0, D1, D2, D3}}};
                memcpy(c.p.ew.a_strides, layouts[l].as, sizeof layouts[l].as);
                memcpy(c.p.ew.b_strides, layouts[l].bs, sizeof layouts[l].bs);
                cr_assert_eq(vt_run(&t, &c, 1), TD_OK, "%s", td_last_error(t.ctx));
                vt_download(&t, bo, 3, got, N);
                td_reference_elementwise(want, a + OFF, b + OFF, &c.p.ew);
                int64_t bad = td_test_ew_first_mismatch(op, got, want, N);
                cr_assert(bad < 0, "elementwise %s layout %zu: element %lld is %.9g, reference %.9g", td_ew_name(op),
                          l, (long long)bad, bad < 0 ? 0.0 : (double)got[bad], bad < 0 ? 0.0 : (double)want[bad]);
            }
        /* out aliasing a exactly: a = a + alpha*b in place. */
        td_kernel_call axpy = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {ba, OFF}, .a = {ba, OFF}, .b = {bb, OFF},
                               .p.ew = {.op = TD_EW_AXPY, .alpha = 0.3f, .dims = {1, 1, 1, N},
                                        .a_strides = {0, 0, 0, 1}, .b_strides = {0, 0, 0, 1}}};
        cr_assert_eq(vt_run(&t, &axpy, 1), TD_OK);
        vt_download(&t, ba, OFF, got, N);
        td_reference_elementwise(want, a + OFF, b + OFF, &axpy.p.ew);
        vt_expect_bitwise(got, want, N, "in-place axpy");
        t.ops->buffer_destroy(t.dev, ba);
        t.ops->buffer_destroy(t.dev, bb);
        t.ops->buffer_destroy(t.dev, bo);
        free(a);
        free(b);
        free(got);
        free(want);
    }
    vt_fini(&t);
}

Test(vulkan_backend, reduce_axes)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        /* a viewed as [5, 6, 7, 40] dense */
        enum { D0 = 5, D1 = 6, D2 = 7, D3 = 40, N = D0 * D1 * D2 * D3, OFF = 9 };
        const int64_t st[4] = {D1 * D2 * D3, D2 * D3, D3, 1};
        float *a = vt_floats(N + OFF), *got = vt_floats(N), *want = vt_floats(N);
        vt_random(a, N + OFF, 31);
        a[OFF + 77] = INFINITY;
        td_buffer *ba = vt_upload(&t, a, N + OFF), *bo = vt_buffer(&t, N + 2);
        td_reduce_params cases[] = {
            /* over the last axis */
            {1.0f, {D0, D1, D2, 1}, {st[0], st[1], st[2], 0}, {1, 1, 1, D3}, {0, 0, 0, 1}},
            /* over the first axis (bias gradient) */
            {0.5f, {1, D1, D2, D3}, {0, st[1], st[2], 1}, {D0, 1, 1, 1}, {st[0], 0, 0, 0}},
            /* over the middle two */
            {2.0f, {D0, 1, 1, D3}, {st[0], 0, 0, 1}, {1, D1, D2, 1}, {0, st[1], st[2], 0}},
            /* everything to one scalar (workgroup path) */
            {1.0f / N, {1, 1, 1, 1}, {0, 0, 0, 0}, {D0, D1, D2, D3}, {st[0], st[1], st[2], 1}},
            /* few outputs, long sums (workgroup path) */
            {1.0f, {1, 1, 1, D3}, {0, 0, 0, 1}, {D0, D1, D2, 1}, {st[0], st[1], st[2], 0}},
            /* nothing reduced: a strided copy */
            {1.0f, {D0, D1, D2, D3}, {st[0], st[1], st[2], 1}, {1, 1, 1, 1}, {0, 0, 0, 0}},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            td_kernel_call c = {.kernel = TD_KERNEL_REDUCE, .out = {bo, 2}, .a = {ba, OFF}, .p.reduce = cases[i]};
            cr_assert_eq(vt_run(&t, &c, 1), TD_OK, "%s", td_last_error(t.ctx));
            int64_t outs = td_reduce_out_count(&cases[i]);
            vt_download(&t, bo, 2, got, (size_t)outs);
            td_reference_reduce(want, a + OFF, &cases[i]);
            char what[32];
            snprintf(what, sizeof what, "reduce case %zu", i);
            vt_expect_close(got, want, (size_t)outs, what);
        }
        t.ops->buffer_destroy(t.dev, ba);
        t.ops->buffer_destroy(t.dev, bo);
        free(a);
        free(got);
        free(want);
    }
    vt_fini(&t);
}

/* All transpose combinations, sizes 1, 7, 33, 130 for m, n, k, padded leading
 * dimensions, beta 0 (C holds NaN, which must not leak) and 1. All 64 size
 * combinations of one (transposes, beta) go in ONE segment of independent
 * dispatches writing disjoint parts of one C buffer. */
Test(vulkan_backend, gemm_all_transposes, .timeout = 300)
{
    vt t;
    vt_init(&t);
    static const int64_t sizes[] = {1, 7, 33, 130};
    enum { S = 4, COMBOS = S * S * S, MAXD = 130, PAD = 3, LD = MAXD + PAD };
    size_t mat = (size_t)LD * MAXD;
    float *a = vt_floats(mat), *b = vt_floats(mat), *c0 = vt_floats(mat * COMBOS), *got = vt_floats(mat * COMBOS);
    float *want = vt_floats(mat);
    vt_random(a, mat, 41);
    vt_random(b, mat, 42);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        td_buffer *ba = vt_upload(&t, a, mat), *bb = vt_upload(&t, b, mat), *bc = vt_buffer(&t, mat * COMBOS + 1);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int beta_i = 0; beta_i < 2; beta_i++) {
                    float beta = (float)beta_i;
                    vt_random(c0, mat * COMBOS, 43 + ta + 2 * tb);
                    if (beta == 0.0f)
                        for (size_t i = 0; i < mat * COMBOS; i += 5)
                            c0[i] = NAN;
                    vt_write(&t, bc, 1, c0, mat * COMBOS);
                    td_kernel_call calls[COMBOS];
                    int idx = 0;
                    for (int mi = 0; mi < S; mi++)
                        for (int ni = 0; ni < S; ni++)
                            for (int ki = 0; ki < S; ki++, idx++) {
                                int64_t m = sizes[mi], n = sizes[ni], k = sizes[ki];
                                td_gemm_params p = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                                                    .lda = (ta ? m : k) + PAD, .ldb = (tb ? k : n) + PAD,
                                                    .ldc = n + 1, .alpha = 0.75f, .beta = beta};
                                calls[idx] = (td_kernel_call){.kernel = TD_KERNEL_GEMM, .out = {bc, 1 + idx * mat},
                                                              .a = {ba, 0}, .b = {bb, 0}, .p.gemm = p};
                            }
                    td_segment *seg;
                    cr_assert_eq(t.ops->segment_create(t.dev, calls, COMBOS, &seg), TD_OK, "%s",
                                 td_last_error(t.ctx));
                    cr_assert_eq(td_vulkan_segment_barrier_count(seg), 0, "independent GEMMs got barriers");
                    cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
                    vt_sync(&t);
                    t.ops->segment_destroy(t.dev, seg);
                    vt_download(&t, bc, 1, got, mat * COMBOS);
                    for (int i = 0; i < COMBOS; i++) {
                        const td_gemm_params *p = &calls[i].p.gemm;
                        size_t span = (size_t)((p->m - 1) * p->ldc + p->n);
                        memcpy(want, c0 + i * mat, span * 4);
                        td_reference_gemm(want, a, b, p);
                        char what[96];
                        snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%lld n=%lld k=%lld beta=%g", ta, tb,
                                 (long long)p->m, (long long)p->n, (long long)p->k, beta);
                        /* Compare only C's elements; the ldc padding must stay as written. */
                        for (int64_t r = 0; r < p->m; r++)
                            vt_expect_close(got + i * mat + r * p->ldc, want + r * p->ldc, (size_t)p->n, what);
                        for (int64_t r = 0; r + 1 < p->m; r++)
                            vt_expect_bitwise(got + i * mat + r * p->ldc + p->n, c0 + i * mat + r * p->ldc + p->n,
                                              (size_t)(p->ldc - p->n), "gemm ldc padding");
                    }
                }
        t.ops->buffer_destroy(t.dev, ba);
        t.ops->buffer_destroy(t.dev, bb);
        t.ops->buffer_destroy(t.dev, bc);
    }
    free(a);
    free(b);
    free(c0);
    free(got);
    free(want);
    vt_fini(&t);
}

Test(vulkan_backend, xent_forward_backward)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        enum { R = 67, C = 10, OFF = 3 };
        float logits[R * C + OFF], up[R], loss[R], prob[R * C], grad[R * C];
        float wloss[R], wprob[R * C], wgrad[R * C];
        int32_t labels[R];
        vt_random(logits, R * C + OFF, 51);
        for (int i = 0; i < R * C + OFF; i++)
            logits[i] *= 20.0f;
        vt_random(up, R, 52);
        for (int r = 0; r < R; r++)
            labels[r] = (r * 7) % C;
        labels[4] = -1; /* NaN loss rows */
        labels[9] = C;
        logits[OFF + 20 * C + 3] = INFINITY; /* NaN probabilities in row 20 */
        td_buffer *bl = vt_upload(&t, logits, R * C + OFF), *bi = vt_upload(&t, labels, R),
                  *bu = vt_upload(&t, up, R);
        td_buffer *bloss = vt_buffer(&t, R + 1), *bprob = vt_buffer(&t, R * C + 2), *bgrad = vt_buffer(&t, R * C);
        td_kernel_call calls[2] = {
            {.kernel = TD_KERNEL_XENT_FORWARD, .out = {bloss, 1}, .out2 = {bprob, 2}, .a = {bl, OFF}, .b = {bi, 0},
             .p.xent = {R, C}},
            {.kernel = TD_KERNEL_XENT_BACKWARD, .out = {bgrad, 0}, .a = {bprob, 2}, .b = {bi, 0}, .c = {bu, 0},
             .p.xent = {R, C}},
        };
        td_segment *seg;
        cr_assert_eq(t.ops->segment_create(t.dev, calls, 2, &seg), TD_OK, "%s", td_last_error(t.ctx));
        cr_assert_eq(td_vulkan_segment_barrier_count(seg), 1, "backward reads forward's output: one barrier");
        cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
        vt_sync(&t);
        t.ops->segment_destroy(t.dev, seg);
        vt_download(&t, bloss, 1, loss, R);
        vt_download(&t, bprob, 2, prob, R * C);
        vt_download(&t, bgrad, 0, grad, R * C);
        td_reference_xent_forward(wloss, wprob, logits + OFF, labels, &calls[0].p.xent);
        td_reference_xent_backward(wgrad, prob, labels, up, &calls[1].p.xent);
        cr_assert(isnan(loss[4]) && isnan(loss[9]));
        vt_expect_close(loss, wloss, R, "xent loss");
        vt_expect_close(prob, wprob, R * C, "xent prob");
        vt_expect_bitwise(grad, wgrad, R * C, "xent grad");
        t.ops->buffer_destroy(t.dev, bl);
        t.ops->buffer_destroy(t.dev, bi);
        t.ops->buffer_destroy(t.dev, bu);
        t.ops->buffer_destroy(t.dev, bloss);
        t.ops->buffer_destroy(t.dev, bprob);
        t.ops->buffer_destroy(t.dev, bgrad);
    }
    vt_fini(&t);
}

/* A dependent chain recorded once and run several times (with uploads in
 * between) gives the reference's result every time; identical runs are
 * bitwise identical. */
Test(vulkan_backend, segment_runs_many_times)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        enum { N = 5000 };
        float *x = vt_floats(N), *y = vt_floats(N), *got = vt_floats(N), *want = vt_floats(N), *first = vt_floats(N);
        vt_random(x, N, 61);
        vt_random(y, N, 62);
        td_buffer *bx = vt_upload(&t, x, N), *by = vt_upload(&t, y, N), *bt = vt_buffer(&t, N);
        td_ew_params dense = {.dims = {1, 1, 1, N}, .a_strides = {0, 0, 0, 1}, .b_strides = {0, 0, 0, 1}};
        td_kernel_call calls[4] = {
            {.kernel = TD_KERNEL_COPY, .n = N, .out = {bt, 0}, .a = {by, 0}},
            {.kernel = TD_KERNEL_ELEMENTWISE, .out = {bt, 0}, .a = {bt, 0}, .b = {bt, 0}, .p.ew = dense},
            {.kernel = TD_KERNEL_ELEMENTWISE, .out = {bx, 0}, .a = {bx, 0}, .b = {bt, 0}, .p.ew = dense},
            {.kernel = TD_KERNEL_ELEMENTWISE, .out = {bx, 0}, .a = {bx, 0}, .p.ew = dense},
        };
        calls[1].p.ew.op = TD_EW_MUL;
        calls[2].p.ew.op = TD_EW_AXPY;
        calls[2].p.ew.alpha = 0.5f;
        calls[3].p.ew.op = TD_EW_RELU;
        td_segment *seg;
        cr_assert_eq(t.ops->segment_create(t.dev, calls, 4, &seg), TD_OK, "%s", td_last_error(t.ctx));
        cr_assert_eq(td_vulkan_segment_barrier_count(seg), 3);
        memcpy(want, x, N * 4);
        for (int run = 0; run < 4; run++) {
            cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
            if (run == 1)
                cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK); /* twice in one submission */
            vt_sync(&t);
            vt_download(&t, bx, 0, got, N);
            for (int rep = 0; rep < (run == 1 ? 2 : 1); rep++)
                for (int i = 0; i < N; i++) {
                    float tt = y[i] * y[i];
                    float a5 = 0.5f * tt;
                    float v = want[i] + a5;
                    want[i] = v > 0.0f ? v : (v != v ? v : 0.0f);
                }
            vt_expect_bitwise(got, want, N, "chained segment");
        }
        /* Same inputs, same segment: same bits. */
        vt_write(&t, bx, 0, x, N);
        cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
        vt_sync(&t);
        vt_download(&t, bx, 0, first, N);
        vt_write(&t, bx, 0, x, N);
        cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
        vt_sync(&t);
        vt_download(&t, bx, 0, got, N);
        cr_assert(memcmp(first, got, N * 4) == 0);
        t.ops->segment_destroy(t.dev, seg);

        /* Independent dispatches get no barrier; disjoint ranges of one buffer are independent. */
        td_kernel_call indep[3] = {
            {.kernel = TD_KERNEL_FILL, .n = 100, .alpha = 1.0f, .out = {bt, 0}},
            {.kernel = TD_KERNEL_FILL, .n = 100, .alpha = 2.0f, .out = {bt, 100}},
            {.kernel = TD_KERNEL_COPY, .n = 100, .out = {bx, 0}, .a = {by, 0}},
        };
        cr_assert_eq(t.ops->segment_create(t.dev, indep, 3, &seg), TD_OK);
        cr_assert_eq(td_vulkan_segment_barrier_count(seg), 0);
        cr_assert_eq(td_vulkan_segment_dispatch_count(seg), 3);
        t.ops->segment_destroy(t.dev, seg);
        t.ops->buffer_destroy(t.dev, bx);
        t.ops->buffer_destroy(t.dev, by);
        t.ops->buffer_destroy(t.dev, bt);
        free(x);
        free(y);
        free(got);
        free(want);
        free(first);
    }
    vt_fini(&t);
}

Test(vulkan_backend, bad_arguments_are_reported)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    td_buffer *buf = vt_buffer(&t, 100);
    td_segment *seg = NULL;
    td_kernel_call over = {.kernel = TD_KERNEL_FILL, .n = 101, .out = {buf, 0}};
    cr_assert_eq(t.ops->segment_create(t.dev, &over, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(td_last_error(t.ctx), "fill") != NULL, "%s", td_last_error(t.ctx));
    td_kernel_call null_arg = {.kernel = TD_KERNEL_COPY, .n = 10, .out = {buf, 0}};
    cr_assert_eq(t.ops->segment_create(t.dev, &null_arg, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    td_kernel_call huge = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {buf, 0}, .a = {buf, 0},
                           .p.ew = {.op = TD_EW_SCALE, .dims = {1, 1, 1, (int64_t)1 << 40}}};
    cr_assert_eq(t.ops->segment_create(t.dev, &huge, 1, &seg), TD_ERR_UNSUPPORTED);
    td_kernel_call bad = {.kernel = 99, .out = {buf, 0}};
    cr_assert_eq(t.ops->segment_create(t.dev, &bad, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    cr_assert_null(seg);
    cr_assert_eq(t.ops->wait(t.dev, 1000, 10), TD_ERR_INVALID_ARGUMENT);
    t.ops->buffer_destroy(t.dev, buf);
    vt_fini(&t);
}

Test(vulkan_backend, two_logical_devices_on_one_physical)
{
    vt t;
    vt_init(&t);
    td_device *d0 = NULL, *d1 = NULL;
    cr_assert_eq(t.ops->open(t.ctx, 0, 0, &d0), TD_OK, "%s", td_last_error(t.ctx));
    cr_assert_eq(t.ops->open(t.ctx, 0, 1, &d1), TD_OK, "%s", td_last_error(t.ctx));
    cr_assert_neq(d0, d1);
    enum { N = 4096 };
    float x[N], g0[N], g1[N];
    vt_random(x, N, 71);
    td_buffer *b0, *b1;
    cr_assert_eq(t.ops->buffer_create(d0, N * 4, &b0), TD_OK);
    cr_assert_eq(t.ops->buffer_create(d1, N * 4, &b1), TD_OK);
    cr_assert_eq(t.ops->write(d0, b0, 0, x, N * 4), TD_OK);
    cr_assert_eq(t.ops->write(d1, b1, 0, x, N * 4), TD_OK);
    td_kernel_call s0 = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {b0, 0}, .a = {b0, 0},
                         .p.ew = {.op = TD_EW_SCALE, .alpha = 2.0f, .dims = {1, 1, 1, N}, .a_strides = {0, 0, 0, 1}}};
    td_kernel_call s1 = s0;
    s1.out.buffer = s1.a.buffer = b1;
    s1.p.ew.alpha = -3.0f;
    td_segment *seg0, *seg1;
    cr_assert_eq(t.ops->segment_create(d0, &s0, 1, &seg0), TD_OK);
    cr_assert_eq(t.ops->segment_create(d1, &s1, 1, &seg1), TD_OK);
    /* Interleaved: both queues busy at once, tickets independent. */
    uint64_t k0, k1;
    cr_assert_eq(t.ops->segment_run(d0, seg0), TD_OK);
    cr_assert_eq(t.ops->segment_run(d1, seg1), TD_OK);
    cr_assert_eq(t.ops->read(d1, b1, 0, g1, N * 4), TD_OK);
    cr_assert_eq(t.ops->read(d0, b0, 0, g0, N * 4), TD_OK);
    cr_assert_eq(t.ops->submit(d1, &k1), TD_OK);
    cr_assert_eq(t.ops->submit(d0, &k0), TD_OK);
    cr_assert_eq(t.ops->wait(d0, k0, 60000), TD_OK);
    cr_assert_eq(t.ops->wait(d1, k1, 60000), TD_OK);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(g0[i], 2.0f * x[i]);
        cr_assert_eq(g1[i], -3.0f * x[i]);
    }
    /* Closing one leaves the other working. */
    t.ops->segment_destroy(d0, seg0);
    t.ops->buffer_destroy(d0, b0);
    t.ops->close(d0);
    cr_assert_eq(t.ops->segment_run(d1, seg1), TD_OK);
    cr_assert_eq(t.ops->read(d1, b1, 0, g1, N * 4), TD_OK);
    cr_assert_eq(t.ops->submit(d1, &k1), TD_OK);
    cr_assert_eq(t.ops->wait(d1, k1, 60000), TD_OK);
    for (int i = 0; i < N; i++)
        cr_assert_eq(g1[i], -3.0f * (-3.0f * x[i]));
    t.ops->segment_destroy(d1, seg1);
    t.ops->buffer_destroy(d1, b1);
    t.ops->close(d1);
    vt_fini(&t);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Long work, waited on with a 0 ms timeout: TD_ERR_TIMEOUT, not a hang, and
 * a later wait still completes it. */
Test(vulkan_backend, wait_timeout, .timeout = 300)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    enum { D = 512 };
    float *m = vt_floats(D * D);
    vt_random(m, D * D, 81);
    td_buffer *a = vt_upload(&t, m, D * D), *c = vt_buffer(&t, D * D);
    td_kernel_call g = {.kernel = TD_KERNEL_GEMM, .out = {c, 0}, .a = {a, 0}, .b = {a, 0},
                        .p.gemm = {.m = D, .n = D, .k = D, .lda = D, .ldb = D, .ldc = D, .alpha = 1.0f}};
    td_kernel_call calls[4] = {g, g, g, g};
    td_segment *seg;
    cr_assert_eq(t.ops->segment_create(t.dev, calls, 4, &seg), TD_OK);
    cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
    uint64_t ticket;
    cr_assert_eq(t.ops->submit(t.dev, &ticket), TD_OK);
    double t0 = now_s();
    td_status s = t.ops->wait(t.dev, ticket, 0);
    cr_assert_lt(now_s() - t0, 1.0, "a 0 ms wait took over a second");
    cr_assert_eq(s, TD_ERR_TIMEOUT, "4 GEMMs of 512^3 finished instantly?");
    cr_assert(strstr(td_last_error(t.ctx), "VK_TIMEOUT") != NULL, "%s", td_last_error(t.ctx));
    cr_assert_eq(t.ops->wait(t.dev, ticket, 120000), TD_OK, "%s", td_last_error(t.ctx));
    t.ops->segment_destroy(t.dev, seg);
    t.ops->buffer_destroy(t.dev, a);
    t.ops->buffer_destroy(t.dev, c);
    free(m);
    vt_fini(&t);
}

/* Not a correctness check: prints GEMM GFLOP/s for the report. */
Test(vulkan_backend, gemm_timing, .timeout = 300)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    static const int dims[] = {256, 512};
    for (int i = 0; i < 2; i++) {
        int d = dims[i];
        float *m = vt_floats((size_t)d * d);
        vt_random(m, (size_t)d * d, 91);
        td_buffer *a = vt_upload(&t, m, (size_t)d * d), *c = vt_buffer(&t, (size_t)d * d);
        td_kernel_call g = {.kernel = TD_KERNEL_GEMM, .out = {c, 0}, .a = {a, 0}, .b = {a, 0},
                            .p.gemm = {.m = d, .n = d, .k = d, .lda = d, .ldb = d, .ldc = d, .alpha = 1.0f}};
        td_segment *seg;
        cr_assert_eq(t.ops->segment_create(t.dev, &g, 1, &seg), TD_OK);
        cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK); /* warm-up */
        vt_sync(&t);
        int reps = d == 256 ? 10 : 3;
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
        vt_sync(&t);
        double dt = (now_s() - t0) / reps;
        double gflops = 2.0 * d * d * d / dt * 1e-9;
        fprintf(stderr, "vulkan gemm %d^3: %.2f ms, %.2f GFLOP/s\n", d, dt * 1e3, gflops);
        cr_log_info("vulkan gemm %d^3: %.2f GFLOP/s", d, gflops);
        t.ops->segment_destroy(t.dev, seg);
        t.ops->buffer_destroy(t.dev, a);
        t.ops->buffer_destroy(t.dev, c);
        free(m);
    }
    vt_fini(&t);
}

/* No driver: probe answers available = false with a reason, open fails
 * cleanly. The loader reads these variables at the first Vulkan call, which
 * in this forked test process has not happened yet. */
Test(vulkan_backend, no_driver_is_a_reason_not_a_crash)
{
    setenv("VK_ICD_FILENAMES", "/nonexistent/tandem_no_icd.json", 1);
    setenv("VK_DRIVER_FILES", "/nonexistent/tandem_no_icd.json", 1);
    td_context *ctx;
    cr_assert_eq(td_context_create(NULL, &ctx), TD_OK);
    td_backend_info info;
    cr_assert_eq(td_vulkan_backend.probe(ctx, &info), TD_OK);
    cr_assert_not(info.available);
    cr_assert_eq(info.device_count, 0);
    cr_assert_neq(info.reason[0], '\0');
    cr_log_info("probe without a driver: %s", info.reason);
    td_device *dev = NULL;
    cr_assert_neq(td_vulkan_backend.open(ctx, 0, 0, &dev), TD_OK);
    cr_assert_null(dev);
    td_context_destroy(ctx);
}

/* ---- row kernels ---- */

typedef void (*row_ref)(float *mem, const td_kernel_call *c);

static void ref_rows(float *m, const td_kernel_call *c)
{
    switch (c->kernel) {
    case TD_KERNEL_SOFTMAX: td_reference_softmax(m + c->out.offset, m + c->a.offset, &c->p.rows); break;
    case TD_KERNEL_ARGMAX: td_reference_argmax(m + c->out.offset, m + c->a.offset, &c->p.rows); break;
    case TD_KERNEL_CAST: td_reference_cast(m + c->out.offset, m + c->a.offset, &c->p.cast); break;
    case TD_KERNEL_DROPOUT_MASK:
        td_reference_dropout_mask(m + c->out.offset, (const uint32_t *)(m + c->b.offset), &c->p.dropout);
        break;
    case TD_KERNEL_GATHER_ROWS:
        td_reference_gather_rows(m + c->out.offset, m + c->a.offset, (const int32_t *)(m + c->b.offset),
                                 &c->p.gather);
        break;
    default:
        td_reference_scatter_add_rows(m + c->out.offset, m + c->a.offset, (const int32_t *)(m + c->b.offset),
                                      &c->p.gather);
        break;
    }
}

/* Runs c with all its arguments in one buffer holding host and compares the
 * whole buffer with the reference applied to a copy (writes outside the
 * output are caught too): bitwise, or for softmax (exp and log: Vulkan
 * allows several ulp) NaN and infinities in the same places and within
 * 1e-5 relative plus 1e-6 absolute. */
static void check_row_call(vt *t, td_kernel_call c, const float *host, size_t elems, const char *what)
{
    float *want = vt_floats(elems), *got = vt_floats(elems);
    memcpy(want, host, elems * 4);
    ref_rows(want, &c);
    td_buffer *buf = vt_upload(t, host, elems);
    c.out.buffer = c.a.buffer = c.b.buffer = buf;
    cr_assert_eq(vt_run(t, &c, 1), TD_OK, "%s: %s", what, td_last_error(t->ctx));
    vt_download(t, buf, 0, got, elems);
    if (c.kernel != TD_KERNEL_SOFTMAX) {
        vt_expect_bitwise(got, want, elems, what);
    } else {
        for (size_t i = 0; i < elems; i++) {
            bool ok = isnan(want[i]) ? isnan(got[i])
                      : isinf(want[i]) ? got[i] == want[i]
                                       : fabs((double)got[i] - want[i]) <= 1e-5 * fabs((double)want[i]) + 1e-6;
            cr_assert(ok, "%s: element %zu is %.9g, reference %.9g", what, i, got[i], want[i]);
        }
    }
    t->ops->buffer_destroy(t->dev, buf);
    free(want);
    free(got);
}

Test(vulkan_backend, row_kernels)
{
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        enum { E = 8192 };
        float *mem = vt_floats(E);
        vt_random(mem, E, 77);
        for (size_t i = 0; i < 4000; i++)
            mem[i] *= 10.0f;
        /* Rows of the 37 x 10 view at 11: row 2 a NaN and a -inf, row 5 all -inf. */
        mem[11 + 2 * 10 + 3] = NAN;
        mem[11 + 2 * 10 + 4] = -INFINITY;
        for (int j = 0; j < 10; j++)
            mem[11 + 5 * 10 + j] = -INFINITY;
        mem[11 + 7 * 10 + 1] = -INFINITY;
        for (int mode = 0; mode < 2; mode++) {
            td_kernel_call sm = {.kernel = TD_KERNEL_SOFTMAX, .out = {NULL, 5000}, .a = {NULL, 11},
                                 .p.rows = {37, 10, mode}};
            check_row_call(&t, sm, mem, E, mode ? "log-softmax 37x10" : "softmax 37x10");
            sm.p.rows = (td_rows_params){3, 1000, mode};
            check_row_call(&t, sm, mem, E, mode ? "log-softmax 3x1000" : "softmax 3x1000");
        }
        float *ints = vt_floats(E);
        for (size_t i = 0; i < E; i++)
            ints[i] = i >= 11 && i < 11 + 370 && !isfinite(mem[i]) ? mem[i] : floorf(mem[i]);
        td_kernel_call am = {.kernel = TD_KERNEL_ARGMAX, .out = {NULL, 7000}, .a = {NULL, 11},
                             .p.rows = {37, 10, 0}};
        check_row_call(&t, am, ints, E, "argmax 37x10");
        am.p.rows = (td_rows_params){3, 0, 0};
        check_row_call(&t, am, ints, E, "argmax of empty rows");
        free(ints);

        int32_t *words = (int32_t *)mem;
        const int32_t specials[] = {16777217, 16777219, -16777219, INT32_MAX, INT32_MIN, 33554435, -1, 0};
        memcpy(words + 100, specials, sizeof specials);
        td_kernel_call cu8 = {.kernel = TD_KERNEL_CAST, .out = {NULL, 3000}, .a = {NULL, 13},
                              .p.cast = {1001, TD_CAST_U8}};
        check_row_call(&t, cu8, mem, E, "cast u8");
        td_kernel_call ci32 = {.kernel = TD_KERNEL_CAST, .out = {NULL, 3000}, .a = {NULL, 100},
                               .p.cast = {333, TD_CAST_I32}};
        check_row_call(&t, ci32, mem, E, "cast i32");

        uint32_t *u = (uint32_t *)mem;
        u[4000] = 17;
        u[4001] = 0xfffffffbu;
        td_kernel_call dm = {.kernel = TD_KERNEL_DROPOUT_MASK, .out = {NULL, 6000}, .b = {NULL, 4000},
                             .p.dropout = {13, 7, 0xdeadbeefu, 0x12345678u, 3006477107u, 1.0f / 0.7f}};
        check_row_call(&t, dm, mem, E, "dropout mask 13x7");
        dm.p.dropout.rows = 30;
        dm.p.dropout.cols = 64;
        check_row_call(&t, dm, mem, E, "dropout mask 30x64");

        int32_t *ids = (int32_t *)(mem + 4100);
        for (int i = 0; i < 61; i++)
            ids[i] = (i * 7) % 53 - 1;
        ids[10] = INT32_MIN;
        td_kernel_call ga = {.kernel = TD_KERNEL_GATHER_ROWS, .out = {NULL, 5000}, .a = {NULL, 1},
                             .b = {NULL, 4100}, .p.gather = {61, 50, 9}};
        check_row_call(&t, ga, mem, E, "gather rows");
        td_kernel_call sc = {.kernel = TD_KERNEL_SCATTER_ADD_ROWS, .out = {NULL, 5000}, .a = {NULL, 500},
                             .b = {NULL, 4100}, .p.gather = {61, 50, 9}};
        check_row_call(&t, sc, mem, E, "scatter-add rows");
        free(mem);
    }
    vt_fini(&t);
}

/* Each row kernel with one argument past its buffer's end, and sizes past
 * the shaders' 32-bit indices: a status naming the call and the kernel. */
Test(vulkan_backend, row_kernels_bad_arguments)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    td_buffer *buf = vt_buffer(&t, 100);
    td_arg at0 = {buf, 0}, past = {buf, 95};
    td_kernel_call calls[] = {
        {.kernel = TD_KERNEL_SOFTMAX, .out = past, .a = at0, .p.rows = {2, 5, 0}},
        {.kernel = TD_KERNEL_ARGMAX, .out = at0, .a = past, .p.rows = {2, 5, 0}},
        {.kernel = TD_KERNEL_CAST, .out = at0, .a = {buf, 98}, .p.cast = {9, TD_CAST_U8}},
        {.kernel = TD_KERNEL_DROPOUT_MASK, .out = at0, .b = {buf, 99}, .p.dropout = {1, 4, 0, 0, 1u << 31, 2.0f}},
        {.kernel = TD_KERNEL_GATHER_ROWS, .out = at0, .a = past, .b = at0, .p.gather = {2, 3, 2}},
        {.kernel = TD_KERNEL_SCATTER_ADD_ROWS, .out = at0, .a = at0, .b = {buf, 101}, .p.gather = {2, 3, 2}},
        {.kernel = TD_KERNEL_CAST, .out = at0, .a = at0, .p.cast = {4, 9}},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        td_segment *seg = NULL;
        cr_assert_eq(t.ops->segment_create(t.dev, &calls[i], 1, &seg), TD_ERR_INVALID_ARGUMENT, "call %zu", i);
        const char *msg = td_last_error(t.ctx);
        cr_assert(strstr(msg, td_kernel_name(calls[i].kernel)) && strstr(msg, "call 0"), "%s", msg);
        cr_assert_null(seg);
    }
    /* A table of 2^31 rows does not fit the indices; nothing is read. */
    td_kernel_call huge = {.kernel = TD_KERNEL_GATHER_ROWS, .out = at0, .a = at0, .b = at0,
                           .p.gather = {0, (int64_t)1 << 31, 1}};
    td_segment *seg = NULL;
    cr_assert_eq(t.ops->segment_create(t.dev, &huge, 1, &seg), TD_ERR_UNSUPPORTED, "%s", td_last_error(t.ctx));
    t.ops->buffer_destroy(t.dev, buf);
    vt_fini(&t);
}

/* ---- convolution and pooling against the reference ---- */

/* n, h, w, c, kh, kw, stride h/w, padding top/bottom/left/right, dilation h/w */
static td_conv_params vk_conv_geo(const int64_t *g)
{
    td_conv_params p = {.n = g[0], .h = g[1], .w = g[2], .c = g[3], .kh = g[4], .kw = g[5], .stride_h = g[6],
                        .stride_w = g[7], .pad_top = g[8], .pad_left = g[10], .dil_h = g[12], .dil_w = g[13]};
    p.oh = (g[1] + g[8] + g[9] - (g[12] * (g[4] - 1) + 1)) / g[6] + 1;
    p.ow = (g[2] + g[10] + g[11] - (g[13] * (g[5] - 1) + 1)) / g[7] + 1;
    return p;
}

/* IM2COL, and COL2IM of independent random patches (so that each pixel's
 * terms differ and their order shows), on strides 2/3, dilation 2,
 * asymmetric and oversized padding, overlapping 3x3 windows, 1x1 and a
 * window the size of the image; both bitwise (COL2IM gathers in the
 * reference's order). */
Test(vulkan_backend, im2col_col2im)
{
    static const int64_t geos[][14] = {
        {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 2, 0, 1, 2}, {1, 9, 8, 2, 3, 3, 3, 2, 0, 1, 1, 2, 2, 2},
        {3, 4, 6, 1, 2, 2, 1, 1, 4, 3, 5, 4, 1, 1}, {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1},
        {2, 5, 3, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1}, {1, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 7, 7, 1, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
    };
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        for (size_t g = 0; g < sizeof geos / sizeof geos[0]; g++) {
            td_conv_params p = vk_conv_geo(geos[g]);
            int64_t ni = td_conv_image_count(&p), np = td_conv_patch_count(&p);
            float *x = vt_floats((size_t)ni + 3), *cols = vt_floats((size_t)np), *img = vt_floats((size_t)ni);
            float *wcols = vt_floats((size_t)np), *wimg = vt_floats((size_t)ni);
            float *rcols = vt_floats((size_t)np + 1);
            vt_random(x, (size_t)ni + 3, 70 + (uint32_t)g);
            vt_random(rcols, (size_t)np + 1, 170 + (uint32_t)g);
            td_buffer *bx = vt_upload(&t, x, (size_t)ni + 3), *bp = vt_buffer(&t, (size_t)np + 1),
                      *bi = vt_buffer(&t, (size_t)ni + 2), *br = vt_upload(&t, rcols, (size_t)np + 1);
            td_kernel_call calls[2] = {
                {.kernel = TD_KERNEL_IM2COL, .out = {bp, 1}, .a = {bx, 3}, .p.conv = p},
                {.kernel = TD_KERNEL_COL2IM, .out = {bi, 2}, .a = {br, 1}, .p.conv = p},
            };
            td_segment *seg;
            cr_assert_eq(t.ops->segment_create(t.dev, calls, 2, &seg), TD_OK, "%s", td_last_error(t.ctx));
            cr_assert_eq(td_vulkan_segment_barrier_count(seg), 0, "independent calls");
            cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_OK);
            vt_sync(&t);
            t.ops->segment_destroy(t.dev, seg);
            vt_download(&t, bp, 1, cols, (size_t)np);
            vt_download(&t, bi, 2, img, (size_t)ni);
            td_reference_im2col(wcols, x + 3, &p);
            td_reference_col2im(wimg, rcols + 1, &p);
            char what[48];
            snprintf(what, sizeof what, "im2col geometry %zu", g);
            vt_expect_bitwise(cols, wcols, (size_t)np, what);
            snprintf(what, sizeof what, "col2im geometry %zu", g);
            vt_expect_bitwise(img, wimg, (size_t)ni, what);
            t.ops->buffer_destroy(t.dev, bx);
            t.ops->buffer_destroy(t.dev, bp);
            t.ops->buffer_destroy(t.dev, bi);
            t.ops->buffer_destroy(t.dev, br);
            free(rcols);
            free(x);
            free(cols);
            free(img);
            free(wcols);
            free(wimg);
        }
    }
    vt_fini(&t);
}

/* POOL then POOL_BACKWARD for max and both averages. Max (comparisons and
 * ordered sums) is bitwise; avg divides, which Vulkan allows 2.5 ulp:
 * within vt_expect_close's bound. */
Test(vulkan_backend, pool_and_backward)
{
    static const int64_t geos[][14] = {
        {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 1, 1, 1, 1}, {1, 8, 8, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1},
        {2, 4, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 3, 4, 2, 2, 2, 1, 2, 3, 3, 2, 3, 1, 1},
        {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1},
    };
    vt t;
    vt_init(&t);
    EACH_DEVICE(t)
    {
        reopen(&t, dev_i);
        for (size_t g = 0; g < sizeof geos / sizeof geos[0]; g++)
            for (int mode = 0; mode < 3; mode++) {
                td_pool_params pp = {.geo = vk_conv_geo(geos[g]), .mode = mode ? TD_POOL_AVG : TD_POOL_MAX,
                                     .count_include_pad = mode == 2};
                int64_t ni = td_conv_image_count(&pp.geo), no = td_conv_pooled_count(&pp.geo);
                float *x = vt_floats((size_t)ni), *gy = vt_floats((size_t)no), *y = vt_floats((size_t)no);
                float *gx = vt_floats((size_t)ni), *wy = vt_floats((size_t)no), *wgx = vt_floats((size_t)ni);
                vt_random(x, (size_t)ni, 80 + (uint32_t)g);
                vt_random(gy, (size_t)no, 90 + (uint32_t)g);
                for (int64_t i = 0; i < ni; i += 7)
                    x[i] = 0.75f; /* ties */
                x[4] = NAN;
                x[5] = -INFINITY;
                td_buffer *bx = vt_upload(&t, x, (size_t)ni), *bg = vt_upload(&t, gy, (size_t)no);
                td_buffer *by = vt_buffer(&t, (size_t)no + 4), *bgx = vt_buffer(&t, (size_t)ni + 1);
                td_kernel_call calls[2] = {
                    {.kernel = TD_KERNEL_POOL, .out = {by, 4}, .a = {bx, 0}, .p.pool = pp},
                    {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {bgx, 1}, .a = {bx, 0}, .b = {by, 4}, .c = {bg, 0},
                     .p.pool = pp},
                };
                cr_assert_eq(vt_run(&t, calls, 2), TD_OK, "%s", td_last_error(t.ctx));
                vt_download(&t, by, 4, y, (size_t)no);
                vt_download(&t, bgx, 1, gx, (size_t)ni);
                td_reference_pool(wy, x, &pp);
                /* The gradient is checked from the device's own y. */
                td_reference_pool_backward(wgx, x, y, gy, &pp);
                char what[64];
                snprintf(what, sizeof what, "pool mode %d geometry %zu", mode, g);
                (mode ? vt_expect_close : vt_expect_bitwise)(y, wy, (size_t)no, what);
                snprintf(what, sizeof what, "pool_backward mode %d geometry %zu", mode, g);
                (mode ? vt_expect_close : vt_expect_bitwise)(gx, wgx, (size_t)ni, what);
                t.ops->buffer_destroy(t.dev, bx);
                t.ops->buffer_destroy(t.dev, bg);
                t.ops->buffer_destroy(t.dev, by);
                t.ops->buffer_destroy(t.dev, bgx);
                free(x);
                free(gy);
                free(y);
                free(gx);
                free(wy);
                free(wgx);
            }
    }
    vt_fini(&t);
}

/* One argument past its buffer's end per kernel, a bad geometry, and
 * sizes beyond the shaders' 32-bit indices: statuses, never a dispatch. */
Test(vulkan_backend, conv_bad_arguments)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    td_buffer *buf = vt_buffer(&t, 1000);
    td_conv_params cp = {.n = 1, .h = 4, .w = 4, .c = 2, .kh = 3, .kw = 3, .oh = 4, .ow = 4, .stride_h = 1,
                         .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
    td_pool_params pp = {.geo = cp, .mode = TD_POOL_MAX};
    td_kernel_call cases[] = {
        {.kernel = TD_KERNEL_IM2COL, .out = {buf, 800}, .a = {buf, 0}, .p.conv = cp},
        {.kernel = TD_KERNEL_COL2IM, .out = {buf, 0}, .a = {buf, 713}, .p.conv = cp},
        {.kernel = TD_KERNEL_POOL, .out = {buf, 0}, .a = {buf, 969}, .p.pool = pp},
        {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {buf, 0}, .a = {buf, 0}, .b = {buf, 0}, .c = {buf, 980},
         .p.pool = pp},
    };
    td_segment *seg = NULL;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        td_kernel_call two[2] = {{.kernel = TD_KERNEL_FILL, .n = 1, .out = {buf, 0}}, cases[k]};
        cr_assert_eq(t.ops->segment_create(t.dev, two, 2, &seg), TD_ERR_INVALID_ARGUMENT);
        const char *msg = td_last_error(t.ctx);
        cr_assert(strstr(msg, "call 1") && strstr(msg, td_kernel_name(cases[k].kernel)), "%s", msg);
        cr_assert_null(seg);
    }
    td_kernel_call geo = {.kernel = TD_KERNEL_POOL, .out = {buf, 0}, .a = {buf, 0}, .p.pool = pp};
    geo.p.pool.geo.dil_h = 2;
    cr_assert_eq(t.ops->segment_create(t.dev, &geo, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    td_kernel_call huge = {.kernel = TD_KERNEL_IM2COL, .out = {buf, 0}, .a = {buf, 0}, .p.conv = cp};
    huge.p.conv.n = (int64_t)1 << 28; /* 2^28 * 288 patch elements */
    cr_assert_eq(t.ops->segment_create(t.dev, &huge, 1, &seg), TD_ERR_UNSUPPORTED);
    huge.p.conv.n = 1;
    huge.p.conv.stride_h = (int64_t)1 << 30; /* oy * stride_h beyond int32 */
    cr_assert_eq(t.ops->segment_create(t.dev, &huge, 1, &seg), TD_ERR_UNSUPPORTED);
    t.ops->buffer_destroy(t.dev, buf);
    vt_fini(&t);
}
