/* VkResult names and their mapping to td_status, so that every failure's
 * message names the Vulkan call and the driver's result. */
#include <stdio.h>

#include "vk_internal.h"

#define TD_VK_RESULT_TABLE(X)                              \
    X(VK_SUCCESS)                                          \
    X(VK_NOT_READY)                                        \
    X(VK_TIMEOUT)                                          \
    X(VK_EVENT_SET)                                        \
    X(VK_EVENT_RESET)                                      \
    X(VK_INCOMPLETE)                                       \
    X(VK_ERROR_OUT_OF_HOST_MEMORY)                         \
    X(VK_ERROR_OUT_OF_DEVICE_MEMORY)                       \
    X(VK_ERROR_INITIALIZATION_FAILED)                      \
    X(VK_ERROR_DEVICE_LOST)                                \
    X(VK_ERROR_MEMORY_MAP_FAILED)                          \
    X(VK_ERROR_LAYER_NOT_PRESENT)                          \
    X(VK_ERROR_EXTENSION_NOT_PRESENT)                      \
    X(VK_ERROR_FEATURE_NOT_PRESENT)                        \
    X(VK_ERROR_INCOMPATIBLE_DRIVER)                        \
    X(VK_ERROR_TOO_MANY_OBJECTS)                           \
    X(VK_ERROR_FORMAT_NOT_SUPPORTED)                       \
    X(VK_ERROR_FRAGMENTED_POOL)                            \
    X(VK_ERROR_UNKNOWN)                                    \
    X(VK_ERROR_OUT_OF_POOL_MEMORY)                         \
    X(VK_ERROR_INVALID_EXTERNAL_HANDLE)                    \
    X(VK_ERROR_FRAGMENTATION)                              \
    X(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)             \
    X(VK_PIPELINE_COMPILE_REQUIRED)                        \
    X(VK_ERROR_SURFACE_LOST_KHR)                           \
    X(VK_ERROR_NATIVE_WINDOW_IN_USE_KHR)                   \
    X(VK_SUBOPTIMAL_KHR)                                   \
    X(VK_ERROR_OUT_OF_DATE_KHR)                            \
    X(VK_ERROR_INCOMPATIBLE_DISPLAY_KHR)                   \
    X(VK_ERROR_VALIDATION_FAILED_EXT)                      \
    X(VK_ERROR_INVALID_SHADER_NV)                          \
    X(VK_ERROR_IMAGE_USAGE_NOT_SUPPORTED_KHR)              \
    X(VK_ERROR_VIDEO_PICTURE_LAYOUT_NOT_SUPPORTED_KHR)     \
    X(VK_ERROR_VIDEO_PROFILE_OPERATION_NOT_SUPPORTED_KHR)  \
    X(VK_ERROR_VIDEO_PROFILE_FORMAT_NOT_SUPPORTED_KHR)     \
    X(VK_ERROR_VIDEO_PROFILE_CODEC_NOT_SUPPORTED_KHR)      \
    X(VK_ERROR_VIDEO_STD_VERSION_NOT_SUPPORTED_KHR)        \
    X(VK_ERROR_INVALID_DRM_FORMAT_MODIFIER_PLANE_LAYOUT_EXT) \
    X(VK_ERROR_NOT_PERMITTED_KHR)                          \
    X(VK_ERROR_FULL_SCREEN_EXCLUSIVE_MODE_LOST_EXT)        \
    X(VK_THREAD_IDLE_KHR)                                  \
    X(VK_THREAD_DONE_KHR)                                  \
    X(VK_OPERATION_DEFERRED_KHR)                           \
    X(VK_OPERATION_NOT_DEFERRED_KHR)                       \
    X(VK_ERROR_COMPRESSION_EXHAUSTED_EXT)

const char *td_vulkan_result_name(int result)
{
    switch (result) {
#define TD_VK_RESULT_CASE(name) case name: return #name;
        TD_VK_RESULT_TABLE(TD_VK_RESULT_CASE)
#undef TD_VK_RESULT_CASE
    default: break;
    }
    /* Thread-local so concurrent device threads never share the buffer. */
    static _Thread_local char unknown[32];
    snprintf(unknown, sizeof unknown, "VK_RESULT_%d", result);
    return unknown;
}

static td_status status_of(VkResult result)
{
    switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_FRAGMENTED_POOL:
    case VK_ERROR_FRAGMENTATION:
    case VK_ERROR_TOO_MANY_OBJECTS:
        return TD_ERR_OUT_OF_MEMORY;
    case VK_ERROR_DEVICE_LOST: return TD_ERR_DEVICE_LOST;
    case VK_TIMEOUT: return TD_ERR_TIMEOUT;
    case VK_ERROR_INCOMPATIBLE_DRIVER:
    case VK_ERROR_LAYER_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
        return TD_ERR_BACKEND_UNAVAILABLE;
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
        return TD_ERR_UNSUPPORTED;
    default: return TD_ERR_BACKEND;
    }
}

td_status td_vk_fail(td_context *ctx, td_device *dev, const char *call, VkResult result)
{
    td_status status = status_of(result);
    if (dev != NULL && status == TD_ERR_DEVICE_LOST)
        dev->lost = TD_ERR_DEVICE_LOST;
    if (dev != NULL)
        return td_error_set(ctx, status, "vulkan device %u (instance %u): %s: %s", dev->index,
                            dev->instance_number, call, td_vulkan_result_name(result));
    return td_error_set(ctx, status, "vulkan: %s: %s", call, td_vulkan_result_name(result));
}

td_status td_vk_check_lost(td_device *dev)
{
    if (dev->lost == TD_OK)
        return TD_OK;
    return td_error_set(dev->ctx, dev->lost,
                        "vulkan device %u (instance %u) was lost earlier (VK_ERROR_DEVICE_LOST)",
                        dev->index, dev->instance_number);
}
