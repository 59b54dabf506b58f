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
static const uint32_t softmax_spv[] =
#include "softmax.spv.h"
    ;
static const uint32_t argmax_spv[] =
#include "argmax.spv.h"
    ;
static const uint32_t cast_spv[] =
#include "cast.spv.h"
    ;
static const uint32_t dropout_mask_spv[] =
#include "dropout_mask.spv.h"
    ;
static const uint32_t gather_rows_spv[] =
#include "gather_rows.spv.h"
    ;
static const uint32_t scatter_add_rows_spv[] =
#include "scatter_add_rows.spv.h"
    ;

static const uint32_t im2col_spv[] =
#include "im2col.spv.h"
    ;
static const uint32_t col2im_spv[] =
#include "col2im.spv.h"
    ;
static const uint32_t pool_spv[] =
#include "pool.spv.h"
    ;
static const uint32_t pool_backward_spv[] =
#include "pool_backward.spv.h"
    ;
static const uint32_t layer_norm_spv[] =
#include "layer_norm.spv.h"
    ;
static const uint32_t layer_norm_backward_spv[] =
#include "layer_norm_backward.spv.h"
    ;

const uint32_t *td_vk_shader_code(int32_t kernel, size_t *bytes)
{
#define TD_VK_SHADER(array) *bytes = sizeof(array); return array
    /* Each kernel's shader is the SPIR-V compiled from kernels/vulkan/NAME.comp
     * (the array NAME_spv above), by the one kernel list. */
    switch (kernel) {
#define TD_VK_SHADER_CASE(ID, name) \
    case TD_KERNEL_##ID: TD_VK_SHADER(name##_spv);
        TD_KERNELS(TD_VK_SHADER_CASE)
#undef TD_VK_SHADER_CASE
    default: *bytes = 0; return NULL;
    }
#undef TD_VK_SHADER
}
