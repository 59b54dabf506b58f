/* Layer normalization over the last axis: LAYER_NORM gives xhat = (x -
 * mean) / sqrt(var + epsilon) per row in one kernel and keeps the row's
 * {mean, 1/std} in its extra arena memory; LAYER_NORM_GRAD (gy, the norm
 * node) reads xhat and those statistics back for dx in one kernel. The
 * affine scale and bias are ordinary broadcast ops after it. One pass each
 * way instead of the nine composed ops (and their fifteen-odd gradient
 * passes) the normalization used to be. */
#include "td_op.h"

static td_status infer_norm(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out, uint32_t devices)
{
    (void)devices;
    if (in[0]->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "node %u: layer_norm needs rank >= 1 (it normalises the last axis)", id);
    *out = *in[0];
    return TD_OK;
}

static uint64_t extra_norm(const td_graph *g, const td_plan *plan, td_node id)
{
    td_rows_params p = td_rows_of(&plan->shapes[id], 0, 0.0f);
    (void)g;
    return 2 * (uint64_t)p.rows; /* {mean, rstd} per row */
}

static void emit_norm(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    c->kernel = TD_KERNEL_LAYER_NORM;
    c->out = td_emit_arg(e, id);
    c->out2 = c->out;
    c->out2.offset = e->plan->slots[id].extra;
    c->a = td_emit_arg(e, nd->in[0]);
    c->p.rows = td_rows_of(&e->plan->shapes[id], 0, nd->attr.value);
}

static td_status grad_norm(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    td_node x = g->nodes[id].in[0], t;
    td_node_def d = td_node_make(TD_OP_LAYER_NORM_GRAD, 2, gy, id, 0);
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, x, t) : s;
}

static td_status infer_norm_grad(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[1];
    return TD_OK;
}

static void emit_norm_grad(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    td_node norm = nd->in[1];
    c->kernel = TD_KERNEL_LAYER_NORM_BACKWARD;
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
    c->b = td_emit_arg(e, norm);
    c->c = c->b;
    c->c.offset = e->plan->slots[norm].extra;
    c->p.rows = td_rows_of(&e->plan->shapes[id], 0, 0.0f);
}

const td_op_def td_op_layer_norm = {"layer_norm", 0, infer_norm, grad_norm, NULL, extra_norm, emit_norm};
const td_op_def td_op_layer_norm_grad = {"layer_norm_grad", 0, infer_norm_grad, NULL, NULL, NULL, emit_norm_grad};

/* ---- builders ---- */

td_status td_graph_layer_norm(td_graph *g, td_node x, td_node scale, td_node bias, float epsilon, td_node *out)
{
    const char *fn = "td_graph_layer_norm";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    if (!(epsilon > 0.0f) || epsilon != epsilon || epsilon > 1.0f)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: epsilon %g, expected in (0, 1]", fn,
                            (double)epsilon);
    const td_shape *xs = &g->nodes[x].shape;
    if (xs->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: x is a scalar, expected rank >= 1 (normalises the last axis)",
                            fn);
    int64_t features = xs->dims[xs->rank - 1];
    const td_node affine[2] = {scale, bias};
    for (int i = 0; i < 2; i++) {
        if (affine[i] == TD_NO_NODE)
            continue;
        if ((s = td_graph_check_node(g, affine[i], fn, TD_F32)) != TD_OK)
            return s;
        const td_shape *as = &g->nodes[affine[i]].shape;
        if (as->rank != 1 || as->dims[0] != features)
            return td_shape_mismatch(g, affine[i], i ? "layer_norm bias must be [features]" : "layer_norm scale must be [features]",
                                     as, xs);
    }
    td_node_def d = td_node_make(TD_OP_LAYER_NORM, 1, x, 0, 0);
    d.attr.value = epsilon;
    td_node y;
    if ((s = td_graph_append(g, &d, &y)) != TD_OK)
        return s;
    return td_graph_affine(g, y, scale, bias, out);
}
