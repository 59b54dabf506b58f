/* Helpers shared by the Vulkan backend tests: a device opened inside the
 * test (never before Criterion forks), uploads/downloads, one-shot segment
 * runs, deterministic data and a bitwise comparison. */
#ifndef TD_VK_TEST_UTIL_H
#define TD_VK_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "td_backend.h"
#include "td_context_internal.h"

typedef struct vt {
    td_context *ctx;
    const td_backend_ops *ops;
    td_device *dev;
    uint32_t device_count;
} vt;

/* Creates a context and probes; skips the test when no Vulkan device. */
void vt_init(vt *t);
/* Opens (index, instance) into t->dev; fails the test on error. */
void vt_open(vt *t, uint32_t index, uint32_t instance);
void vt_fini(vt *t);

td_buffer *vt_buffer(vt *t, size_t floats);
td_buffer *vt_upload(vt *t, const void *data, size_t floats);
void vt_write(vt *t, td_buffer *buf, size_t offset_floats, const void *data, size_t floats);
void vt_download(vt *t, td_buffer *buf, size_t offset_floats, void *out, size_t floats);
void vt_sync(vt *t);
/* segment_create + run + submit + wait + destroy; returns the status of
 * segment_create (the rest must succeed). */
td_status vt_run(vt *t, const td_kernel_call *calls, size_t count);

/* Deterministic data: uniform in [-1, 1). */
void vt_random(float *x, size_t n, uint32_t seed);
float *vt_floats(size_t n); /* malloc, aborts the test on failure */

/* Asserts bitwise equality; any NaN matches any NaN. */
void vt_expect_bitwise(const float *got, const float *want, size_t n, const char *what);

#endif
