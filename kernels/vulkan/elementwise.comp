#version 450
// ELEMENTWISE over a rank-4 view with broadcasting strides (td_kernel.h),
// for every op of kernels/common/td_ew_ops.h. `precise` keeps every product
// and sum a separate rounding, as in the CPU reference, so the arithmetic
// ops match it bitwise.
#extension GL_GOOGLE_include_directive : require
#include "td_ew_ops.h"

layout(local_size_x = 256) in;

// Not writeonly/readonly: out may alias a or b exactly.
layout(std430, binding = 0) buffer Out { float d[]; } o;
layout(std430, binding = 2) buffer A { float d[]; } a;
layout(std430, binding = 3) buffer B { float d[]; } b;

layout(push_constant) uniform Params {
    ivec4 dims;
    ivec4 a_strides;
    ivec4 b_strides;
    int op;
    float alpha;
    uint n;
    uint out_off;
    int a_off;
    int b_off;
} p;

// GLSL has no erf: Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7,
// about one float ulp of erf near 1. The conformance tests bound GELU
// (exact) against the reference with that in mind.
float td_erf(float x)
{
    float s = sign(x), v = abs(x);
    float t = 1.0 / (1.0 + 0.3275911 * v);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - poly * exp(-v * v));
}

#define TD_EXP exp
#define TD_LOG log
#define TD_SQRT sqrt
#define TD_TANH tanh
#define TD_ERF td_erf
#define TD_ISNAN isnan

int td_ew_arity(int op)
{
    switch (op) {
#define TD_EW_ARITY_CASE(id, NAME, arity, exact, expr) case id: return arity;
    TD_EW_OPS(TD_EW_ARITY_CASE)
    }
    return 0;
}

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    bool binary = td_ew_arity(p.op) == 2;
    float alpha = p.alpha;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        int t = int(i);
        ivec4 idx;
        idx.w = t % p.dims.w; t /= p.dims.w;
        idx.z = t % p.dims.z; t /= p.dims.z;
        idx.y = t % p.dims.y; t /= p.dims.y;
        idx.x = t;
        int ia = p.a_off + idx.x * p.a_strides.x + idx.y * p.a_strides.y + idx.z * p.a_strides.z +
                 idx.w * p.a_strides.w;
        precise float x = a.d[ia];
        precise float y = 0.0;
        if (binary) {
            int ib = p.b_off + idx.x * p.b_strides.x + idx.y * p.b_strides.y + idx.z * p.b_strides.z +
                     idx.w * p.b_strides.w;
            y = b.d[ib];
        }
        precise float r = 0.0;
        switch (p.op) {
#define TD_EW_APPLY_CASE(id, NAME, arity, exact, expr) case id: r = (expr); break;
        TD_EW_OPS(TD_EW_APPLY_CASE)
        }
        o.d[p.out_off + i] = r;
    }
}
