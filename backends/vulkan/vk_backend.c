/* The Vulkan backend's vtable. */
#include "vk_internal.h"

const td_backend_ops td_vulkan_backend = {
    .name = "vulkan",
    .probe = td_vk_probe,
    .describe = td_vk_describe,
    .open = td_vk_open,
    .close = td_vk_close,
    .buffer_create = td_vk_buffer_create,
    .buffer_destroy = td_vk_buffer_destroy,
    .buffer_host_pointer = td_vk_buffer_host_pointer,
    .staging_create = td_vk_staging_create,
    .staging_destroy = td_vk_staging_destroy,
    .map = td_vk_map,
    .unmap = td_vk_unmap,
    .write = td_vk_write,
    .read = td_vk_read,
    .copy = td_vk_copy,
    .segment_create = td_vk_segment_create,
    .segment_run = td_vk_segment_run,
    .segment_destroy = td_vk_segment_destroy,
    .submit = td_vk_submit,
    .wait = td_vk_wait,
};
