/* REDUCE (td_kernel.h). Serial per-work-item sums, not local-memory trees:
 * on PoCL the latter ran ~10x slower. td_reduce gives each output element
 * one work-item summing in the reference's row-major order (so it even
 * matches bitwise); when there are few outputs and long reductions, the
 * reduction is cut into `chunks` contiguous pieces summed by td_reduce_partial
 * and combined in chunk order by td_reduce_final. */
#pragma OPENCL FP_CONTRACT OFF

/* Position of the out element o in a. */
long td_reduce_base(long o, long4 od, long4 os)
{
    long o3 = o % od.s3;
    o /= od.s3;
    long o2 = o % od.s2;
    o /= od.s2;
    long o1 = o % od.s1;
    long o0 = o / od.s1;
    return o0 * os.s0 + o1 * os.s1 + o2 * os.s2 + o3 * os.s3;
}

__kernel void td_reduce(__global float *out, ulong out_off, __global const float *a, ulong a_off,
                        float alpha, ulong out_n, long4 od, long4 os, long4 rd, long4 rs)
{
    size_t o = get_global_id(0);
    if (o >= out_n)
        return;
    __global const float *base = a + a_off + td_reduce_base((long)o, od, os);
    float sum = 0.0f;
    for (long r0 = 0; r0 < rd.s0; r0++)
        for (long r1 = 0; r1 < rd.s1; r1++)
            for (long r2 = 0; r2 < rd.s2; r2++) {
                __global const float *p = base + r0 * rs.s0 + r1 * rs.s1 + r2 * rs.s2;
                for (long r3 = 0; r3 < rd.s3; r3++)
                    sum += p[r3 * rs.s3];
            }
    out[out_off + o] = alpha * sum;
}

/* partial[o * chunks + c] = sum of the reduction's linear positions
 * [c * len, min((c + 1) * len, red_n)) for out element o. */
__kernel void td_reduce_partial(__global float *partial, __global const float *a, ulong a_off,
                                ulong out_n, uint chunks, ulong len, ulong red_n, long4 od,
                                long4 os, long4 rd, long4 rs)
{
    size_t g = get_global_id(0);
    if (g >= out_n * chunks)
        return;
    long o = (long)(g / chunks);
    long c = (long)(g % chunks);
    __global const float *base = a + a_off + td_reduce_base(o, od, os);
    long begin = c * (long)len;
    long end = min(begin + (long)len, (long)red_n);
    float sum = 0.0f;
    if (begin < end) {
        long r = begin;
        long r3 = r % rd.s3;
        r /= rd.s3;
        long r2 = r % rd.s2;
        r /= rd.s2;
        long r1 = r % rd.s1;
        long r0 = r / rd.s1;
        for (long k = begin; k < end; k++) {
            sum += base[r0 * rs.s0 + r1 * rs.s1 + r2 * rs.s2 + r3 * rs.s3];
            if (++r3 == rd.s3) {
                r3 = 0;
                if (++r2 == rd.s2) {
                    r2 = 0;
                    if (++r1 == rd.s1) {
                        r1 = 0;
                        r0++;
                    }
                }
            }
        }
    }
    partial[g] = sum;
}

__kernel void td_reduce_final(__global float *out, ulong out_off, __global const float *partial,
                              uint chunks, float alpha, ulong out_n)
{
    size_t o = get_global_id(0);
    if (o >= out_n)
        return;
    float sum = 0.0f;
    for (uint c = 0; c < chunks; c++)
        sum += partial[o * chunks + c];
    out[out_off + o] = alpha * sum;
}
