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

/* ---- builders ---- */

static td_status xent_rows(td_graph *g, td_node logits, td_node labels, td_node *out, const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, logits, fn, TD_F32)) != TD_OK ||
        (s = td_graph_check_node(g, labels, fn, TD_I32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_XENT, 2, logits, labels, 0);
    return td_graph_append(g, &d, out);
}

td_status td_graph_softmax_cross_entropy(td_graph *g, td_node logits, td_node labels, td_node *out)
{
    td_node rows;
    td_status s = xent_rows(g, logits, labels, &rows, "td_graph_softmax_cross_entropy");
    return s == TD_OK ? td_graph_mean(g, rows, 0, NULL, false, out) : s;
}

td_status td_graph_softmax_cross_entropy_per_example(td_graph *g, td_node logits, td_node labels, td_node *out)
{
    return xent_rows(g, logits, labels, out, "td_graph_softmax_cross_entropy_per_example");
}

/* Built from existing ops so every backend lowers it and autodiff needs no
 * new rule: the count path depends on the mask only, so no gradient flows
 * through the pmean. 2^-20 is below any device-average of a 0/1 count that
 * is not zero (1/N) and keeps 1/den far from overflow when the loss is
 * scaled afterwards. */
td_status td_graph_masked_mean(td_graph *g, td_node per_example, td_node mask, td_node *out)
{
    const char *fn = "td_graph_masked_mean";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, per_example, fn, TD_F32)) != TD_OK || (s = td_graph_check_node(g, mask, fn, TD_F32)) != TD_OK)
        return s;
    const td_shape *xs = &g->nodes[per_example].shape, *ms = &g->nodes[mask].shape;
    if (xs->rank < 1)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: per_example (node %u) is a scalar, expected [B] or [B, ...]",
                            fn, per_example);
    if (ms->rank != 1 || ms->dims[0] != xs->dims[0]) {
        char a[96], b[96];
        td_shape_format(ms, a, sizeof a);
        td_shape_format(xs, b, sizeof b);
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: mask (node %u) has shape %s, expected [%lld] to match per_example %s",
                            fn, mask, a, (long long)xs->dims[0], b);
    }
    td_node x = per_example, masked, local, count, avg_count, tiny, den, weight;
    if (xs->rank > 1) {
        int32_t axes[TD_MAX_RANK];
        for (uint32_t i = 1; i < xs->rank; i++)
            axes[i - 1] = (int32_t)i;
        if ((s = td_graph_mean(g, per_example, xs->rank - 1, axes, false, &x)) != TD_OK)
            return s;
    }
    if ((s = td_graph_mul(g, x, mask, &masked)) != TD_OK || (s = td_graph_sum(g, masked, 0, NULL, false, &local)) != TD_OK ||
        (s = td_graph_sum(g, mask, 0, NULL, false, &count)) != TD_OK || (s = td_graph_pmean(g, count, &avg_count)) != TD_OK ||
        (s = td_graph_constant(g, 0x1p-20f, &tiny)) != TD_OK || (s = td_graph_maximum(g, avg_count, tiny, &den)) != TD_OK)
        return s;
    /* Already global: divided by the shard weight, so the trainer's
     * weighted mean over the devices gives it back on any split (the
     * weight is exactly 1 on an even one). */
    if ((s = td_graph_shard_weight(g, &weight)) != TD_OK || (s = td_graph_mul(g, den, weight, &den)) != TD_OK)
        return s;
    return td_graph_div(g, local, den, out);
}
