#version 450
// CAST: u8 (from 0) or int32 (from 1) to float. u8 values are packed 4 per
// 32-bit word, byte k of the buffer being byte k % 4 of word k / 4 (little
// endian on every device tandem opens), so a is read as words.
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer A { uint d[]; } a;

layout(push_constant) uniform Params {
    uint n;
    uint out_off;
    uint a_off;
    uint from;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        float v;
        if (p.from == 0u)
            v = float(bitfieldExtract(a.d[p.a_off + (i >> 2u)], int((i & 3u) * 8u), 8));
        else
            v = float(int(a.d[p.a_off + i]));
        o.d[p.out_off + i] = v;
    }
}
