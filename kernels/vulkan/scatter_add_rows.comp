#version 450
// SCATTER_ADD_ROWS: out[v, :] = sum of g[i, :] over ids[i] == v in
// increasing i. A gather formulation: each (v, column) scans every id in the
// contract's order, so no atomics and a reproducible sum.
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer G { float d[]; } g;
layout(std430, binding = 3) readonly buffer Ids { int d[]; } ids;

layout(push_constant) uniform Params {
    uint n;
    uint vocab;
    uint dim;
    uint out_off;
    uint a_off;
    uint b_off;
} p;

void main()
{
    uint total = p.vocab * p.dim;
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint e = gl_GlobalInvocationID.x; e < total; e += stride) {
        int v = int(e / p.dim);
        uint d = e % p.dim;
        precise float s = 0.0;
        for (uint i = 0u; i < p.n; i++)
            if (ids.d[p.b_off + i] == v)
                s += g.d[p.a_off + i * p.dim + d];
        o.d[p.out_off + e] = s;
    }
}
