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
    case TD_KERNEL_SOFTMAX: TD_VK_SHADER(softmax_spv);
    case TD_KERNEL_ARGMAX: TD_VK_SHADER(argmax_spv);
    case TD_KERNEL_CAST: TD_VK_SHADER(cast_spv);
    case TD_KERNEL_DROPOUT_MASK: TD_VK_SHADER(dropout_mask_spv);
    case TD_KERNEL_GATHER_ROWS: TD_VK_SHADER(gather_rows_spv);
    case TD_KERNEL_SCATTER_ADD_ROWS: TD_VK_SHADER(scatter_add_rows_spv);
    case TD_KERNEL_IM2COL: TD_VK_SHADER(im2col_spv);
    case TD_KERNEL_COL2IM: TD_VK_SHADER(col2im_spv);
    case TD_KERNEL_POOL: TD_VK_SHADER(pool_spv);
    case TD_KERNEL_POOL_BACKWARD: TD_VK_SHADER(pool_backward_spv);
    default: *bytes = 0; return NULL;
    }
#undef TD_VK_SHADER
}
