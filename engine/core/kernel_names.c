#include "td_kernel.h"

const char *td_kernel_name(int32_t kernel)
{
    static const char *const names[TD_KERNEL_COUNT] = {
        [TD_KERNEL_FILL] = "fill",
        [TD_KERNEL_COPY] = "copy",
        [TD_KERNEL_ELEMENTWISE] = "elementwise",
        [TD_KERNEL_REDUCE] = "reduce",
        [TD_KERNEL_GEMM] = "gemm",
        [TD_KERNEL_XENT_FORWARD] = "xent_forward",
        [TD_KERNEL_XENT_BACKWARD] = "xent_backward",
    };
    return kernel >= 0 && kernel < TD_KERNEL_COUNT ? names[kernel] : "unknown";
}
