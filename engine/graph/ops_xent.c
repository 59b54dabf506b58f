/* Softmax cross-entropy: XENT gives the per-row loss and keeps the row's
 * probabilities in its extra arena memory, which XENT_GRAD reads. */
#include "td_op.h"

static td_status infer_xent(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                            uint32_t devices)
{
    (void)devices;
    if (in[0]->rank != 2 || in[1]->rank != 1 || in[0]->dims[0] != in[1]->dims[0])
        return td_shape_mismatch(g, id, "softmax cross-entropy expects logits [B, C] and labels [B]", in[0], in[1]);
    out->rank = 1;
    out->dims[0] = in[0]->dims[0];
    return TD_OK;
}

static uint64_t extra_xent(const td_graph *g, const td_plan *plan, td_node id)
{
    return (uint64_t)td_shape_count(&plan->shapes[g->nodes[id].in[0]]); /* the probabilities */
}

static td_status grad_xent(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    td_node logits = g->nodes[id].in[0], labels = g->nodes[id].in[1], t;
    td_node_def d = td_node_make(TD_OP_XENT_GRAD, 3, id, labels, gy);
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, logits, t) : s;
}

static void emit_xent(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *l = &e->plan->shapes[nd->in[0]];
    c->kernel = TD_KERNEL_XENT_FORWARD;
    c->out = td_emit_arg(e, id);
    c->out2 = c->out;
    c->out2.offset = e->plan->slots[id].extra;
    c->a = td_emit_arg(e, nd->in[0]);
    c->b = td_emit_arg(e, nd->in[1]);
    c->p.xent.rows = l->dims[0];
    c->p.xent.cols = l->dims[1];
}

static td_status infer_xent_grad(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)devices;
    /* The logits' shape: the xent node's (per-device) rows, and the
     * columns of its logits, which sharding never splits. */
    td_node logits = g->nodes[g->nodes[id].in[0]].in[0];
    out->rank = 2;
    out->dims[0] = in[0]->dims[0];
    out->dims[1] = g->nodes[logits].shape.dims[1];
    return TD_OK;
}

static void emit_xent_grad(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    td_node x = nd->in[0];
    const td_shape *l = &e->plan->shapes[e->g->nodes[x].in[0]];
    c->kernel = TD_KERNEL_XENT_BACKWARD;
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, x);
    c->a.offset = e->plan->slots[x].extra;
    c->b = td_emit_arg(e, nd->in[1]);
    c->c = td_emit_arg(e, nd->in[2]);
    c->p.xent.rows = l->dims[0];
    c->p.xent.cols = l->dims[1];
}

const td_op_def td_op_xent = {"softmax_cross_entropy", 0, infer_xent, grad_xent, NULL, extra_xent, emit_xent};
const td_op_def td_op_xent_grad = {"softmax_cross_entropy_grad", 0, infer_xent_grad, NULL, NULL, NULL,
                                   emit_xent_grad};
