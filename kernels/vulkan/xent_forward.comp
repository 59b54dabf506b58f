#version 450
// XENT_FORWARD: per row, softmax probabilities and the cross-entropy loss.
// One workgroup of 64 per row (rows grid-stride over the workgroups), as
// softmax.comp and for the same reasons: a vocabulary's row is long enough
// to split, and one invocation per row would exceed lavapipe's 65535 loop
// iterations per invocation. The maximum and the sum meet in a fixed tree.
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

shared float part[64];

void main()
{
    uint lane = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
        uint row = p.logits_off + r * p.cols;
        uint prow = p.prob_off + r * p.cols;
        float m = uintBitsToFloat(0xff800000u); // -inf
        for (uint c = lane; c < p.cols; c += 64u) {
            float v = logits.d[row + c];
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
        precise float sum = 0.0;
        for (uint c = lane; c < p.cols; c += 64u) {
            float e = exp(logits.d[row + c] - m);
            prob.d[prow + c] = e;
            sum += e;
        }
        part[lane] = sum;
        barrier();
        for (uint half_ = 32u; half_ > 0u; half_ >>= 1) {
            if (lane < half_) {
                precise float t = part[lane] + part[lane + half_];
                part[lane] = t;
            }
            barrier();
        }
        sum = part[0];
        barrier();
        float inv = 1.0 / sum;
        for (uint c = lane; c < p.cols; c += 64u)
            prob.d[prow + c] *= inv; // each lane rescales the columns it wrote
        if (lane == 0u) {
            int label = labels.d[p.labels_off + r];
            float l;
            if (label < 0 || label >= int(p.cols))
                l = uintBitsToFloat(0x7fc00000u); // NaN: the engine validates labels first
            else
                l = log(sum) - (logits.d[row + uint(label)] - m);
            loss.d[p.loss_off + r] = l;
        }
    }
}
