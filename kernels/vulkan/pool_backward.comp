#version 450
// POOL_BACKWARD (td_kernel.h) as a gather: one invocation per input element
// walks the windows containing it in increasing (oy, ox) order and adds
// gy[W] (max: only where this element is W's first tap equal to y[W], or
// NaN with y[W] NaN; avg: gy[W] over W's divisor). a = x, b = y, c = gy.
#extension GL_GOOGLE_include_directive : require
#include "conv_common.glsl"

// Whether tap (ti, tj) is the first tap of window (bi, oy, ox) inside the
// image whose value matches target.
bool first_max(int bi, int oy, int ox, int ch, int ti, int tj, float target)
{
    for (int i = 0; i <= ti; i++) {
        int iy = oy * p.stride_h - p.pad_top + i;
        if (iy < 0 || iy >= p.h)
            continue;
        int jend = i == ti ? tj : p.kw - 1;
        for (int j = 0; j <= jend; j++) {
            int ix = ox * p.stride_w - p.pad_left + j;
            if (ix < 0 || ix >= p.w)
                continue;
            float v = a.d[p.a_off + uint(((bi * p.h + iy) * p.w + ix) * p.ch + ch)];
            if (v == target || (isnan(v) && isnan(target)))
                return i == ti && j == tj;
        }
    }
    return false;
}

void main()
{
    uint step_ = gl_NumWorkGroups.x * 64u;
    for (uint e = gl_GlobalInvocationID.x; e < p.count; e += step_) {
        int t = int(e);
        int ch = t % p.ch; t /= p.ch;
        int ix = t % p.w; t /= p.w;
        int iy = t % p.h;
        int bi = t / p.h;
        precise float sum = 0.0;
        for (int i = p.kh - 1; i >= 0; i--) {
            int oy = window_of(iy, i, p.stride_h, p.pad_top, 1, p.oh);
            if (oy < 0)
                continue;
            for (int j = p.kw - 1; j >= 0; j--) {
                int ox = window_of(ix, j, p.stride_w, p.pad_left, 1, p.ow);
                if (ox < 0)
                    continue;
                uint wi = uint(((bi * p.oh + oy) * p.ow + ox) * p.ch + ch);
                float g = c.d[p.c_off + wi];
                if (p.mode == 0) {
                    if (first_max(bi, oy, ox, ch, i, j, b.d[p.b_off + wi]))
                        sum += g;
                } else {
                    sum += g / float(avg_divisor(oy, ox));
                }
            }
        }
        o.d[p.out_off + e] = sum;
    }
}
