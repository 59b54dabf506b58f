/* The kernels' SPIR-V, compiled from the kernels/vulkan shaders by glslc at build
 * time (meson generator, -mfmt=c) and embedded so the library needs no files
 * at run time. */
#include "vk_internal.h"

static const uint32_t fill_spv[] =
#include "fill.spv.h"
    ;
static const uint32_t copy_spv[] =
#include "copy.spv.h"
    ;
static const uint32_t elementwise_spv[] =
#include "elementwise.spv.h"
    ;
static const uint32_t reduce_spv[] =
#include "reduce.spv.h"
    ;
static const uint32_t gemm_spv[] =
#include "gemm.spv.h"
    ;
static const uint32_t xent_forward_spv[] =
#include "xent_forward.spv.h"
    ;
static const uint32_t xent_backward_spv[] =
#include "xent_backward.spv.h"
    ;

const uint32_t *td_vk_shader_code(int32_t kernel, size_t *bytes)
{
#define TD_VK_SHADER(array) *bytes = sizeof(array); return array
    switch (kernel) {
    case TD_KERNEL_FILL: TD_VK_SHADER(fill_spv);
    case TD_KERNEL_COPY: TD_VK_SHADER(copy_spv);
    case TD_KERNEL_ELEMENTWISE: TD_VK_SHADER(elementwise_spv);
    case TD_KERNEL_REDUCE: TD_VK_SHADER(reduce_spv);
    case TD_KERNEL_GEMM: TD_VK_SHADER(gemm_spv);
    case TD_KERNEL_XENT_FORWARD: TD_VK_SHADER(xent_forward_spv);
    case TD_KERNEL_XENT_BACKWARD: TD_VK_SHADER(xent_backward_spv);
    default: *bytes = 0; return NULL;
    }
#undef TD_VK_SHADER
}
