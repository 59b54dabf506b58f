/* ELEMENTWISE (td_kernel.h): one kernel per op, so that no work-item branches
 * on the op, in two layouts: "dense" when a and b (if used) are laid out like
 * out (row-major, no broadcasting) and "strided" for everything else.
 * FP_CONTRACT OFF keeps AXPY two roundings, as in the reference. */
#pragma OPENCL FP_CONTRACT OFF

#define TD_EW_SCALE(x, y, alpha) ((alpha) * (x))
#define TD_EW_ADD(x, y, alpha) ((x) + (y))
#define TD_EW_SUB(x, y, alpha) ((x) - (y))
#define TD_EW_MUL(x, y, alpha) ((x) * (y))
#define TD_EW_RELU(x, y, alpha) ((x) > 0.0f ? (x) : ((x) != (x) ? (x) : 0.0f))
#define TD_EW_RELU_GRAD(x, y, alpha) ((x) > 0.0f ? (y) : 0.0f)

float td_ew_axpy(float x, float y, float alpha)
{
    float t = alpha * y;
    return x + t;
}
#define TD_EW_AXPY(x, y, alpha) td_ew_axpy((x), (y), (alpha))

/* Strides of the dims that matter, so the index is a few multiply-adds
 * after decomposing the linear out index. */
#define TD_EW_KERNELS(name, OP)                                                                  \
    __kernel void td_ew_##name##_dense(__global float *out, ulong out_off,                       \
                                       __global const float *a, ulong a_off,                     \
                                       __global const float *b, ulong b_off, float alpha,        \
                                       ulong n)                                                  \
    {                                                                                            \
        size_t i = get_global_id(0);                                                             \
        if (i >= n)                                                                              \
            return;                                                                              \
        float x = a[a_off + i];                                                                  \
        float y = b[b_off + i];                                                                  \
        out[out_off + i] = OP(x, y, alpha);                                                      \
    }                                                                                            \
    __kernel void td_ew_##name##_strided(__global float *out, ulong out_off,                     \
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
        out[out_off + i] = OP(x, y, alpha);                                                      \
    }

TD_EW_KERNELS(scale, TD_EW_SCALE)
TD_EW_KERNELS(add, TD_EW_ADD)
TD_EW_KERNELS(sub, TD_EW_SUB)
TD_EW_KERNELS(mul, TD_EW_MUL)
TD_EW_KERNELS(axpy, TD_EW_AXPY)
TD_EW_KERNELS(relu, TD_EW_RELU)
TD_EW_KERNELS(relu_grad, TD_EW_RELU_GRAD)
