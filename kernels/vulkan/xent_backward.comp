#version 450
// XENT_BACKWARD: out[r,c] = upstream[r] * (prob[r,c] - (c == label[r])).
layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Grad { float d[]; } grad;
layout(std430, binding = 2) readonly buffer Prob { float d[]; } prob;
layout(std430, binding = 3) readonly buffer Labels { int d[]; } labels;
layout(std430, binding = 4) readonly buffer Upstream { float d[]; } up;

layout(push_constant) uniform Params {
    uint n;
    uint cols;
    uint grad_off;
    uint prob_off;
    uint labels_off;
    uint up_off;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uint r = i / p.cols;
        uint c = i % p.cols;
        precise float onehot = int(c) == labels.d[p.labels_off + r] ? 1.0 : 0.0;
        precise float diff = prob.d[p.prob_off + i] - onehot;
        precise float g = up.d[p.up_off + r] * diff;
        grad.d[p.grad_off + i] = g;
    }
}
