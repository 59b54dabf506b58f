#version 450
// COPY: out[i] = a[i] for i < n (out == a exactly is allowed; partial
// overlap is rejected on the host).
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer A { float d[]; } a;

layout(push_constant) uniform Params {
    uint n;
    uint out_off;
    uint a_off;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride)
        o.d[p.out_off + i] = a.d[p.a_off + i];
}
