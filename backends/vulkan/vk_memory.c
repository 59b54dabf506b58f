/* Device buffers and host-visible staging memory.
 *
 * A td_buffer is one VkBuffer over one allocation, whatever its size: copies
 * have no range limit, and kernels bind a window of at most
 * maxStorageBufferRange around the tensor they touch (vk_segment.c), so a
 * buffer over that limit (a large gradient bucket) works as long as no single
 * tensor exceeds it. */
#include <string.h>

#include "vk_internal.h"

static int find_memory_type(const VkPhysicalDeviceMemoryProperties *mem, uint32_t bits,
                            VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < mem->memoryTypeCount; i++)
        if ((bits & (1u << i)) && (mem->memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

td_status td_vk_alloc_buffer(td_device *dev, VkDeviceSize size, bool host, VkBuffer *buffer,
                             VkDeviceMemory *memory, void **mapped, bool *coherent)
{
    td_context *ctx = dev->ctx;
    *buffer = VK_NULL_HANDLE;
    *memory = VK_NULL_HANDLE;
    VkBufferCreateInfo info = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = vkCreateBuffer(dev->device, &info, NULL, buffer);
    if (r != VK_SUCCESS) {
        *buffer = VK_NULL_HANDLE;
        return td_vk_fail(ctx, dev, "vkCreateBuffer", r);
    }
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev->device, *buffer, &req);
    int type;
    if (host) {
        /* Cached memory makes host reads of results fast; coherent is the
         * fallback every implementation has. */
        type = find_memory_type(&dev->mem_props, req.memoryTypeBits,
                                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
        if (type < 0)
            type = find_memory_type(&dev->mem_props, req.memoryTypeBits,
                                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
        if (type < 0)
            type = find_memory_type(&dev->mem_props, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    } else {
        type = find_memory_type(&dev->mem_props, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (type < 0)
            type = find_memory_type(&dev->mem_props, req.memoryTypeBits, 0);
    }
    if (type < 0) {
        vkDestroyBuffer(dev->device, *buffer, NULL);
        *buffer = VK_NULL_HANDLE;
        return td_error_set(ctx, TD_ERR_UNSUPPORTED, "vulkan device %u: no %s memory type for a buffer",
                            dev->index, host ? "host-visible" : "device");
    }
    VkMemoryAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                  .allocationSize = req.size,
                                  .memoryTypeIndex = (uint32_t)type};
    r = vkAllocateMemory(dev->device, &alloc, NULL, memory);
    if (r == VK_SUCCESS)
        r = vkBindBufferMemory(dev->device, *buffer, *memory, 0);
    if (r == VK_SUCCESS && host) {
        r = vkMapMemory(dev->device, *memory, 0, VK_WHOLE_SIZE, 0, mapped);
        if (coherent != NULL)
            *coherent = (dev->mem_props.memoryTypes[type].propertyFlags &
                         VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) != 0;
    }
    if (r != VK_SUCCESS) {
        td_status s = td_vk_fail(ctx, dev, "vkAllocateMemory/vkBindBufferMemory/vkMapMemory", r);
        td_vk_free_buffer(dev, *buffer, *memory);
        *buffer = VK_NULL_HANDLE;
        *memory = VK_NULL_HANDLE;
        return s;
    }
    return TD_OK;
}

void td_vk_free_buffer(td_device *dev, VkBuffer buffer, VkDeviceMemory memory)
{
    if (buffer != VK_NULL_HANDLE)
        vkDestroyBuffer(dev->device, buffer, NULL);
    if (memory != VK_NULL_HANDLE)
        vkFreeMemory(dev->device, memory, NULL);
}

td_status td_vk_buffer_create(td_device *dev, size_t bytes, td_buffer **out)
{
    *out = NULL;
    td_status s = td_vk_check_lost(dev);
    if (s != TD_OK)
        return s;
    VkPhysicalDeviceMaintenance3Properties maint3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 props2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &maint3};
    vkGetPhysicalDeviceProperties2(dev->physical, &props2);
    if (maint3.maxMemoryAllocationSize != 0 && bytes > maint3.maxMemoryAllocationSize)
        return td_error_set(dev->ctx, TD_ERR_OUT_OF_MEMORY,
                            "vulkan device %u: buffer of %zu bytes exceeds maxMemoryAllocationSize %llu",
                            dev->index, bytes, (unsigned long long)maint3.maxMemoryAllocationSize);
    td_buffer *buf = td_alloc_zeroed(dev->ctx, sizeof *buf);
    if (buf == NULL)
        return TD_OOM(dev->ctx, "a vulkan buffer", sizeof *buf);
    buf->bytes = bytes;
    /* Vulkan has no empty buffers; round up to whole 4-byte words so
     * descriptor ranges always cover whole floats. */
    buf->size = bytes == 0 ? 64 : (bytes + 3) & ~(VkDeviceSize)3;
    s = td_vk_alloc_buffer(dev, buf->size, false, &buf->buffer, &buf->memory, NULL, NULL);
    if (s != TD_OK) {
        td_free(dev->ctx, buf);
        return s;
    }
    *out = buf;
    return TD_OK;
}

void td_vk_buffer_destroy(td_device *dev, td_buffer *buf)
{
    if (buf == NULL)
        return;
    td_vk_free_buffer(dev, buf->buffer, buf->memory);
    td_free(dev->ctx, buf);
}

void *td_vk_buffer_host_pointer(td_device *dev, td_buffer *buf)
{
    (void)dev;
    (void)buf;
    return NULL;
}

td_status td_vk_staging_create(td_device *dev, size_t bytes, td_staging **out, void **host)
{
    *out = NULL;
    *host = NULL;
    td_status s = td_vk_check_lost(dev);
    if (s != TD_OK)
        return s;
    td_staging *st = td_alloc_zeroed(dev->ctx, sizeof *st);
    if (st == NULL)
        return TD_OOM(dev->ctx, "a vulkan staging buffer", sizeof *st);
    st->bytes = bytes;
    s = td_vk_alloc_buffer(dev, bytes == 0 ? 64 : bytes, true, &st->buffer, &st->memory, &st->host,
                           &st->coherent);
    if (s != TD_OK) {
        td_free(dev->ctx, st);
        return s;
    }
    st->next = dev->stagings;
    dev->stagings = st;
    *out = st;
    *host = st->host;
    return TD_OK;
}

void td_vk_staging_destroy(td_device *dev, td_staging *staging)
{
    if (staging == NULL)
        return;
    for (td_staging **p = &dev->stagings; *p != NULL; p = &(*p)->next)
        if (*p == staging) {
            *p = staging->next;
            break;
        }
    /* Pending invalidates of this staging would touch freed memory. */
    for (size_t i = 0; i < dev->pending_count; i++)
        if (dev->pending[i].staging == staging)
            dev->pending[i].staging = NULL;
    td_vk_free_buffer(dev, staging->buffer, staging->memory);
    td_free(dev->ctx, staging);
}
