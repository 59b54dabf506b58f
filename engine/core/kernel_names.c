/* Names of kernels and elementwise ops, for messages, traces and the
 * backends' kernel lookups. */
#include "td_kernel.h"

const char *td_kernel_name(int32_t kernel)
{
    static const char *const names[TD_KERNEL_COUNT] = {
#define TD_KERNEL_NAME_ENTRY(ID, name) [TD_KERNEL_##ID] = #name,
        TD_KERNELS(TD_KERNEL_NAME_ENTRY)
#undef TD_KERNEL_NAME_ENTRY
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
