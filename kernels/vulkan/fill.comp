#version 450
// FILL: out[i] = alpha for i < n. Grid-stride, so any n fits a capped grid.
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;

layout(push_constant) uniform Params {
    uint n;
    uint out_off;
    float alpha;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride)
        o.d[p.out_off + i] = p.alpha;
}
