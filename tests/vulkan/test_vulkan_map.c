/* map/unmap: zero-copy host access to host-visible tensor memory, which the
 * ring uses instead of staging. Host writes through a map must reach later
 * device work (copies and kernels), device work enqueued before a map must be
 * visible through it, and memory the host cannot see is declined with
 * TD_ERR_UNSUPPORTED and no error recorded, so the ring quietly stages.
 *
 * Built into test_vulkan_backend, so it also runs under the validation layer
 * (vulkan_backend_validation). Reaches into vk_internal.h to take the
 * non-host-visible and non-coherent paths on devices (lavapipe) whose only
 * memory type is host-visible and coherent, and to test the memory type
 * rule on memory layouts of other devices. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"
#include "vk_test_util.h"

#define TIMEOUT_MS 60000u

/* Opens device 0; false (test passes vacuously, logged) when its tensor
 * memory is not host-visible, as on a discrete GPU. */
static bool open_mappable(vt *t)
{
    vt_init(t);
    vt_open(t, 0, 0);
    td_buffer *probe = vt_buffer(t, 16);
    bool ok = td_vk_mappable(probe->mem_flags);
    t->ops->buffer_destroy(t->dev, probe);
    if (!ok)
        cr_log_info("vulkan:0 (%s) tensor memory is not host-visible: map declines", t->dev->props.deviceName);
    return ok;
}

static void *map_ok(vt *t, td_buffer *buf, size_t offset, size_t bytes)
{
    void *p = NULL;
    td_status s = t->ops->map(t->dev, buf, offset, bytes, TIMEOUT_MS, &p);
    cr_assert_eq(s, TD_OK, "map(%zu, %zu): %s", offset, bytes, td_last_error(t->ctx));
    cr_assert_not_null(p);
    return p;
}

static void unmap_ok(vt *t, td_buffer *buf, void *p)
{
    cr_assert_eq(t->ops->unmap(t->dev, buf, p), TD_OK, "unmap: %s", td_last_error(t->ctx));
}

/* Host writes through a map, at unaligned byte offsets, then a read() and a
 * COPY kernel see exactly them, and the bytes around the range are kept. */
static void check_host_to_device(vt *t)
{
    enum { N = 3001 };
    float *x = vt_floats(N), *y = vt_floats(N), *want = vt_floats(N);
    vt_random(x, N, 11);
    vt_random(y, N, 12);
    td_buffer *buf = vt_upload(t, x, N);
    const size_t lo = 13, hi = 4 * N - 9; /* byte range, deliberately unaligned */
    uint8_t *p = map_ok(t, buf, lo, hi - lo);
    memcpy(p, (uint8_t *)y + lo, hi - lo);
    unmap_ok(t, buf, p);
    memcpy(want, x, 4 * N);
    memcpy((uint8_t *)want + lo, (uint8_t *)y + lo, hi - lo);

    float *got = vt_floats(N);
    vt_download(t, buf, 0, got, N);
    vt_expect_bitwise(got, want, N, "read() after a host write through map");

    td_buffer *out = vt_buffer(t, N);
    td_kernel_call copy = {.kernel = TD_KERNEL_COPY, .n = N, .out = {out, 0}, .a = {buf, 0}};
    cr_assert_eq(vt_run(t, &copy, 1), TD_OK, "%s", td_last_error(t->ctx));
    vt_download(t, out, 0, got, N);
    vt_expect_bitwise(got, want, N, "COPY kernel after a host write through map");
    t->ops->buffer_destroy(t->dev, out);
    t->ops->buffer_destroy(t->dev, buf);
    free(x);
    free(y);
    free(want);
    free(got);
}

/* Work enqueued and not even submitted before the map (a FILL kernel, then a
 * write()) is done and visible when map returns. */
static void check_device_to_host(vt *t)
{
    enum { N = 5000 };
    td_buffer *buf = vt_buffer(t, N);
    td_kernel_call fill = {.kernel = TD_KERNEL_FILL, .n = N, .alpha = 2.5f, .out = {buf, 0}};
    td_segment *seg = NULL;
    cr_assert_eq(t->ops->segment_create(t->dev, &fill, 1, &seg), TD_OK, "%s", td_last_error(t->ctx));
    cr_assert_eq(t->ops->segment_run(t->dev, seg), TD_OK, "%s", td_last_error(t->ctx));
    const float *p = map_ok(t, buf, 4 * 100, 4 * (N - 100));
    for (size_t i = 0; i < N - 100; i++)
        cr_assert_eq(p[i], 2.5f, "FILL then map: element %zu is %g", i + 100, p[i]);
    unmap_ok(t, buf, (void *)p);

    float x[64];
    vt_random(x, 64, 3);
    cr_assert_eq(t->ops->write(t->dev, buf, 4 * 7, x, sizeof x), TD_OK, "%s", td_last_error(t->ctx));
    p = map_ok(t, buf, 0, 4 * N);
    vt_expect_bitwise(p + 7, x, 64, "write() then map");
    cr_assert_eq(p[6], 2.5f);
    cr_assert_eq(p[71], 2.5f);
    unmap_ok(t, buf, (void *)p);

    /* And a kernel run after a map cycle, then mapped again. */
    cr_assert_eq(t->ops->segment_run(t->dev, seg), TD_OK, "%s", td_last_error(t->ctx));
    p = map_ok(t, buf, 4 * 7, 4 * 64);
    cr_assert_eq(p[0], 2.5f);
    cr_assert_eq(p[63], 2.5f);
    unmap_ok(t, buf, (void *)p);
    t->ops->segment_destroy(t->dev, seg);
    t->ops->buffer_destroy(t->dev, buf);
}

Test(vulkan_map, host_writes_reach_the_device)
{
    vt t;
    if (open_mappable(&t))
        check_host_to_device(&t);
    vt_fini(&t);
}

Test(vulkan_map, device_work_before_map_is_visible)
{
    vt t;
    if (open_mappable(&t))
        check_device_to_host(&t);
    vt_fini(&t);
}

/* The same checks with the memory treated as non-coherent, so map
 * invalidates and unmap flushes (ranges widened to nonCoherentAtomSize, which
 * the validation layer checks). Flushing coherent memory is legal, merely
 * unneeded; on non-coherent hardware this is the path buffers take anyway. */
Test(vulkan_map, non_coherent_flush_and_invalidate)
{
    vt t;
    if (open_mappable(&t)) {
        cr_log_info("nonCoherentAtomSize %llu", (unsigned long long)t.dev->props.limits.nonCoherentAtomSize);
        enum { N = 777 };
        td_buffer *buf = vt_buffer(&t, N);
        buf->mem_flags &= ~(VkMemoryPropertyFlags)VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        float x[N], got[N];
        vt_random(x, N, 5);
        /* Ranges at the start, in the middle and up to the end. */
        const size_t ranges[][2] = {{0, 4}, {4, 4 * 300}, {4 * 301, 4 * (N - 301)}};
        for (size_t r = 0; r < 3; r++) {
            uint8_t *p = map_ok(&t, buf, ranges[r][0], ranges[r][1]);
            memcpy(p, (uint8_t *)x + ranges[r][0], ranges[r][1]);
            unmap_ok(&t, buf, p);
        }
        vt_download(&t, buf, 0, got, N);
        vt_expect_bitwise(got, x, N, "non-coherent map/unmap then read()");
        td_kernel_call fill = {.kernel = TD_KERNEL_FILL, .n = N, .alpha = -1.0f, .out = {buf, 0}};
        cr_assert_eq(vt_run(&t, &fill, 1), TD_OK, "%s", td_last_error(t.ctx));
        const float *p = map_ok(&t, buf, 4 * 5, 4 * 3);
        cr_assert_eq(p[0], -1.0f);
        cr_assert_eq(p[2], -1.0f);
        unmap_ok(&t, buf, (void *)p);
        t.ops->buffer_destroy(t.dev, buf);
    }
    vt_fini(&t);
}

/* The ring maps input and output of one buffer at once; each unmap names its
 * own pointer. Too many at once, or memory the host cannot see, is declined
 * without an error message; bad arguments are errors. */
Test(vulkan_map, several_maps_declines_and_errors)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    enum { N = 256 };
    td_buffer *buf = vt_buffer(&t, N);
    void *p = NULL;
    if (!td_vk_mappable(buf->mem_flags)) {
        td_error_clear(t.ctx);
        cr_assert_eq(t.ops->map(t.dev, buf, 0, 4, TIMEOUT_MS, &p), TD_ERR_UNSUPPORTED);
        cr_assert_eq(td_last_status(t.ctx), TD_OK, "%s", td_last_error(t.ctx));
    } else {
        void *maps[TD_VK_MAX_MAPS];
        for (uint32_t i = 0; i < TD_VK_MAX_MAPS; i++)
            maps[i] = map_ok(&t, buf, 4 * 16 * i, 4 * 16);
        cr_assert_eq((uint8_t *)maps[1] - (uint8_t *)maps[0], 4 * 16, "one contiguous mapping");
        td_error_clear(t.ctx);
        cr_assert_eq(t.ops->map(t.dev, buf, 0, 4, TIMEOUT_MS, &p), TD_ERR_UNSUPPORTED);
        cr_assert_null(p);
        cr_assert_eq(td_last_status(t.ctx), TD_OK, "declining recorded: %s", td_last_error(t.ctx));
        for (uint32_t i = 0; i < TD_VK_MAX_MAPS; i++)
            unmap_ok(&t, buf, maps[TD_VK_MAX_MAPS - 1 - i]);
        cr_assert_eq(t.ops->unmap(t.dev, buf, maps[0]), TD_ERR_INVALID_ARGUMENT, "unmapped twice");
        cr_assert(strstr(td_last_error(t.ctx), "not mapped") != NULL, "%s", td_last_error(t.ctx));

        /* Memory without HOST_VISIBLE (a discrete GPU's VRAM), simulated:
         * declined before any wait, with nothing recorded. */
        VkMemoryPropertyFlags flags = buf->mem_flags;
        buf->mem_flags = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        td_error_clear(t.ctx);
        cr_assert_eq(t.ops->map(t.dev, buf, 0, 4 * N, TIMEOUT_MS, &p), TD_ERR_UNSUPPORTED);
        cr_assert_null(p);
        cr_assert_eq(td_last_status(t.ctx), TD_OK, "declining recorded: %s", td_last_error(t.ctx));
        cr_assert_str_eq(td_last_error(t.ctx), "");
        buf->mem_flags = flags;
    }
    cr_assert_eq(t.ops->map(t.dev, buf, 4, 4 * N, TIMEOUT_MS, &p), TD_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(td_last_error(t.ctx), "outside") != NULL, "%s", td_last_error(t.ctx));
    cr_assert_eq(t.ops->map(t.dev, NULL, 0, 4, TIMEOUT_MS, &p), TD_ERR_INVALID_ARGUMENT);
    t.ops->buffer_destroy(t.dev, buf);
    vt_fini(&t);
}

/* map's wait is bounded: with a gigabyte of copies in flight and no time
 * allowed, it times out naming VK_TIMEOUT, and the device stays usable. */
Test(vulkan_map, wait_timeout)
{
    vt t;
    if (open_mappable(&t)) {
        const size_t bytes = 64u << 20;
        td_buffer *a = NULL, *b = NULL;
        cr_assert_eq(t.ops->buffer_create(t.dev, bytes, &a), TD_OK, "%s", td_last_error(t.ctx));
        cr_assert_eq(t.ops->buffer_create(t.dev, bytes, &b), TD_OK, "%s", td_last_error(t.ctx));
        for (int i = 0; i < 16; i++)
            cr_assert_eq(t.ops->copy(t.dev, i % 2 ? b : a, 0, i % 2 ? a : b, 0, bytes), TD_OK, "%s",
                         td_last_error(t.ctx));
        void *p = NULL;
        cr_assert_eq(t.ops->map(t.dev, b, 0, bytes, 0, &p), TD_ERR_TIMEOUT, "%s", td_last_error(t.ctx));
        cr_assert_null(p);
        cr_assert(strstr(td_last_error(t.ctx), "VK_TIMEOUT") != NULL, "%s", td_last_error(t.ctx));
        p = map_ok(&t, b, 0, bytes);
        unmap_ok(&t, b, p);
        t.ops->buffer_destroy(t.dev, a);
        t.ops->buffer_destroy(t.dev, b);
    }
    vt_fini(&t);
}

Test(vulkan_map, lost_device_fails_fast)
{
    vt t;
    vt_init(&t);
    vt_open(&t, 0, 0);
    td_buffer *buf = vt_buffer(&t, 16);
    void *p = NULL;
    bool mappable = td_vk_mappable(buf->mem_flags);
    if (mappable)
        p = map_ok(&t, buf, 0, 64);
    cr_assert_eq(td_vk_fail(t.ctx, t.dev, "vkQueueSubmit", VK_ERROR_DEVICE_LOST), TD_ERR_DEVICE_LOST);
    void *q = NULL;
    cr_assert_eq(t.ops->map(t.dev, buf, 0, 64, TIMEOUT_MS, &q), TD_ERR_DEVICE_LOST);
    if (mappable)
        cr_assert_eq(t.ops->unmap(t.dev, buf, p), TD_ERR_DEVICE_LOST);
    t.ops->buffer_destroy(t.dev, buf);
    vt_fini(&t);
}

/* The memory type rule on the layouts of other devices. */
enum { DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
       HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CACHED = VK_MEMORY_PROPERTY_HOST_CACHED_BIT };

static VkPhysicalDeviceMemoryProperties layout(const VkMemoryPropertyFlags *types, const uint32_t *heaps,
                                               uint32_t type_count, const bool *heap_local, uint32_t heap_count)
{
    VkPhysicalDeviceMemoryProperties m;
    memset(&m, 0, sizeof m);
    m.memoryTypeCount = type_count;
    for (uint32_t i = 0; i < type_count; i++)
        m.memoryTypes[i] = (VkMemoryType){.propertyFlags = types[i], .heapIndex = heaps[i]};
    m.memoryHeapCount = heap_count;
    for (uint32_t i = 0; i < heap_count; i++)
        m.memoryHeaps[i] = (VkMemoryHeap){.size = 1ull << 32,
                                          .flags = heap_local[i] ? VK_MEMORY_HEAP_DEVICE_LOCAL_BIT : 0};
    return m;
}

Test(vulkan_map, memory_type_rule)
{
    const bool local_host[] = {true, false}, all_local[] = {true};

    /* Discrete GPU with ReBAR: tensors in plain VRAM (map declines), staging
     * in cached system memory, even though a DL|HV type exists. */
    const VkMemoryPropertyFlags dgpu[] = {DL, HV | HC, HV | HC | CACHED, DL | HV | HC};
    const uint32_t dgpu_heaps[] = {0, 1, 1, 0};
    VkPhysicalDeviceMemoryProperties m = layout(dgpu, dgpu_heaps, 4, local_host, 2);
    int t = td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 0xf, false);
    cr_assert_eq(t, 0);
    cr_assert(!td_vk_mappable(m.memoryTypes[t].propertyFlags));
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 0xf, true), 2);
    /* A buffer that may not live in plain VRAM still gets memory. */
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 0x2, false), 1);

    /* The same layout reported as integrated (an AMD APU): host-visible VRAM. */
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 0xf, false), 3);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 0x7, false), 0,
                 "no DL|HV type allowed: plain device-local");

    /* Intel-like integrated GPU: coherent and cached wins. */
    const VkMemoryPropertyFlags igpu[] = {DL, DL | HV | HC, DL | HV | HC | CACHED};
    const uint32_t igpu_heaps[] = {0, 0, 0};
    m = layout(igpu, igpu_heaps, 3, all_local, 1);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 0x7, false), 2);
    /* All heaps device-local (UMA) counts even when the type says otherwise. */
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, 0x7, false), 2);

    /* Mali-like: coherent before cached non-coherent. */
    const VkMemoryPropertyFlags mali[] = {DL | HV | HC, DL | HV | CACHED};
    const uint32_t mali_heaps[] = {0, 0};
    m = layout(mali, mali_heaps, 2, all_local, 1);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 0x3, false), 0);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 0x2, false), 1);

    /* lavapipe: one type with every flag. */
    const VkMemoryPropertyFlags cpu[] = {DL | HV | HC | CACHED};
    const uint32_t cpu_heaps[] = {0};
    m = layout(cpu, cpu_heaps, 1, all_local, 1);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_CPU, 0x1, false), 0);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_CPU, 0x1, true), 0);
    cr_assert_eq(td_vk_choose_memory_type(&m, VK_PHYSICAL_DEVICE_TYPE_CPU, 0x0, false), -1);

    cr_assert(td_vk_mappable(HV));
    cr_assert(!td_vk_mappable(DL));
}
