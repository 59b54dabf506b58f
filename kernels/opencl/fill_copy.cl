/* FILL and COPY (td_kernel.h). One element per work-item; the global size is
 * rounded up to the local size, hence the bounds checks. */
#pragma OPENCL FP_CONTRACT OFF

__kernel void td_fill(__global float *out, ulong out_off, ulong n, float value)
{
    size_t i = get_global_id(0);
    if (i < n)
        out[out_off + i] = value;
}

__kernel void td_copy(__global float *out, ulong out_off, __global const float *a, ulong a_off,
                      ulong n)
{
    size_t i = get_global_id(0);
    if (i < n)
        out[out_off + i] = a[a_off + i];
}
