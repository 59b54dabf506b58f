/* ELEMENTWISE (td_kernel.h): one kernel per op of td_ew_ops.h, named
 * td_ew_<NAME>_dense / _strided, so that no work-item branches on the op,
 * in two layouts: "dense" when a and b (if used) are laid out like out
 * (row-major, no broadcasting) and "strided" for everything else.
 * FP_CONTRACT OFF keeps AXPY two roundings, as in the reference. */
#pragma OPENCL FP_CONTRACT OFF

/* The op list (kernels/common/td_ew_ops.h, prepended to this program) in
 * OpenCL C's single-precision built-ins. */
#define TD_EXP exp
#define TD_LOG log
#define TD_SQRT sqrt
#define TD_TANH tanh
#define TD_ERF erf
#define TD_ISNAN isnan

/* Strides of the dims that matter, so the index is a few multiply-adds
 * after decomposing the linear out index. */
#define TD_EW_KERNELS(id, NAME, arity, exact, expr)                                                                  \
    __kernel void td_ew_##NAME##_dense(__global float *out, ulong out_off,                       \
                                       __global const float *a, ulong a_off,                     \
                                       __global const float *b, ulong b_off, float alpha,        \
                                       ulong n)                                                  \
    {                                                                                            \
        size_t i = get_global_id(0);                                                             \
        if (i >= n)                                                                              \
            return;                                                                              \
        float x = a[a_off + i];                                                                  \
        float y = b[b_off + i];                                                                  \
        out[out_off + i] = (expr);                                                      \
    }                                                                                            \
    __kernel void td_ew_##NAME##_strided(__global float *out, ulong out_off,                     \
                                         __global const float *a, ulong a_off,                   \
                                         __global const float *b, ulong b_off, float alpha,      \
                                         ulong n, long4 dims, long4 sa, long4 sb)                \
    {                                                                                            \
        size_t i = get_global_id(0);                                                             \
        if (i >= n)                                                                              \
            return;                                                                              \
        long r = (long)i;                                                                        \
        long i3 = r % dims.s3;                                                                   \
        r /= dims.s3;                                                                            \
        long i2 = r % dims.s2;                                                                   \
        r /= dims.s2;                                                                            \
        long i1 = r % dims.s1;                                                                   \
        long i0 = r / dims.s1;                                                                   \
        long ia = i0 * sa.s0 + i1 * sa.s1 + i2 * sa.s2 + i3 * sa.s3;                             \
        long ib = i0 * sb.s0 + i1 * sb.s1 + i2 * sb.s2 + i3 * sb.s3;                             \
        float x = a[a_off + ia];                                                                 \
        float y = b[b_off + ib];                                                                 \
        out[out_off + i] = (expr);                                                      \
    }

TD_EW_OPS(TD_EW_KERNELS)
