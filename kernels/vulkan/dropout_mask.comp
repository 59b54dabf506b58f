#version 450
// DROPOUT_MASK: keep (scale) or drop (0) from Philox4x32-10 words computed
// exactly as engine/core/random.c does on the host. One invocation per four
// columns of a row: one Philox block gives their four words.
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 3) readonly buffer B { uint d[]; } b; // step, first example

layout(push_constant) uniform Params {
    uint rows;
    uint cols;
    uint out_off;
    uint b_off;
    uint seed_lo;
    uint seed_hi;
    uint threshold;
    float scale;
} p;

uvec4 philox(uvec4 ctr, uvec2 key)
{
    for (int round = 0; round < 10; round++) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, ctr.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, ctr.z, hi1, lo1);
        ctr = uvec4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
        key += uvec2(0x9E3779B9u, 0xBB67AE85u);
    }
    return ctr;
}

void main()
{
    uint blocks = (p.cols + 3u) / 4u;
    uint total = p.rows * blocks;
    uint stride = gl_NumWorkGroups.x * 64u;
    uint step = b.d[p.b_off], first = b.d[p.b_off + 1u];
    for (uint g = gl_GlobalInvocationID.x; g < total; g += stride) {
        uint r = g / blocks, q = g % blocks;
        uvec4 w = philox(uvec4(q, first + r, step, 0x64726f70u), uvec2(p.seed_lo, p.seed_hi));
        uint base = p.out_off + r * p.cols + q * 4u;
        for (uint k = 0u; k < 4u && q * 4u + k < p.cols; k++)
            o.d[base + k] = w[k] < p.threshold ? p.scale : 0.0;
    }
}
