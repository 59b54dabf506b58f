#version 450
// ARGMAX: the column of each row's first maximum as a float; a > m
// replaces, the first NaN wins. An empty row gives NaN (no column to name).
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer A { float d[]; } a;

layout(push_constant) uniform Params {
    uint rows;
    uint cols;
    uint out_off;
    uint a_off;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 64u;
    for (uint r = gl_GlobalInvocationID.x; r < p.rows; r += stride) {
        if (p.cols == 0u) {
            o.d[p.out_off + r] = uintBitsToFloat(0x7fc00000u);
            continue;
        }
        uint row = p.a_off + r * p.cols;
        uint best = 0u;
        float m = a.d[row];
        for (uint c = 1u; c < p.cols && !isnan(m); c++) {
            float v = a.d[row + c];
            if (isnan(v) || v > m) {
                m = v;
                best = c;
            }
        }
        o.d[p.out_off + r] = float(best);
    }
}
