/* Runs every kernel case of the conformance suite (tests/kernels), copies
 * and staging with the Khronos validation layer on (meson sets
 * TD_VULKAN_VALIDATION=1) and requires zero warnings or errors from it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_conformance.h"
#include "td_vulkan.h"
#include "vk_test_util.h"

/* The whole conformance table on the device: the layer sees every kernel
 * with every binding it uses; the results must match the reference too. */
static void every_kernel_case(vt *t, uint32_t index)
{
    td_conformance_device d = {.ops = t->ops, .ctx = t->ctx, .dev = t->dev};
    snprintf(d.label, sizeof d.label, "vulkan:%u with validation", index);
    td_case_list cases = {0};
    td_cases_all(&cases);
    size_t failures = 0, ran = td_conformance_run(&d, 1, &cases, &failures);
    td_case_list_free(&cases);
    cr_assert_eq(failures, 0, "%zu of %zu kernel cases differ from the reference (listed above)", failures, ran);
}

Test(vulkan_validation, every_kernel_without_messages, .timeout = 600)
{
    const char *env = getenv("TD_VULKAN_VALIDATION");
    cr_assert(env != NULL && strcmp(env, "1") == 0, "run this test with TD_VULKAN_VALIDATION=1");
    vt t;
    vt_init(&t);
    for (uint32_t d = 0; d < t.device_count; d++) {
        vt_open(&t, d, 0);
        if (!td_vulkan_validation_active()) {
            vt_fini(&t);
            cr_skip_test("VK_LAYER_KHRONOS_validation is not installed");
        }
        every_kernel_case(&t, d);

        /* Staging paths and a copy, too. */
        td_staging *st;
        void *host;
        cr_assert_eq(t.ops->staging_create(t.dev, 4096, &st, &host), TD_OK, "%s", td_last_error(t.ctx));
        float *h = host;
        for (int i = 0; i < 512; i++)
            h[i] = (float)i;
        td_buffer *x = vt_buffer(&t, 512), *y = vt_buffer(&t, 512);
        cr_assert_eq(t.ops->write(t.dev, x, 0, h, 2048), TD_OK);
        cr_assert_eq(t.ops->copy(t.dev, x, 0, y, 0, 2048), TD_OK);
        cr_assert_eq(t.ops->read(t.dev, y, 0, h + 512, 2048), TD_OK);
        vt_sync(&t);
        for (int i = 0; i < 512; i++)
            cr_assert_eq(h[512 + i], (float)i);
        t.ops->buffer_destroy(t.dev, x);
        t.ops->buffer_destroy(t.dev, y);
        t.ops->staging_destroy(t.dev, st);
        t.ops->close(t.dev);
        t.dev = NULL;
    }
    uint32_t messages = td_vulkan_validation_message_count();
    vt_fini(&t);
    cr_assert_eq(messages, 0, "the validation layer reported %u messages (printed on stderr)", messages);
}
