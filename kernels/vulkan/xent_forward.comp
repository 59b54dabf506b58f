#version 450
// XENT_FORWARD: per row, softmax probabilities and the cross-entropy loss,
// one invocation per row in the reference's order (rows are a batch, cols a
// handful of classes: a row is too short to split).
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Loss { float d[]; } loss;
layout(std430, binding = 1) buffer Prob { float d[]; } prob;
layout(std430, binding = 2) readonly buffer Logits { float d[]; } logits;
layout(std430, binding = 3) readonly buffer Labels { int d[]; } labels;

layout(push_constant) uniform Params {
    uint rows;
    uint cols;
    uint loss_off;
    uint prob_off;
    uint logits_off;
    uint labels_off;
} p;

void main()
{
    uint stride = gl_NumWorkGroups.x * 64u;
    for (uint r = gl_GlobalInvocationID.x; r < p.rows; r += stride) {
        uint row = p.logits_off + r * p.cols;
        uint prow = p.prob_off + r * p.cols;
        float m = uintBitsToFloat(0xff800000u); // -inf
        for (uint c = 0u; c < p.cols; c++) {
            float v = logits.d[row + c];
            m = v > m ? v : m;
        }
        float sum = 0.0;
        for (uint c = 0u; c < p.cols; c++) {
            float e = exp(logits.d[row + c] - m);
            prob.d[prow + c] = e;
            sum += e;
        }
        float inv = 1.0 / sum;
        for (uint c = 0u; c < p.cols; c++)
            prob.d[prow + c] *= inv;
        int label = labels.d[p.labels_off + r];
        float l;
        if (label < 0 || label >= int(p.cols))
            l = uintBitsToFloat(0x7fc00000u); // NaN: the engine validates labels first
        else
            l = log(sum) - (logits.d[row + uint(label)] - m);
        loss.d[p.loss_off + r] = l;
    }
}
