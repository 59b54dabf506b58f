#version 450
// LAYER_NORM: per row, xhat = (x - mean) * rstd and stats = {mean, rstd},
// one invocation per row in the reference's column order (td_kernel.h):
// rows are positions, a row a model's width.
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 1) writeonly buffer Stats { float d[]; } stats;
layout(std430, binding = 2) readonly buffer A { float d[]; } a;

layout(push_constant) uniform Params {
    uint rows;
    uint cols;
    uint out_off;
    uint stats_off;
    uint a_off;
    float epsilon;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 64u;
    for (uint r = gl_GlobalInvocationID.x; r < p.rows; r += stride) {
        uint row = p.a_off + r * p.cols;
        uint orow = p.out_off + r * p.cols;
        precise float s = 0.0;
        for (uint c = 0u; c < p.cols; c++)
            s += a.d[row + c];
        precise float mean = s / float(p.cols);
        precise float v = 0.0;
        for (uint c = 0u; c < p.cols; c++) {
            precise float d = a.d[row + c] - mean;
            precise float sq = d * d;
            v += sq;
        }
        float rstd = 1.0 / sqrt(v / float(p.cols) + p.epsilon);
        for (uint c = 0u; c < p.cols; c++) {
            precise float d = a.d[row + c] - mean;
            o.d[orow + c] = d * rstd;
        }
        stats.d[p.stats_off + 2u * r] = mean;
        stats.d[p.stats_off + 2u * r + 1u] = rstd;
    }
}
