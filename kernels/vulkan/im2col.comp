#version 450
// IM2COL (td_kernel.h): one invocation per patch element, zero for padding.
#extension GL_GOOGLE_include_directive : require
#include "conv_common.glsl"

void main()
{
    uint step_ = gl_NumWorkGroups.x * 64u;
    for (uint e = gl_GlobalInvocationID.x; e < p.count; e += step_) {
        int t = int(e);
        int ch = t % p.ch; t /= p.ch;
        int j = t % p.kw; t /= p.kw;
        int i = t % p.kh; t /= p.kh;
        int ox = t % p.ow; t /= p.ow;
        int oy = t % p.oh;
        int bi = t / p.oh;
        int iy = oy * p.stride_h - p.pad_top + i * p.dil_h;
        int ix = ox * p.stride_w - p.pad_left + j * p.dil_w;
        float v = 0.0;
        if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w)
            v = a.d[p.a_off + uint(((bi * p.h + iy) * p.w + ix) * p.ch + ch)];
        o.d[p.out_off + e] = v;
    }
}
