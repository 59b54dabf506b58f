#version 450
// GATHER_ROWS: out[i, :] = table[ids[i], :], a NaN row for an id outside
// [0, vocab); one invocation per output element.
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer Table { float d[]; } table;
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
    uint total = p.n * p.dim;
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint e = gl_GlobalInvocationID.x; e < total; e += stride) {
        uint i = e / p.dim, d = e % p.dim;
        int id = ids.d[p.b_off + i];
        float v = uintBitsToFloat(0x7fc00000u); // NaN
        if (id >= 0 && uint(id) < p.vocab)
            v = table.d[p.a_off + uint(id) * p.dim + d];
        o.d[p.out_off + e] = v;
    }
}
