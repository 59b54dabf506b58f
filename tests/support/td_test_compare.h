/* How a backend's elementwise result must match the CPU reference: the
 * contract of kernels/common/td_ew_ops.h. Ops marked exact must agree
 * bitwise (any NaN matches any NaN: payloads are not part of it). The
 * others divide or call exp/log/tanh/erf/sqrt, where devices differ within
 * their ulp bounds: both not finite (the same infinity if both are
 * infinite), or a relative error of at
 * most 1e-5 with 1e-6 absolute slack near zero (cancellations in GELU and
 * SiLU gradients make relative error alone meaningless there). */
#ifndef TD_TEST_COMPARE_H
#define TD_TEST_COMPARE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "td_kernel.h"

static inline bool td_test_ew_matches(int32_t op, float got, float want)
{
    if (td_ew_exact(op)) {
        if (isnan(got) || isnan(want))
            return isnan(got) && isnan(want);
        return memcmp(&got, &want, sizeof got) == 0;
    }
    /* At infinite inputs GELU and SiLU are indeterminate forms (inf * 0):
     * a device whose tanh(-inf) is -0.99999994 gives -inf where libm gives
     * NaN. Either way the value is not finite, which is the contract. */
    if (!isfinite(got) || !isfinite(want))
        return !isfinite(got) && !isfinite(want) && !(isinf(got) && isinf(want) && got != want);
    return fabs((double)got - (double)want) <= 1e-5 * fabs((double)want) + 1e-6;
}

/* Index of the first element outside the contract, or -1. */
static inline int64_t td_test_ew_first_mismatch(int32_t op, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!td_test_ew_matches(op, got[i], want[i]))
            return (int64_t)i;
    return -1;
}

#endif
