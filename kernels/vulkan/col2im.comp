#version 450
// COL2IM (td_kernel.h) as a gather: one invocation per image element adds
// the patch entries copied from it in increasing (oy, ox) order from 0.0,
// so the sum is the reference's, without atomics.
#extension GL_GOOGLE_include_directive : require
#include "conv_common.glsl"

void main()
{
    uint step_ = gl_NumWorkGroups.x * 64u;
    int row = p.kh * p.kw * p.ch;
    for (uint e = gl_GlobalInvocationID.x; e < p.count; e += step_) {
        int t = int(e);
        int ch = t % p.ch; t /= p.ch;
        int ix = t % p.w; t /= p.w;
        int iy = t % p.h;
        int bi = t / p.h;
        precise float sum = 0.0;
        for (int i = p.kh - 1; i >= 0; i--) {
            int oy = window_of(iy, i, p.stride_h, p.pad_top, p.dil_h, p.oh);
            if (oy < 0)
                continue;
            for (int j = p.kw - 1; j >= 0; j--) {
                int ox = window_of(ix, j, p.stride_w, p.pad_left, p.dil_w, p.ow);
                if (ox < 0)
                    continue;
                sum += a.d[p.a_off + uint(((bi * p.oh + oy) * p.ow + ox) * row + (i * p.kw + j) * p.ch + ch)];
            }
        }
        o.d[p.out_off + e] = sum;
    }
}
