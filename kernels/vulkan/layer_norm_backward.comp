#version 450
// LAYER_NORM_BACKWARD: per row, dx = rstd * ((g - mean g) - xhat * mean(g xhat)),
// one invocation per row in the reference's column order (td_kernel.h).
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer G { float d[]; } g;
layout(std430, binding = 3) readonly buffer X { float d[]; } xhat;
layout(std430, binding = 4) readonly buffer Stats { float d[]; } stats;

layout(push_constant) uniform Params {
    uint rows;
    uint cols;
    uint out_off;
    uint g_off;
    uint x_off;
    uint stats_off;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 64u;
    for (uint r = gl_GlobalInvocationID.x; r < p.rows; r += stride) {
        uint grow = p.g_off + r * p.cols, xrow = p.x_off + r * p.cols, orow = p.out_off + r * p.cols;
        precise float sg = 0.0, sgx = 0.0;
        for (uint c = 0u; c < p.cols; c++) {
            float gv = g.d[grow + c];
            precise float gx = gv * xhat.d[xrow + c];
            sg += gv;
            sgx += gx;
        }
        float mg = sg / float(p.cols), mgx = sgx / float(p.cols);
        float rstd = stats.d[p.stats_off + 2u * r + 1u];
        for (uint c = 0u; c < p.cols; c++) {
            precise float centred = g.d[grow + c] - mg;
            precise float along = xhat.d[xrow + c] * mgx;
            precise float diff = centred - along;
            o.d[orow + c] = rstd * diff;
        }
    }
}
