/* Every td_kernel_call on every OpenCL device, against the CPU reference. */
#include "cl_harness.h"
#include "td_test_compare.h"

/* Runs one call whose tensors all live in one buffer holding `host` (elems
 * floats), and compares the whole buffer with the reference applied to a
 * host copy, so that writes outside the outputs are caught too. */
typedef void (*reference_fn)(float *mem, const td_kernel_call *call);

/* CMP_ELEMENTWISE: the contract of the call's elementwise op (td_test_compare.h). */
typedef enum compare_mode { CMP_CLOSE = 0, CMP_BITWISE = 1, CMP_ELEMENTWISE = 2 } compare_mode;

static void check_call(td_device *dev, td_context *ctx, td_kernel_call call, float *host, size_t elems,
                       reference_fn ref, compare_mode mode, const char *what)
{
    td_buffer *buf = make_buf(dev, ctx, elems, host);
    float *want = malloc(elems * 4), *got = malloc(elems * 4);
    memcpy(want, host, elems * 4);
    ref(want, &call);
    call.out.buffer = buf;
    call.out2.buffer = buf;
    call.a.buffer = buf;
    call.b.buffer = buf;
    call.c.buffer = buf;
    run_calls(dev, ctx, &call, 1);
    download(dev, ctx, buf, got, elems);
    if (mode == CMP_ELEMENTWISE) {
        int64_t bad = td_test_ew_first_mismatch(call.p.ew.op, got, want, elems);
        cr_assert(bad < 0, "%s (%s): element %lld: got %a want %a", what, td_ew_name(call.p.ew.op), (long long)bad,
                  bad < 0 ? 0.0 : (double)got[bad], bad < 0 ? 0.0 : (double)want[bad]);
    } else if (mode == CMP_BITWISE) {
        expect_bitwise(got, want, elems, what);
    } else {
        expect_close(got, want, elems, what);
    }
    ops->buffer_destroy(dev, buf);
    free(want);
    free(got);
}

static void ref_fill(float *m, const td_kernel_call *c)
{
    td_reference_fill(m + c->out.offset, c->n, c->alpha);
}
static void ref_copy(float *m, const td_kernel_call *c)
{
    td_reference_copy(m + c->out.offset, m + c->a.offset, c->n);
}
static void ref_ew(float *m, const td_kernel_call *c)
{
    td_reference_elementwise(m + c->out.offset, m + c->a.offset, m + c->b.offset, &c->p.ew);
}
static void ref_reduce(float *m, const td_kernel_call *c)
{
    td_reference_reduce(m + c->out.offset, m + c->a.offset, &c->p.reduce);
}
static void ref_gemm(float *m, const td_kernel_call *c)
{
    td_reference_gemm(m + c->out.offset, m + c->a.offset, m + c->b.offset, &c->p.gemm);
}
static void ref_xent_fwd(float *m, const td_kernel_call *c)
{
    td_reference_xent_forward(m + c->out.offset, m + c->out2.offset, m + c->a.offset,
                              (const int32_t *)(m + c->b.offset), &c->p.xent);
}
static void ref_xent_bwd(float *m, const td_kernel_call *c)
{
    td_reference_xent_backward(m + c->out.offset, m + c->a.offset, (const int32_t *)(m + c->b.offset),
                               m + c->c.offset, &c->p.xent);
}

Test(opencl_kernels, fill_and_copy)
{
    harness h = start();
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        float *mem = rand_floats(3000);
        td_kernel_call fill = {.kernel = TD_KERNEL_FILL, .n = 1001, .alpha = -2.5f, .out = {NULL, 37}};
        check_call(dev, h.ctx, fill, mem, 3000, ref_fill, CMP_BITWISE, "fill");
        td_kernel_call copy = {.kernel = TD_KERNEL_COPY, .n = 1234, .out = {NULL, 1500}, .a = {NULL, 3}};
        check_call(dev, h.ctx, copy, mem, 3000, ref_copy, CMP_BITWISE, "copy");
        td_kernel_call self = {.kernel = TD_KERNEL_COPY, .n = 100, .out = {NULL, 5}, .a = {NULL, 5}};
        check_call(dev, h.ctx, self, mem, 3000, ref_copy, CMP_BITWISE, "copy onto itself");
        td_kernel_call empty = {.kernel = TD_KERNEL_FILL, .n = 0, .out = {NULL, 0}};
        check_call(dev, h.ctx, empty, mem, 3000, ref_fill, CMP_BITWISE, "empty fill");
        free(mem);
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

static void set4(int64_t *dst, int64_t a, int64_t b, int64_t c, int64_t d)
{
    dst[0] = a;
    dst[1] = b;
    dst[2] = c;
    dst[3] = d;
}

Test(opencl_kernels, elementwise_every_op)
{
    harness h = start();
    const size_t elems = 4096;
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        float *mem = rand_floats(elems);
        /* Special values where ops disagree most easily. */
        mem[10] = NAN;
        mem[11] = INFINITY;
        mem[12] = -INFINITY;
        mem[13] = -0.0f;
        mem[14] = 0.0f;
        mem[15] = 1e-40f; /* subnormal */
        mem[16] = 3.4e38f;
        for (int op = 0; op < TD_EW_OP_COUNT; op++) {
            char what[64];
            /* Dense: out[2000..2000+2*3*5*7) = f(a[7..], b[300..]) */
            td_kernel_call c = {.kernel = TD_KERNEL_ELEMENTWISE, .out = {NULL, 2000}, .a = {NULL, 7},
                                .b = {NULL, 300}};
            c.p.ew.op = op;
            c.p.ew.alpha = 0.37f;
            set4(c.p.ew.dims, 2, 3, 5, 7);
            set4(c.p.ew.a_strides, 105, 35, 7, 1);
            set4(c.p.ew.b_strides, 105, 35, 7, 1);
            snprintf(what, sizeof what, "ew op %d dense", op);
            check_call(dev, h.ctx, c, mem, elems, ref_ew, CMP_ELEMENTWISE, what);
            /* Broadcasting: b is a row vector [7] broadcast over rows, a
             * a column [3] broadcast over the last axis, a transposed view. */
            set4(c.p.ew.a_strides, 0, 1, 0, 0);
            set4(c.p.ew.b_strides, 0, 0, 0, 1);
            c.a.offset = 9;
            snprintf(what, sizeof what, "ew op %d broadcast", op);
            check_call(dev, h.ctx, c, mem, elems, ref_ew, CMP_ELEMENTWISE, what);
            set4(c.p.ew.a_strides, 1, 2, 6 * 7, 6);
            set4(c.p.ew.b_strides, 0, 7, 0, 1);
            snprintf(what, sizeof what, "ew op %d transposed", op);
            check_call(dev, h.ctx, c, mem, elems, ref_ew, CMP_ELEMENTWISE, what);
            /* In place: out aliases a exactly. */
            set4(c.p.ew.dims, 1, 1, 1, 999);
            set4(c.p.ew.a_strides, 0, 0, 0, 1);
            set4(c.p.ew.b_strides, 0, 0, 0, 1);
            c.out.offset = 3000;
            c.a.offset = 3000;
            snprintf(what, sizeof what, "ew op %d in place", op);
            check_call(dev, h.ctx, c, mem, elems, ref_ew, CMP_ELEMENTWISE, what);
        }
        free(mem);
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

Test(opencl_kernels, reduce_axes)
{
    harness h = start();
    const size_t elems = 70000;
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        float *mem = rand_floats(elems);
        td_kernel_call c = {.kernel = TD_KERNEL_REDUCE, .out = {NULL, 60000}, .a = {NULL, 3}};
        c.p.reduce.alpha = 0.5f;
        /* a viewed as [4][6][10][25] at offset 3 (6000 elements). */
        struct {
            int64_t od[4], os[4], rd[4], rs[4];
            const char *what;
        } cases[] = {
            {{4, 6, 10, 1}, {1500, 250, 25, 0}, {1, 1, 1, 25}, {0, 0, 0, 1}, "last axis"},
            {{1, 6, 10, 25}, {0, 250, 25, 1}, {1, 1, 1, 4}, {0, 0, 0, 1500}, "first axis"},
            {{1, 1, 6, 1}, {0, 0, 250, 0}, {4, 10, 25, 1}, {1500, 25, 1, 0}, "all but axis 1"},
            {{1, 1, 1, 1}, {0, 0, 0, 0}, {4, 6, 10, 25}, {1500, 250, 25, 1}, "everything (small)"},
            {{1, 1, 1, 1}, {0, 0, 0, 0}, {1, 1, 1, 0}, {0, 0, 0, 1}, "empty reduction"},
            {{1, 1, 25, 10}, {0, 0, 1, 25}, {1, 4, 6, 1}, {0, 1500, 250, 0}, "transposed out"},
            {{1, 1, 1, 1}, {0, 0, 0, 0}, {1, 1, 1, 50000}, {0, 0, 0, 1}, "long sum (two passes)"},
            {{1, 1, 1, 3}, {0, 0, 0, 1}, {1, 1, 16000, 1}, {0, 0, 3, 0}, "long strided sums"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            memcpy(c.p.reduce.out_dims, cases[i].od, sizeof cases[i].od);
            memcpy(c.p.reduce.out_strides, cases[i].os, sizeof cases[i].os);
            memcpy(c.p.reduce.red_dims, cases[i].rd, sizeof cases[i].rd);
            memcpy(c.p.reduce.red_strides, cases[i].rs, sizeof cases[i].rs);
            check_call(dev, h.ctx, c, mem, elems, ref_reduce, CMP_CLOSE, cases[i].what);
        }
        free(mem);
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

/* GEMM cases with awkward sizes; A at offset 5, B after it, C at the end
 * with a padded ldc. C starts as NaN where beta == 0 (must not propagate). */
static void gemm_cases(td_device *dev, td_context *ctx, const int64_t (*shapes)[3], size_t nshapes,
                       bool all_transposes)
{
    for (size_t s = 0; s < nshapes; s++)
        for (int t = 0; t < 4; t++) {
            if (!all_transposes && t != (int)(s % 4))
                continue;
            for (int beta1 = 0; beta1 < 2; beta1++) {
                int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                td_gemm_params p = {.trans_a = t >> 1, .trans_b = t & 1, .m = m, .n = n, .k = k,
                                    .alpha = 1.25f, .beta = beta1 ? 1.0f : 0.0f};
                p.lda = (p.trans_a ? m : k) + 1;
                p.ldb = (p.trans_b ? k : n) + 2;
                p.ldc = n + 3;
                size_t asz = (size_t)((p.trans_a ? k : m) * p.lda), bsz = (size_t)((p.trans_b ? n : k) * p.ldb);
                size_t csz = (size_t)(m * p.ldc);
                size_t elems = 5 + asz + bsz + csz + 8;
                float *mem = rand_floats(elems);
                td_kernel_call c = {.kernel = TD_KERNEL_GEMM, .a = {NULL, 5}, .b = {NULL, 5 + asz},
                                    .out = {NULL, 5 + asz + bsz}, .p.gemm = p};
                if (!beta1)
                    for (size_t i = 0; i < csz; i++)
                        mem[5 + asz + bsz + i] = NAN;
                char what[96];
                snprintf(what, sizeof what, "gemm %lldx%lldx%lld trans %d%d beta %d", (long long)m,
                         (long long)n, (long long)k, t >> 1, t & 1, beta1);
                check_call(dev, ctx, c, mem, elems, ref_gemm, CMP_CLOSE, what);
                free(mem);
            }
        }
}

Test(opencl_kernels, gemm_own_kernel)
{
    harness h = start();
    setenv("TD_OPENCL_GEMM", "own", 1);
    static const int64_t shapes[][3] = {{1, 1, 1}, {7, 1, 33}, {1, 130, 7}, {33, 7, 130},
                                        {130, 33, 1}, {33, 130, 7}, {64, 64, 64}, {5, 6, 0}};
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        gemm_cases(dev, h.ctx, shapes, sizeof shapes / sizeof shapes[0], true);
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

/* CLBlast compiles its kernels per program variant (~20 s each, cold): a
 * few shapes on one device cover the direct path and the transposes. */
Test(opencl_kernels, gemm_clblast)
{
    harness h = start();
    setenv("TD_OPENCL_GEMM", "clblast", 1);
    static const int64_t shapes[][3] = {{7, 33, 130}, {130, 7, 33}, {1, 1, 1}, {33, 130, 7}, {520, 260, 300}};
    td_device *dev = open_dev(&h, 0);
    gemm_cases(dev, h.ctx, shapes, sizeof shapes / sizeof shapes[0], false);
    ops->close(dev);
    td_context_destroy(h.ctx);
}

Test(opencl_kernels, xent_forward_backward)
{
    harness h = start();
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        const int64_t rows = 37, cols = 10;
        const size_t elems = 4000;
        float *mem = rand_floats(elems);
        for (size_t i = 0; i < (size_t)(rows * cols); i++)
            mem[11 + i] *= 8.0f; /* logits of some spread */
        int32_t *labels = (int32_t *)(mem + 1000);
        for (int64_t r = 0; r < rows; r++)
            labels[r] = (int32_t)(r % cols);
        labels[3] = (int32_t)cols; /* out of range: that row's loss is NaN */
        labels[4] = -1;
        td_kernel_call f = {.kernel = TD_KERNEL_XENT_FORWARD, .out = {NULL, 2000}, .out2 = {NULL, 2100},
                            .a = {NULL, 11}, .b = {NULL, 1000}, .p.xent = {rows, cols}};
        check_call(dev, h.ctx, f, mem, elems, ref_xent_fwd, CMP_CLOSE, "xent forward");
        labels[3] = 2;
        labels[4] = 9;
        for (size_t i = 0; i < (size_t)(rows * cols); i++)
            mem[2100 + i] = fabsf(mem[2100 + i]);
        td_kernel_call b = {.kernel = TD_KERNEL_XENT_BACKWARD, .out = {NULL, 3000}, .a = {NULL, 2100},
                            .b = {NULL, 1000}, .c = {NULL, 1100}, .p.xent = {rows, cols}};
        check_call(dev, h.ctx, b, mem, elems, ref_xent_bwd, CMP_BITWISE, "xent backward");
        free(mem);
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

/* A segment of several calls, run twice: steady-state re-enqueue. */
Test(opencl_kernels, segment_runs_repeatedly)
{
    harness h = start();
    td_device *dev = open_dev(&h, h.count - 1);
    const int64_t n = 1000;
    td_buffer *x = make_buf(dev, h.ctx, (size_t)n, NULL), *y = make_buf(dev, h.ctx, (size_t)n, NULL);
    td_kernel_call calls[2] = {
        {.kernel = TD_KERNEL_FILL, .n = n, .alpha = 2.0f, .out = {x, 0}},
        {.kernel = TD_KERNEL_ELEMENTWISE, .out = {y, 0}, .a = {y, 0}, .b = {x, 0},
         .p.ew = {.op = TD_EW_AXPY, .alpha = 0.5f, .dims = {1, 1, 1, n}, .a_strides = {0, 0, 0, 1},
                  .b_strides = {0, 0, 0, 1}}},
    };
    td_kernel_call zero = {.kernel = TD_KERNEL_FILL, .n = n, .alpha = 0.0f, .out = {y, 0}};
    run_calls(dev, h.ctx, &zero, 1);
    td_segment *seg;
    cr_assert_eq(ops->segment_create(dev, calls, 2, &seg), TD_OK, "%s", td_last_error(h.ctx));
    for (int r = 0; r < 3; r++)
        cr_assert_eq(ops->segment_run(dev, seg), TD_OK);
    float out[1000];
    download(dev, h.ctx, y, out, (size_t)n);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(out[i], 3.0f);
    ops->segment_destroy(dev, seg);
    ops->buffer_destroy(dev, x);
    ops->buffer_destroy(dev, y);
    ops->close(dev);
    td_context_destroy(h.ctx);
}

/* ---- row kernels ---- */

static void ref_softmax(float *m, const td_kernel_call *c)
{
    td_reference_softmax(m + c->out.offset, m + c->a.offset, &c->p.rows);
}
static void ref_argmax(float *m, const td_kernel_call *c)
{
    td_reference_argmax(m + c->out.offset, m + c->a.offset, &c->p.rows);
}
static void ref_cast(float *m, const td_kernel_call *c)
{
    td_reference_cast(m + c->out.offset, m + c->a.offset, &c->p.cast);
}
static void ref_dropout(float *m, const td_kernel_call *c)
{
    td_reference_dropout_mask(m + c->out.offset, (const uint32_t *)(m + c->b.offset), &c->p.dropout);
}
static void ref_gather(float *m, const td_kernel_call *c)
{
    td_reference_gather_rows(m + c->out.offset, m + c->a.offset, (const int32_t *)(m + c->b.offset), &c->p.gather);
}
static void ref_scatter(float *m, const td_kernel_call *c)
{
    td_reference_scatter_add_rows(m + c->out.offset, m + c->a.offset, (const int32_t *)(m + c->b.offset),
                                  &c->p.gather);
}

/* Softmax calls exp and log, which devices round differently (OpenCL
 * allows 3 ulp): per element, NaN and infinities in the same places, else
 * within 1e-5 relative plus 1e-6 absolute. */
static void run_softmax_close(td_device *dev, td_context *ctx, td_kernel_call c, float *host, size_t elems,
                              const char *what)
{
    td_buffer *buf = make_buf(dev, ctx, elems, host);
    float *want = malloc(elems * 4), *got = malloc(elems * 4);
    memcpy(want, host, elems * 4);
    ref_softmax(want, &c);
    c.out.buffer = c.a.buffer = buf;
    run_calls(dev, ctx, &c, 1);
    download(dev, ctx, buf, got, elems);
    for (size_t i = 0; i < elems; i++) {
        bool ok = isnan(want[i]) ? isnan(got[i])
                  : isinf(want[i]) ? got[i] == want[i]
                                   : fabs((double)got[i] - want[i]) <= 1e-5 * fabs((double)want[i]) + 1e-6;
        cr_assert(ok, "%s: element %zu: got %a want %a", what, i, (double)got[i], (double)want[i]);
    }
    ops->buffer_destroy(dev, buf);
    free(want);
    free(got);
}

Test(opencl_kernels, row_kernels)
{
    harness h = start();
    const size_t elems = 8192;
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        float *mem = rand_floats(elems);
        for (size_t i = 0; i < 4000; i++)
            mem[i] *= 10.0f;
        /* Row 2 of the 37 x 10 view at 11: a NaN and a -inf; row 5: all -inf. */
        mem[11 + 2 * 10 + 3] = NAN;
        mem[11 + 2 * 10 + 4] = -INFINITY;
        for (int j = 0; j < 10; j++)
            mem[11 + 5 * 10 + j] = -INFINITY;
        mem[11 + 7 * 10 + 1] = -INFINITY;
        for (int mode = 0; mode < 2; mode++) {
            td_kernel_call sm = {.kernel = TD_KERNEL_SOFTMAX, .out = {NULL, 5000}, .a = {NULL, 11},
                                 .p.rows = {37, 10, mode}};
            run_softmax_close(dev, h.ctx, sm, mem, elems, mode ? "log-softmax 37x10" : "softmax 37x10");
            sm.p.rows = (td_rows_params){3, 1000, mode};
            run_softmax_close(dev, h.ctx, sm, mem, elems, mode ? "log-softmax 3x1000" : "softmax 3x1000");
        }
        /* Argmax on integers (ties) with the NaN rows above. */
        float *ints = rand_floats(elems);
        for (size_t i = 0; i < elems; i++)
            ints[i] = i >= 11 && i < 11 + 370 && !isfinite(mem[i]) ? mem[i] : floorf(ints[i] * 8.0f);
        td_kernel_call am = {.kernel = TD_KERNEL_ARGMAX, .out = {NULL, 7000}, .a = {NULL, 11},
                             .p.rows = {37, 10, 0}};
        check_call(dev, h.ctx, am, ints, elems, ref_argmax, CMP_BITWISE, "argmax 37x10");
        am.p.rows = (td_rows_params){3, 0, 0};
        check_call(dev, h.ctx, am, ints, elems, ref_argmax, CMP_BITWISE, "argmax of empty rows");
        free(ints);

        /* Casts: bytes from element 13 (byte 52), odd count; i32 specials. */
        int32_t *words = (int32_t *)mem;
        const int32_t specials[] = {16777217, 16777219, -16777219, INT32_MAX, INT32_MIN, 33554435, -1, 0};
        memcpy(words + 100, specials, sizeof specials);
        td_kernel_call cu8 = {.kernel = TD_KERNEL_CAST, .out = {NULL, 3000}, .a = {NULL, 13},
                              .p.cast = {1001, TD_CAST_U8}};
        check_call(dev, h.ctx, cu8, mem, elems, ref_cast, CMP_BITWISE, "cast u8");
        td_kernel_call ci32 = {.kernel = TD_KERNEL_CAST, .out = {NULL, 3000}, .a = {NULL, 100},
                               .p.cast = {333, TD_CAST_I32}};
        check_call(dev, h.ctx, ci32, mem, elems, ref_cast, CMP_BITWISE, "cast i32");

        /* Dropout: 13 x 7 (a partial Philox block per row), examples from
         * 2^32 - 5 (wrapping). */
        uint32_t *u = (uint32_t *)mem;
        u[4000] = 17;
        u[4001] = 0xfffffffbu;
        td_kernel_call dm = {.kernel = TD_KERNEL_DROPOUT_MASK, .out = {NULL, 6000}, .b = {NULL, 4000},
                             .p.dropout = {13, 7, 0xdeadbeefu, 0x12345678u, 3006477107u, 1.0f / 0.7f}};
        check_call(dev, h.ctx, dm, mem, elems, ref_dropout, CMP_BITWISE, "dropout mask 13x7");
        dm.p.dropout.rows = 30;
        dm.p.dropout.cols = 64;
        check_call(dev, h.ctx, dm, mem, elems, ref_dropout, CMP_BITWISE, "dropout mask 30x64");

        /* Gather and scatter: table [50, 9] at 1, ids at 4100 (repeats and
         * ids outside [0, 50)), g [61, 9] at 500. */
        int32_t *ids = (int32_t *)(mem + 4100);
        for (int i = 0; i < 61; i++)
            ids[i] = (i * 7) % 53 - 1;
        ids[10] = INT32_MIN;
        td_kernel_call ga = {.kernel = TD_KERNEL_GATHER_ROWS, .out = {NULL, 5000}, .a = {NULL, 1},
                             .b = {NULL, 4100}, .p.gather = {61, 50, 9}};
        check_call(dev, h.ctx, ga, mem, elems, ref_gather, CMP_BITWISE, "gather rows");
        td_kernel_call sc = {.kernel = TD_KERNEL_SCATTER_ADD_ROWS, .out = {NULL, 5000}, .a = {NULL, 500},
                             .b = {NULL, 4100}, .p.gather = {61, 50, 9}};
        check_call(dev, h.ctx, sc, mem, elems, ref_scatter, CMP_BITWISE, "scatter-add rows");
        free(mem);
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

/* Each row kernel with one argument past its buffer's end: a status naming
 * the call and the kernel, never a launch. */
Test(opencl_kernels, row_kernels_bad_arguments)
{
    harness h = start();
    td_device *dev = open_dev(&h, 0);
    td_buffer *buf = make_buf(dev, h.ctx, 100, NULL);
    td_arg at0 = {buf, 0}, past = {buf, 95};
    td_kernel_call calls[] = {
        {.kernel = TD_KERNEL_SOFTMAX, .out = past, .a = at0, .p.rows = {2, 5, 0}},
        {.kernel = TD_KERNEL_ARGMAX, .out = at0, .a = past, .p.rows = {2, 5, 0}},
        {.kernel = TD_KERNEL_CAST, .out = at0, .a = {buf, 98}, .p.cast = {9, TD_CAST_U8}},
        {.kernel = TD_KERNEL_DROPOUT_MASK, .out = at0, .b = {buf, 99}, .p.dropout = {1, 4, 0, 0, 1u << 31, 2.0f}},
        {.kernel = TD_KERNEL_GATHER_ROWS, .out = at0, .a = past, .b = at0, .p.gather = {2, 3, 2}},
        {.kernel = TD_KERNEL_SCATTER_ADD_ROWS, .out = at0, .a = at0, .b = {buf, 101}, .p.gather = {2, 3, 2}},
        {.kernel = TD_KERNEL_SOFTMAX, .out = at0, .a = at0, .p.rows = {2, 5, 3}},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        td_segment *seg = NULL;
        cr_assert_eq(ops->segment_create(dev, &calls[i], 1, &seg), TD_ERR_INVALID_ARGUMENT, "call %zu", i);
        const char *msg = td_last_error(h.ctx);
        cr_assert(strstr(msg, td_kernel_name(calls[i].kernel)) && strstr(msg, "call 0"), "%s", msg);
        cr_assert_null(seg);
    }
    ops->buffer_destroy(dev, buf);
    ops->close(dev);
    td_context_destroy(h.ctx);
}

/* ---- convolution and pooling ---- */

static void ref_im2col(float *m, const td_kernel_call *c)
{
    td_reference_im2col(m + c->out.offset, m + c->a.offset, &c->p.conv);
}
static void ref_col2im(float *m, const td_kernel_call *c)
{
    td_reference_col2im(m + c->out.offset, m + c->a.offset, &c->p.conv);
}
static void ref_pool(float *m, const td_kernel_call *c)
{
    td_reference_pool(m + c->out.offset, m + c->a.offset, &c->p.pool);
}
static void ref_pool_bwd(float *m, const td_kernel_call *c)
{
    td_reference_pool_backward(m + c->out.offset, m + c->a.offset, m + c->b.offset, m + c->c.offset, &c->p.pool);
}

/* n, h, w, c, kh, kw, stride h/w, padding top/bottom/left/right, dilation h/w */
static const int64_t conv_geos[][14] = {
    {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 2, 0, 1, 2}, /* strides 2x3, dilation 1x2, asymmetric padding */
    {1, 9, 8, 2, 3, 3, 3, 2, 0, 1, 1, 2, 2, 2}, /* dilation 2 */
    {3, 4, 6, 1, 2, 2, 1, 1, 4, 3, 5, 4, 1, 1}, /* padding larger than the window */
    {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1}, /* window = image */
    {2, 5, 3, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1}, /* 1x1 */
    {1, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, /* 3x3 SAME: nine terms per pixel */
    {1, 7, 7, 1, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2}, /* dilation 2, stride 1 */
};
static const int64_t pool_geos[][14] = {
    {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 1, 1, 1, 1}, /* 3x2 window, strides 2x3, asymmetric padding */
    {1, 8, 8, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1}, /* 2x2 stride 2 */
    {2, 4, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, /* 3x3 SAME */
    {1, 3, 4, 2, 2, 2, 1, 2, 3, 3, 2, 3, 1, 1}, /* windows wholly in padding */
    {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1}, /* window = image */
};

/* rand_floats gives multiples of 2^-15, whose short sums are exact in any
 * order; full-width mantissas make a wrong summation order show. */
static float *conv_floats(size_t n)
{
    float *v = rand_floats(n);
    for (size_t i = 0; i < n; i++)
        v[i] *= 1.0f + 0.3183099f * (float)(i % 11);
    return v;
}

static td_conv_params conv_geo(const int64_t *g)
{
    td_conv_params p = {.n = g[0], .h = g[1], .w = g[2], .c = g[3], .kh = g[4], .kw = g[5], .stride_h = g[6],
                        .stride_w = g[7], .pad_top = g[8], .pad_left = g[10], .dil_h = g[12], .dil_w = g[13]};
    int64_t span_h = g[12] * (g[4] - 1) + 1, span_w = g[13] * (g[5] - 1) + 1;
    p.oh = (g[1] + g[8] + g[9] - span_h) / g[6] + 1;
    p.ow = (g[2] + g[10] + g[11] - span_w) / g[7] + 1;
    return p;
}

Test(opencl_kernels, im2col_col2im)
{
    harness h = start();
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        for (size_t g = 0; g < sizeof conv_geos / sizeof conv_geos[0]; g++) {
            td_conv_params p = conv_geo(conv_geos[g]);
            int64_t ni = td_conv_image_count(&p), np = td_conv_patch_count(&p);
            size_t elems = (size_t)(ni + np + 16);
            float *mem = conv_floats(elems);
            char what[64];
            snprintf(what, sizeof what, "im2col geometry %zu", g);
            td_kernel_call fwd = {.kernel = TD_KERNEL_IM2COL, .out = {NULL, 9 + (uint64_t)ni}, .a = {NULL, 3},
                                  .p.conv = p};
            check_call(dev, h.ctx, fwd, mem, elems, ref_im2col, CMP_BITWISE, what);
            /* The gather adds in the reference's order: bitwise too. */
            snprintf(what, sizeof what, "col2im geometry %zu", g);
            td_kernel_call bwd = {.kernel = TD_KERNEL_COL2IM, .out = {NULL, 3}, .a = {NULL, 9 + (uint64_t)ni},
                                  .p.conv = p};
            check_call(dev, h.ctx, bwd, mem, elems, ref_col2im, CMP_BITWISE, what);
            free(mem);
        }
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

/* Max pooling and its gradient use only comparisons and additions in the
 * contract's order: bitwise. Average pooling divides, which OpenCL allows
 * 2.5 ulp: within expect_close's bound. */
Test(opencl_kernels, pool_and_backward)
{
    harness h = start();
    for (uint32_t d = 0; d < h.count; d++) {
        td_device *dev = open_dev(&h, d);
        for (size_t g = 0; g < sizeof pool_geos / sizeof pool_geos[0]; g++)
            for (int mode = 0; mode < 3; mode++) {
                td_pool_params pp = {.geo = conv_geo(pool_geos[g]), .mode = mode ? TD_POOL_AVG : TD_POOL_MAX,
                                     .count_include_pad = mode == 2};
                int64_t ni = td_conv_image_count(&pp.geo), no = td_conv_pooled_count(&pp.geo);
                uint64_t x_off = 3, y_off = x_off + (uint64_t)ni + 2, gy_off = y_off + (uint64_t)no + 2,
                         gx_off = gy_off + (uint64_t)no + 2;
                size_t elems = gx_off + (size_t)ni + 5;
                float *mem = conv_floats(elems);
                for (int64_t i = 0; i < ni; i += 7)
                    mem[x_off + (uint64_t)i] = 0.75f; /* ties */
                mem[x_off + 4] = NAN;
                mem[x_off + 5] = -INFINITY;
                char what[64];
                snprintf(what, sizeof what, "pool mode %d geometry %zu", mode, g);
                td_kernel_call fwd = {.kernel = TD_KERNEL_POOL, .out = {NULL, y_off}, .a = {NULL, x_off}, .p.pool = pp};
                check_call(dev, h.ctx, fwd, mem, elems, ref_pool, mode ? CMP_CLOSE : CMP_BITWISE, what);
                ref_pool(mem, &fwd); /* y as the forward pass left it */
                snprintf(what, sizeof what, "pool_backward mode %d geometry %zu", mode, g);
                td_kernel_call bwd = {.kernel = TD_KERNEL_POOL_BACKWARD, .out = {NULL, gx_off}, .a = {NULL, x_off},
                                      .b = {NULL, y_off}, .c = {NULL, gy_off}, .p.pool = pp};
                check_call(dev, h.ctx, bwd, mem, elems, ref_pool_bwd, mode ? CMP_CLOSE : CMP_BITWISE, what);
                free(mem);
            }
        ops->close(dev);
    }
    td_context_destroy(h.ctx);
}

/* One argument past its buffer's end per kernel: a status naming the call
 * and the kernel, and no launch. */
Test(opencl_kernels, conv_bad_arguments)
{
    harness h = start();
    td_device *dev = open_dev(&h, 0);
    td_buffer *buf = make_buf(dev, h.ctx, 1000, NULL);
    td_conv_params cp = {.n = 1, .h = 4, .w = 4, .c = 2, .kh = 3, .kw = 3, .oh = 4, .ow = 4, .stride_h = 1,
                         .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
    td_pool_params pp = {.geo = cp, .mode = TD_POOL_MAX};
    /* Patches: 288 elements; image and pooled output: 32. */
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
        cr_assert_eq(ops->segment_create(dev, two, 2, &seg), TD_ERR_INVALID_ARGUMENT, "%s",
                     td_kernel_name(cases[k].kernel));
        const char *msg = td_last_error(h.ctx);
        cr_assert(strstr(msg, "call 1") && strstr(msg, td_kernel_name(cases[k].kernel)), "%s", msg);
        cr_assert_null(seg);
    }
    td_kernel_call geo = {.kernel = TD_KERNEL_POOL, .out = {buf, 0}, .a = {buf, 0}, .p.pool = pp};
    geo.p.pool.geo.stride_w = 0;
    cr_assert_eq(ops->segment_create(dev, &geo, 1, &seg), TD_ERR_INVALID_ARGUMENT);
    ops->buffer_destroy(dev, buf);
    ops->close(dev);
    td_context_destroy(h.ctx);
}
