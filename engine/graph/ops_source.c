/* Ops with no operands: inputs, parameters, constants and the device index. */
#include "td_op.h"

static td_status infer_input(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                             uint32_t devices)
{
    const td_node_def *n = &g->nodes[id];
    (void)in;
    *out = n->attr.dims;
    if (n->placement != TD_SHARDED)
        return TD_OK;
    if (out->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "input '%s' is sharded but is a scalar (needs axis 0)",
                            n->name);
    if (out->dims[0] % devices != 0)
        return td_error_set(g->ctx, TD_ERR_NOT_DIVISIBLE,
                            "input '%s': batch size %lld (axis 0) does not split evenly over %u devices", n->name,
                            (long long)out->dims[0], devices);
    out->dims[0] /= devices;
    return TD_OK;
}

static td_status infer_requested(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)in;
    (void)devices;
    *out = g->nodes[id].attr.dims;
    return TD_OK;
}

static td_status infer_scalar(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                              uint32_t devices)
{
    (void)g, (void)id, (void)in, (void)devices;
    out->rank = 0;
    return TD_OK;
}

static td_status grad_none(td_grad_ctx *c, td_node id, td_node gy)
{
    (void)c, (void)id, (void)gy;
    return TD_OK; /* leaves of the graph: nothing upstream */
}

static void emit_fill(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_FILL;
    c->out = td_emit_arg(e, id);
    c->n = td_shape_count(&e->plan->shapes[id]);
    c->alpha = n->op == TD_OP_CONSTANT     ? n->attr.value
               : n->op == TD_OP_SHARD_WEIGHT ? e->plan->shard_weight
                                             : (float)e->position;
}

const td_op_def td_op_input = {"input", TD_OPF_SOURCE, infer_input, grad_none, NULL, NULL, NULL};
const td_op_def td_op_param = {"param", TD_OPF_SOURCE, infer_requested, grad_none, NULL, NULL, NULL};
/* Constants are scalars; ops broadcast them. */
const td_op_def td_op_constant = {"constant", 0, infer_scalar, grad_none, NULL, NULL, emit_fill};
const td_op_def td_op_axis_index = {"axis_index", 0, infer_scalar, grad_none, NULL, NULL, emit_fill};
const td_op_def td_op_shard_weight = {"shard_weight", 0, infer_scalar, grad_none, NULL, NULL, emit_fill};
