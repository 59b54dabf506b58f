#version 450
// SOFTMAX: softmax (mode bit 0 clear) or log-softmax (set) per row, causal
// with mode bit 1 (TD_ROWS_CAUSAL: row r sees its first r mod cols + 1
// columns). One workgroup of 64 per row (rows grid-stride over the
// workgroups): lane l takes columns l, l + 64, ...; the maximum and the sum
// meet in shared memory in a fixed tree, so results are deterministic; the
// sum's order is not the reference's column order (softmax is an "ulp"
// kernel). One invocation per row would also run into lavapipe's limit of
// 65535 loop iterations per invocation from about 32768 columns (a
// vocabulary's logits), past which it silently leaves loops.
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer A { float d[]; } a;

layout(push_constant) uniform Params {
    uint rows;
    uint cols;
    uint out_off;
    uint a_off;
    uint mode;
} p;

shared float part[64];

void main()
{
    uint lane = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
        uint row = p.a_off + r * p.cols;
        uint orow = p.out_off + r * p.cols;
        uint seen = (p.mode & 2u) != 0u ? r % p.cols + 1u : p.cols;
        float m = uintBitsToFloat(0xff800000u); // -inf
        for (uint c = lane; c < seen; c += 64u) {
            float v = a.d[row + c];
            m = v > m ? v : m;
        }
        part[lane] = m;
        barrier();
        for (uint half_ = 32u; half_ > 0u; half_ >>= 1) {
            if (lane < half_) {
                float v = part[lane + half_];
                part[lane] = v > part[lane] ? v : part[lane];
            }
            barrier();
        }
        m = part[0];
        barrier();
        precise float s = 0.0;
        for (uint c = lane; c < seen; c += 64u)
            s += exp(a.d[row + c] - m);
        part[lane] = s;
        barrier();
        for (uint half_ = 32u; half_ > 0u; half_ >>= 1) {
            if (lane < half_) {
                precise float t = part[lane] + part[lane + half_];
                part[lane] = t;
            }
            barrier();
        }
        s = part[0];
        barrier();
        if ((p.mode & 1u) == 0u) {
            float inv = 1.0 / s;
            for (uint c = lane; c < p.cols; c += 64u)
                o.d[orow + c] = c < seen ? exp(a.d[row + c] - m) * inv : 0.0;
        } else {
            float ls = log(s);
            for (uint c = lane; c < p.cols; c += 64u) {
                precise float x = a.d[row + c] - m;
                o.d[orow + c] = c < seen ? x - ls : uintBitsToFloat(0xff800000u);
            }
        }
    }
}
