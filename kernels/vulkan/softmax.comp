#version 450
// SOFTMAX: softmax (mode 0) or log-softmax (mode 1) per row, causal with
// mode bit 2 (TD_ROWS_CAUSAL), one invocation
// per row in the contract's column order (rows are examples, a row is a few
// thousand classes at most: too short to split).
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

void main()
{
    uint stride = gl_NumWorkGroups.x * 64u;
    for (uint r = gl_GlobalInvocationID.x; r < p.rows; r += stride) {
        uint row = p.a_off + r * p.cols;
        uint orow = p.out_off + r * p.cols;
        uint seen = (p.mode & 2u) != 0u ? r % p.cols + 1u : p.cols; // TD_ROWS_CAUSAL
        float m = uintBitsToFloat(0xff800000u); // -inf
        for (uint c = 0u; c < seen; c++) {
            float v = a.d[row + c];
            m = v > m ? v : m;
        }
        precise float s = 0.0;
        for (uint c = 0u; c < seen; c++)
            s += exp(a.d[row + c] - m);
        if ((p.mode & 1u) == 0u) {
            float inv = 1.0 / s;
            for (uint c = 0u; c < seen; c++)
                o.d[orow + c] = exp(a.d[row + c] - m) * inv;
            for (uint c = seen; c < p.cols; c++)
                o.d[orow + c] = 0.0;
        } else {
            float ls = log(s);
            for (uint c = 0u; c < seen; c++) {
                precise float x = a.d[row + c] - m;
                o.d[orow + c] = x - ls;
            }
            for (uint c = seen; c < p.cols; c++)
                o.d[orow + c] = uintBitsToFloat(0xff800000u);
        }
    }
}
