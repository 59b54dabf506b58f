/* Shared helpers of the Vulkan backend tests (see vk_test_util.h). */
#include "vk_test_util.h"

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
    td_backend_info info = {.struct_size = sizeof(td_backend_info)};
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
