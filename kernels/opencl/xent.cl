/* Softmax cross-entropy (td_kernel.h): forward one work-item per row (three
 * passes over the row, as the reference), backward one per element. */
#pragma OPENCL FP_CONTRACT OFF

__kernel void td_xent_forward(__global float *loss, ulong loss_off, __global float *prob,
                              ulong prob_off, __global const float *logits, ulong logits_off,
                              __global const int *labels, ulong labels_off, long rows, long cols)
{
    long r = (long)get_global_id(0);
    if (r >= rows)
        return;
    __global const float *row = logits + logits_off + r * cols;
    __global float *prow = prob + prob_off + r * cols;
    float mx = -INFINITY;
    for (long c = 0; c < cols; c++)
        mx = row[c] > mx ? row[c] : mx;
    float sum = 0.0f;
    for (long c = 0; c < cols; c++) {
        float e = exp(row[c] - mx);
        prow[c] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (long c = 0; c < cols; c++)
        prow[c] *= inv;
    int label = labels[labels_off + r];
    loss[loss_off + r] = (label < 0 || label >= cols) ? NAN : log(sum) - (row[label] - mx);
}

__kernel void td_xent_backward(__global float *grad, ulong grad_off, __global const float *prob,
                               ulong prob_off, __global const int *labels, ulong labels_off,
                               __global const float *upstream, ulong upstream_off, long rows,
                               long cols)
{
    size_t i = get_global_id(0);
    if (i >= (ulong)(rows * cols))
        return;
    long r = (long)i / cols;
    long c = (long)i % cols;
    float onehot = c == labels[labels_off + r] ? 1.0f : 0.0f;
    grad[grad_off + i] = upstream[upstream_off + r] * (prob[prob_off + i] - onehot);
}
