/* VK_ERROR_DEVICE_LOST cannot be provoked on purpose, so this reaches into
 * the backend (vk_internal.h) and reports one as a driver call would; every
 * later call on that device must then fail fast with TD_ERR_DEVICE_LOST,
 * while a second device stays usable. */
#include <criterion/criterion.h>
#include <string.h>

#include "vk_internal.h"
#include "vk_test_util.h"

Test(vulkan_lost, later_calls_fail_fast)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    td_device *other = NULL;
    cr_assert_eq(t.ops->open(t.ctx, 0, 1, &other), TD_OK);
    td_buffer *buf = vt_buffer(&t, 64);
    td_kernel_call fill = {.kernel = TD_KERNEL_FILL, .n = 64, .out = {buf, 0}};
    td_segment *seg;
    cr_assert_eq(t.ops->segment_create(t.dev, &fill, 1, &seg), TD_OK);

    cr_assert_eq(td_vk_fail(t.ctx, t.dev, "vkQueueSubmit", VK_ERROR_DEVICE_LOST), TD_ERR_DEVICE_LOST);
    cr_assert(strstr(td_last_error(t.ctx), "vkQueueSubmit: VK_ERROR_DEVICE_LOST") != NULL, "%s",
              td_last_error(t.ctx));

    float host[64];
    uint64_t ticket;
    td_buffer *b2 = NULL;
    td_segment *s2 = NULL;
    cr_assert_eq(t.ops->write(t.dev, buf, 0, host, sizeof host), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->read(t.dev, buf, 0, host, sizeof host), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->copy(t.dev, buf, 0, buf, 128, 64), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->segment_run(t.dev, seg), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->segment_create(t.dev, &fill, 1, &s2), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->buffer_create(t.dev, 64, &b2), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->submit(t.dev, &ticket), TD_ERR_DEVICE_LOST);
    cr_assert_eq(t.ops->wait(t.dev, 0, 10), TD_ERR_DEVICE_LOST);
    cr_assert(strstr(td_last_error(t.ctx), "lost") != NULL, "%s", td_last_error(t.ctx));

    /* The other logical device is unaffected. */
    td_buffer *ob;
    cr_assert_eq(t.ops->buffer_create(other, sizeof host, &ob), TD_OK);
    cr_assert_eq(t.ops->write(other, ob, 0, host, sizeof host), TD_OK);
    cr_assert_eq(t.ops->submit(other, &ticket), TD_OK);
    cr_assert_eq(t.ops->wait(other, ticket, 60000), TD_OK);
    t.ops->buffer_destroy(other, ob);
    t.ops->close(other);

    /* Cleanup still works on a lost device. */
    t.ops->segment_destroy(t.dev, seg);
    t.ops->buffer_destroy(t.dev, buf);
    vt_fini(&t);
}
