#version 450
// REDUCE: out[o] = alpha * sum_r a[base(o) + r . red_strides] (td_kernel.h).
// mode 0: one invocation per output, summing in the reference's row-major
// order (many outputs, short sums). mode 1: one workgroup per output, each
// invocation summing a strided share, then a tree in shared memory (few
// outputs, long sums: a serial sum there would leave the device idle).
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer A { float d[]; } a;

layout(push_constant) uniform Params {
    ivec4 out_dims;
    ivec4 out_strides;
    ivec4 red_dims;
    ivec4 red_strides;
    float alpha;
    uint out_off;
    int a_off;
    uint out_count;
    uint red_count;
    uint mode;
} p;

shared float partial[256];

int base_of(uint oi)
{
    int t = int(oi);
    ivec4 idx;
    idx.w = t % p.out_dims.w; t /= p.out_dims.w;
    idx.z = t % p.out_dims.z; t /= p.out_dims.z;
    idx.y = t % p.out_dims.y; t /= p.out_dims.y;
    idx.x = t;
    return p.a_off + idx.x * p.out_strides.x + idx.y * p.out_strides.y + idx.z * p.out_strides.z +
           idx.w * p.out_strides.w;
}

int red_offset(uint ri)
{
    int t = int(ri);
    ivec4 idx;
    idx.w = t % p.red_dims.w; t /= p.red_dims.w;
    idx.z = t % p.red_dims.z; t /= p.red_dims.z;
    idx.y = t % p.red_dims.y; t /= p.red_dims.y;
    idx.x = t;
    return idx.x * p.red_strides.x + idx.y * p.red_strides.y + idx.z * p.red_strides.z +
           idx.w * p.red_strides.w;
}

void main()
{
    if (p.mode == 0u) {
        uint stride = gl_NumWorkGroups.x * 256u;
        for (uint oi = gl_GlobalInvocationID.x; oi < p.out_count; oi += stride) {
            int base = base_of(oi);
            float sum = 0.0;
            for (int r0 = 0; r0 < p.red_dims.x; r0++)
                for (int r1 = 0; r1 < p.red_dims.y; r1++)
                    for (int r2 = 0; r2 < p.red_dims.z; r2++) {
                        int row = base + r0 * p.red_strides.x + r1 * p.red_strides.y +
                                  r2 * p.red_strides.z;
                        for (int r3 = 0; r3 < p.red_dims.w; r3++)
                            sum += a.d[row + r3 * p.red_strides.w];
                    }
            o.d[p.out_off + oi] = p.alpha * sum;
        }
        return;
    }
    uint lid = gl_LocalInvocationID.x;
    // oi is the same for the whole workgroup, so the barriers are uniform.
    for (uint oi = gl_WorkGroupID.x; oi < p.out_count; oi += gl_NumWorkGroups.x) {
        int base = base_of(oi);
        float sum = 0.0;
        for (uint ri = lid; ri < p.red_count; ri += 256u)
            sum += a.d[base + red_offset(ri)];
        partial[lid] = sum;
        barrier();
        for (uint half_ = 128u; half_ > 0u; half_ >>= 1) {
            if (lid < half_)
                partial[lid] += partial[lid + half_];
            barrier();
        }
        if (lid == 0u)
            o.d[p.out_off + oi] = p.alpha * partial[0];
        barrier();
    }
}
