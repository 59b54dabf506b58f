/* Names of kernels and elementwise ops, for messages, traces and the
 * backends' kernel lookups. */
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
        [TD_KERNEL_IM2COL] = "im2col",
        [TD_KERNEL_COL2IM] = "col2im",
        [TD_KERNEL_POOL] = "pool",
        [TD_KERNEL_POOL_BACKWARD] = "pool_backward",
        [TD_KERNEL_SOFTMAX] = "softmax",
        [TD_KERNEL_ARGMAX] = "argmax",
        [TD_KERNEL_CAST] = "cast",
        [TD_KERNEL_DROPOUT_MASK] = "dropout_mask",
        [TD_KERNEL_GATHER_ROWS] = "gather_rows",
        [TD_KERNEL_SCATTER_ADD_ROWS] = "scatter_add_rows",
    };
    return kernel >= 0 && kernel < TD_KERNEL_COUNT ? names[kernel] : "unknown";
}

int td_ew_arity(int32_t op)
{
    switch (op) {
#define TD_EW_ARITY_CASE(id, NAME, arity, exact, expr) \
    case id: return arity;
        TD_EW_OPS(TD_EW_ARITY_CASE)
#undef TD_EW_ARITY_CASE
    default: return 0;
    }
}

int td_ew_exact(int32_t op)
{
    switch (op) {
#define TD_EW_EXACT_CASE(id, NAME, arity, exact, expr) \
    case id: return exact;
        TD_EW_OPS(TD_EW_EXACT_CASE)
#undef TD_EW_EXACT_CASE
    default: return 0;
    }
}

const char *td_ew_name(int32_t op)
{
    switch (op) {
#define TD_EW_NAME_CASE(id, NAME, arity, exact, expr) \
    case id: return #NAME;
        TD_EW_OPS(TD_EW_NAME_CASE)
#undef TD_EW_NAME_CASE
    default: return "unknown";
    }
}
