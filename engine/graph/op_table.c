/* The op table: td_op -> its definition. */
#include "td_op.h"

static const td_op_def *const table[TD_OP_COUNT] = {
    [TD_OP_INPUT] = &td_op_input,
    [TD_OP_PARAM] = &td_op_param,
    [TD_OP_CONSTANT] = &td_op_constant,
    [TD_OP_AXIS_INDEX] = &td_op_axis_index,
    [TD_OP_SHARD_WEIGHT] = &td_op_shard_weight,
    [TD_OP_ELEMENTWISE] = &td_op_elementwise,
    [TD_OP_MATMUL] = &td_op_matmul,
    [TD_OP_SUM] = &td_op_sum,
    [TD_OP_SUM_TO] = &td_op_sum_to,
    [TD_OP_BROADCAST_TO] = &td_op_broadcast_to,
    [TD_OP_RESHAPE] = &td_op_reshape,
    [TD_OP_TRANSPOSE] = &td_op_transpose,
    [TD_OP_XENT] = &td_op_xent,
    [TD_OP_XENT_GRAD] = &td_op_xent_grad,
    [TD_OP_PSUM] = &td_op_psum,
    [TD_OP_PMEAN] = &td_op_pmean,
    [TD_OP_ALL_GATHER] = &td_op_all_gather,
    [TD_OP_BROADCAST] = &td_op_broadcast,
    [TD_OP_CONV2D] = &td_op_conv2d,
    [TD_OP_CONV2D_GRAD_KERNEL] = &td_op_conv2d_grad_kernel,
    [TD_OP_CONV2D_GRAD_INPUT] = &td_op_conv2d_grad_input,
    [TD_OP_POOL] = &td_op_pool,
    [TD_OP_POOL_GRAD] = &td_op_pool_grad,
    [TD_OP_SOFTMAX] = &td_op_softmax,
    [TD_OP_ARGMAX] = &td_op_argmax,
    [TD_OP_CAST] = &td_op_cast,
    [TD_OP_EMBEDDING] = &td_op_embedding,
    [TD_OP_EMBEDDING_GRAD] = &td_op_embedding_grad,
    [TD_OP_DROPOUT] = &td_op_dropout,
    [TD_OP_BY_MODE] = &td_op_by_mode,
    [TD_OP_BATCH_MATMUL] = &td_op_batch_matmul,
    [TD_OP_SLICE] = &td_op_slice,
    [TD_OP_SLICE_GRAD] = &td_op_slice_grad,
    [TD_OP_LAYER_NORM] = &td_op_layer_norm,
    [TD_OP_LAYER_NORM_GRAD] = &td_op_layer_norm_grad,
};

const td_op_def *td_op_def_of(td_op op)
{
    return table[op];
}
