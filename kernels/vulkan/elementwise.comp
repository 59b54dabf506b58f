#version 450
// ELEMENTWISE over a rank-4 view with broadcasting strides (td_kernel.h).
// `precise` keeps every product and sum a separate rounding, as in the CPU
// reference, so results match it bitwise.
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

const int SCALE = 0, ADD = 1, SUB = 2, MUL = 3, AXPY = 4, RELU = 5, RELU_GRAD = 6;

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    bool binary = p.op != SCALE && p.op != RELU;
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
        precise float r;
        if (p.op == SCALE) {
            r = p.alpha * x;
        } else if (p.op == ADD) {
            r = x + y;
        } else if (p.op == SUB) {
            r = x - y;
        } else if (p.op == MUL) {
            r = x * y;
        } else if (p.op == AXPY) {
            precise float t2 = p.alpha * y;
            r = x + t2;
        } else if (p.op == RELU) {
            r = x > 0.0 ? x : (isnan(x) ? x : 0.0);
        } else {
            r = x > 0.0 ? y : 0.0;
        }
        o.d[p.out_off + i] = r;
    }
}
