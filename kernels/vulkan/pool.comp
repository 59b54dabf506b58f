#version 450
// POOL (td_kernel.h): one invocation per output element, scanning the
// window's taps inside the image in (i, j) order. Max keeps a NaN; avg sums
// from 0.0 and divides by the contract's divisor (0 taps counted: NaN).
#extension GL_GOOGLE_include_directive : require
#include "conv_common.glsl"

void main()
{
    uint step_ = gl_NumWorkGroups.x * 64u;
    for (uint e = gl_GlobalInvocationID.x; e < p.count; e += step_) {
        int t = int(e);
        int ch = t % p.ch; t /= p.ch;
        int ox = t % p.ow; t /= p.ow;
        int oy = t % p.oh;
        int bi = t / p.oh;
        precise float acc = p.mode == 0 ? uintBitsToFloat(0xff800000u) : 0.0;
        bool first = true;
        for (int i = 0; i < p.kh; i++) {
            int iy = oy * p.stride_h - p.pad_top + i;
            if (iy < 0 || iy >= p.h)
                continue;
            for (int j = 0; j < p.kw; j++) {
                int ix = ox * p.stride_w - p.pad_left + j;
                if (ix < 0 || ix >= p.w)
                    continue;
                float v = a.d[p.a_off + uint(((bi * p.h + iy) * p.w + ix) * p.ch + ch)];
                if (p.mode != 0)
                    acc += v;
                else if (first || v > acc || isnan(v))
                    acc = v;
                first = false;
            }
        }
        if (p.mode != 0) {
            int div = avg_divisor(oy, ox);
            acc = div == 0 ? uintBitsToFloat(0x7fc00000u) : acc / float(div);
        }
        o.d[p.out_off + e] = acc;
    }
}
