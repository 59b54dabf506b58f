/* A call on the CPU reference (kernels/cpu), over host copies of a case's
 * buffers: the expected result every backend is compared with. */
#include "td_conformance_reference.h"

#include "td_reference.h"

bool td_conformance_reference(const td_kernel_call *call, float *const at[TD_ROW_SLOTS])
{
    float *out = at[TD_ROW_OUT], *out2 = at[TD_ROW_OUT2];
    const float *a = at[TD_ROW_A], *b = at[TD_ROW_B], *c = at[TD_ROW_C];
    /* Labels and ids are int32 and dropout's step words uint32, stored in
     * the same 4-byte element slots as the floats. */
    const int32_t *b_words = (const int32_t *)b;
    switch (call->kernel) {
    case TD_KERNEL_FILL: td_reference_fill(out, call->n, call->alpha); return true;
    case TD_KERNEL_COPY: td_reference_copy(out, a, call->n); return true;
    case TD_KERNEL_ELEMENTWISE: td_reference_elementwise(out, a, b, &call->p.ew); return true;
    case TD_KERNEL_REDUCE: td_reference_reduce(out, a, &call->p.reduce); return true;
    case TD_KERNEL_GEMM: td_reference_gemm(out, a, b, &call->p.gemm); return true;
    case TD_KERNEL_XENT_FORWARD: td_reference_xent_forward(out, out2, a, b_words, &call->p.xent); return true;
    case TD_KERNEL_XENT_BACKWARD: td_reference_xent_backward(out, a, b_words, c, &call->p.xent); return true;
    case TD_KERNEL_IM2COL: td_reference_im2col(out, a, &call->p.conv); return true;
    case TD_KERNEL_COL2IM: td_reference_col2im(out, a, &call->p.conv); return true;
    case TD_KERNEL_POOL: td_reference_pool(out, a, &call->p.pool); return true;
    case TD_KERNEL_POOL_BACKWARD: td_reference_pool_backward(out, a, b, c, &call->p.pool); return true;
    case TD_KERNEL_SOFTMAX: td_reference_softmax(out, a, &call->p.rows); return true;
    case TD_KERNEL_ARGMAX: td_reference_argmax(out, a, &call->p.rows); return true;
    case TD_KERNEL_CAST: td_reference_cast(out, a, &call->p.cast); return true;
    case TD_KERNEL_DROPOUT_MASK:
        td_reference_dropout_mask(out, (const uint32_t *)b, &call->p.dropout);
        return true;
    case TD_KERNEL_GATHER_ROWS: td_reference_gather_rows(out, a, b_words, &call->p.gather); return true;
    case TD_KERNEL_SCATTER_ADD_ROWS: td_reference_scatter_add_rows(out, a, b_words, &call->p.gather); return true;
    case TD_KERNEL_LAYER_NORM: td_reference_layer_norm(out, out2, a, &call->p.rows); return true;
    case TD_KERNEL_LAYER_NORM_BACKWARD: td_reference_layer_norm_backward(out, a, b, c, &call->p.rows); return true;
    default: return false;
    }
}
