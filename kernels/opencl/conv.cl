/* IM2COL, COL2IM, POOL and POOL_BACKWARD (td_kernel.h), one work-item per
 * output element. COL2IM and POOL_BACKWARD gather: each image element walks
 * the windows that contain it in increasing (oy, ox) order, so the sums are
 * the reference's, bit for bit, without atomics. The geometry comes as two
 * long8 vectors:
 *   g0 = (n, h, w, c, kh, kw, oh, ow)
 *   g1 = (stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, -, -) */
#pragma OPENCL FP_CONTRACT OFF

__kernel void td_im2col(__global float *out, ulong out_off, __global const float *a, ulong a_off,
                        ulong count, long8 g0, long8 g1)
{
    size_t e = get_global_id(0);
    if (e >= count)
        return;
    long t = (long)e;
    long ch = t % g0.s3;
    t /= g0.s3;
    long j = t % g0.s5;
    t /= g0.s5;
    long i = t % g0.s4;
    t /= g0.s4;
    long ox = t % g0.s7;
    t /= g0.s7;
    long oy = t % g0.s6;
    long b = t / g0.s6;
    long iy = oy * g1.s0 - g1.s2 + i * g1.s4;
    long ix = ox * g1.s1 - g1.s3 + j * g1.s5;
    float v = 0.0f;
    if (iy >= 0 && iy < g0.s1 && ix >= 0 && ix < g0.s2)
        v = a[a_off + ((b * g0.s1 + iy) * g0.s2 + ix) * g0.s3 + ch];
    out[out_off + e] = v;
}

/* The window o whose tap i lands on position pos, or -1 when none does.
 * Callers try i from k-1 down to 0, which visits o in increasing order: the
 * contract's summation order. */
long td_window_of(long pos, long i, long stride, long pad, long dil, long outs)
{
    long num = pos + pad - i * dil;
    if (num < 0 || num % stride != 0)
        return -1;
    long o = num / stride;
    return o < outs ? o : -1;
}

__kernel void td_col2im(__global float *out, ulong out_off, __global const float *a, ulong a_off,
                        ulong count, long8 g0, long8 g1)
{
    size_t e = get_global_id(0);
    if (e >= count)
        return;
    long t = (long)e;
    long ch = t % g0.s3;
    t /= g0.s3;
    long ix = t % g0.s2;
    t /= g0.s2;
    long iy = t % g0.s1;
    long b = t / g0.s1;
    long row = g0.s4 * g0.s5 * g0.s3; /* one patch */
    float sum = 0.0f;
    for (long i = g0.s4 - 1; i >= 0; i--) {
        long oy = td_window_of(iy, i, g1.s0, g1.s2, g1.s4, g0.s6);
        if (oy < 0)
            continue;
        for (long j = g0.s5 - 1; j >= 0; j--) {
            long ox = td_window_of(ix, j, g1.s1, g1.s3, g1.s5, g0.s7);
            if (ox < 0)
                continue;
            sum += a[a_off + ((b * g0.s6 + oy) * g0.s7 + ox) * row + (i * g0.s5 + j) * g0.s3 + ch];
        }
    }
    out[out_off + e] = sum;
}

/* Number of taps 0 <= k < taps with 0 <= o*stride - pad + k < size. */
long td_inside(long o, long taps, long stride, long pad, long size)
{
    long lo = o * stride - pad;
    long first = max(lo, 0L), last = min(lo + taps, size);
    return last > first ? last - first : 0;
}

__kernel void td_pool(__global float *out, ulong out_off, __global const float *a, ulong a_off,
                      ulong count, long8 g0, long8 g1, int mode, int include_pad)
{
    size_t e = get_global_id(0);
    if (e >= count)
        return;
    long t = (long)e;
    long ch = t % g0.s3;
    t /= g0.s3;
    long ox = t % g0.s7;
    t /= g0.s7;
    long oy = t % g0.s6;
    long b = t / g0.s6;
    float acc = mode == 0 ? -INFINITY : 0.0f;
    bool first = true;
    for (long i = 0; i < g0.s4; i++) {
        long iy = oy * g1.s0 - g1.s2 + i;
        if (iy < 0 || iy >= g0.s1)
            continue;
        for (long j = 0; j < g0.s5; j++) {
            long ix = ox * g1.s1 - g1.s3 + j;
            if (ix < 0 || ix >= g0.s2)
                continue;
            float v = a[a_off + ((b * g0.s1 + iy) * g0.s2 + ix) * g0.s3 + ch];
            if (mode != 0)
                acc += v;
            else if (first || v > acc || isnan(v))
                acc = v;
            first = false;
        }
    }
    if (mode != 0) {
        long div = include_pad ? g0.s4 * g0.s5
                               : td_inside(oy, g0.s4, g1.s0, g1.s2, g0.s1) * td_inside(ox, g0.s5, g1.s1, g1.s3, g0.s2);
        acc = div == 0 ? NAN : acc / (float)div;
    }
    out[out_off + e] = acc;
}

/* True when tap (i, j) of window (b, oy, ox) is its first tap inside the
 * image whose value matches target (equal, or both NaN). */
bool td_first_max(__global const float *x, ulong x_off, long b, long oy, long ox, long ch, long ti, long tj,
                  float target, long8 g0, long8 g1)
{
    for (long i = 0; i <= ti; i++) {
        long iy = oy * g1.s0 - g1.s2 + i;
        if (iy < 0 || iy >= g0.s1)
            continue;
        for (long j = 0; j < g0.s5; j++) {
            if (i == ti && j > tj)
                break;
            long ix = ox * g1.s1 - g1.s3 + j;
            if (ix < 0 || ix >= g0.s2)
                continue;
            float v = x[x_off + ((b * g0.s1 + iy) * g0.s2 + ix) * g0.s3 + ch];
            if (v == target || (isnan(v) && isnan(target)))
                return i == ti && j == tj;
        }
    }
    return false;
}

__kernel void td_pool_backward(__global float *gx, ulong gx_off, __global const float *x, ulong x_off,
                               __global const float *y, ulong y_off, __global const float *gy, ulong gy_off,
                               ulong count, long8 g0, long8 g1, int mode, int include_pad)
{
    size_t e = get_global_id(0);
    if (e >= count)
        return;
    long t = (long)e;
    long ch = t % g0.s3;
    t /= g0.s3;
    long ix = t % g0.s2;
    t /= g0.s2;
    long iy = t % g0.s1;
    long b = t / g0.s1;
    float sum = 0.0f;
    for (long i = g0.s4 - 1; i >= 0; i--) {
        long oy = td_window_of(iy, i, g1.s0, g1.s2, 1, g0.s6);
        if (oy < 0)
            continue;
        for (long j = g0.s5 - 1; j >= 0; j--) {
            long ox = td_window_of(ix, j, g1.s1, g1.s3, 1, g0.s7);
            if (ox < 0)
                continue;
            long w = ((b * g0.s6 + oy) * g0.s7 + ox) * g0.s3 + ch;
            float g = gy[gy_off + w];
            if (mode == 0) {
                if (td_first_max(x, x_off, b, oy, ox, ch, i, j, y[y_off + w], g0, g1))
                    sum += g;
            } else {
                long div = include_pad ? g0.s4 * g0.s5
                                       : td_inside(oy, g0.s4, g1.s0, g1.s2, g0.s1) *
                                             td_inside(ox, g0.s5, g1.s1, g1.s3, g0.s2);
                sum += g / (float)div;
            }
        }
    }
    gx[gx_off + e] = sum;
}
