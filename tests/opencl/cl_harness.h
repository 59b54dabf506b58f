/* Shared by the OpenCL backend tests: device setup inside each (forked)
 * test, upload/download, and comparisons against the CPU reference. */
#ifndef TD_TEST_CL_HARNESS_H
#define TD_TEST_CL_HARNESS_H

#include <criterion/criterion.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_backend.h"
#include "td_context_internal.h"
#include "td_reference.h"

static const td_backend_ops *const ops = &td_opencl_backend;

typedef struct harness {
    td_context *ctx;
    uint32_t count;
} harness;

static inline harness start(void)
{
    harness h = {0};
    cr_assert_eq(td_context_create(NULL, &h.ctx), TD_OK);
    td_backend_info info;
    cr_assert_eq(ops->probe(h.ctx, &info), TD_OK);
    if (!info.available) {
        td_context_destroy(h.ctx);
        cr_skip_test("no OpenCL device: %s", info.reason);
    }
    h.count = info.device_count;
    return h;
}

static inline td_device *open_dev(harness *h, uint32_t i)
{
    td_device *dev = NULL;
    td_status st = ops->open(h->ctx, i, 0, &dev);
    cr_assert_eq(st, TD_OK, "open(%u): %s", i, td_last_error(h->ctx));
    return dev;
}

static inline void finish(td_device *dev, td_context *ctx)
{
    uint64_t t;
    cr_assert_eq(ops->submit(dev, &t), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(ops->wait(dev, t, 60000), TD_OK, "%s", td_last_error(ctx));
}

static inline td_buffer *make_buf(td_device *dev, td_context *ctx, size_t elems, const void *data)
{
    td_buffer *b = NULL;
    cr_assert_eq(ops->buffer_create(dev, elems * 4, &b), TD_OK, "%s", td_last_error(ctx));
    if (data)
        cr_assert_eq(ops->write(dev, b, 0, data, elems * 4), TD_OK, "%s", td_last_error(ctx));
    return b;
}

static inline void download(td_device *dev, td_context *ctx, td_buffer *b, void *host, size_t elems)
{
    cr_assert_eq(ops->read(dev, b, 0, host, elems * 4), TD_OK, "%s", td_last_error(ctx));
    finish(dev, ctx);
}

static inline void run_calls(td_device *dev, td_context *ctx, const td_kernel_call *calls, size_t n)
{
    td_segment *seg = NULL;
    td_status st = ops->segment_create(dev, calls, n, &seg);
    cr_assert_eq(st, TD_OK, "segment_create: %s", td_last_error(ctx));
    cr_assert_eq(ops->segment_run(dev, seg), TD_OK, "segment_run: %s", td_last_error(ctx));
    finish(dev, ctx);
    ops->segment_destroy(dev, seg);
}

/* Each test runs in its own process: this state is per test. */
static uint32_t rng_state = 12345;
static inline float frand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static inline float *rand_floats(size_t n)
{
    float *v = malloc(n * sizeof *v + 4);
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

static inline void expect_bitwise(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        bool same = memcmp(&got[i], &want[i], 4) == 0 || (isnan(got[i]) && isnan(want[i]));
        cr_assert(same, "%s: element %zu: got %a want %a", what, i, (double)got[i], (double)want[i]);
    }
}

static inline void expect_close(const float *got, const float *want, size_t n, const char *what)
{
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        bool gn = isnan(got[i]), wn = isnan(want[i]);
        cr_assert_eq(gn, wn, "%s: NaN mismatch at %zu (got %g want %g)", what, i, (double)got[i],
                     (double)want[i]);
        bool gi = isinf(got[i]), wi = isinf(want[i]);
        cr_assert_eq(gi, wi, "%s: Inf mismatch at %zu (got %g want %g)", what, i, (double)got[i],
                     (double)want[i]);
        if (gn || gi)
            continue;
        double d = (double)got[i] - (double)want[i];
        err += d * d;
        norm += (double)want[i] * want[i];
    }
    double nmse = norm > 0 ? err / norm : err;
    cr_assert(nmse < 1e-10, "%s: normalised MSE %g", what, nmse);
}

#endif
