/* What the Vulkan backend offers beyond the td_backend_ops vtable: the
 * validation-layer message count (for the validation test mode) and the
 * VkResult name table (for messages). */
#ifndef TD_VULKAN_H
#define TD_VULKAN_H

#include <stdint.h>

/* Number of warning or error messages the Khronos validation layer reported
 * since the process started, over every Vulkan device tandem opened. Only
 * counts when TD_VULKAN_VALIDATION=1 was set when the devices were opened
 * (the layer is off otherwise, and the count stays 0). */
uint32_t td_vulkan_validation_message_count(void);

/* Whether the validation layer was requested and found for the instances
 * created so far (false when TD_VULKAN_VALIDATION is unset, or when the
 * layer is not installed: then the count above proves nothing). */
int td_vulkan_validation_active(void);

struct td_segment;

/* Barriers and dispatches a segment recorded, so tests can check that
 * independent dispatches are not serialised. */
uint32_t td_vulkan_segment_barrier_count(const struct td_segment *segment);
uint32_t td_vulkan_segment_dispatch_count(const struct td_segment *segment);

/* "VK_ERROR_DEVICE_LOST" for a VkResult value (passed as int so this header
 * needs no vulkan.h); "VK_RESULT_<n>" for values outside the table. */
const char *td_vulkan_result_name(int result);

#endif
