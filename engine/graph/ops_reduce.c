/* Reductions and their adjoints: SUM (mean) over axes, SUM_TO (undo a
 * broadcast: the gradient of a broadcast operand) and BROADCAST_TO (the
 * gradient of a sum: stretch back over the reduced axes). */
#include "td_op.h"

static td_status infer_sum(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                           uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    uint32_t r = 0;
    for (uint32_t i = 0; i < in[0]->rank; i++) {
        if (n->attr.reduce.axes_mask & (1u << i)) {
            if (n->attr.reduce.keepdims)
                out->dims[r++] = 1;
        } else {
            out->dims[r++] = in[0]->dims[i];
        }
    }
    out->rank = r;
    return TD_OK;
}

static td_status infer_like(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                            uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[1];
    return TD_OK;
}

static td_status grad_sum(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    td_node_def d = td_node_make(TD_OP_BROADCAST_TO, 2, gy, n.in[0], 0);
    d.attr.reduce.axes_mask = n.attr.reduce.axes_mask;
    d.attr.reduce.mean = n.attr.reduce.mean; /* 1/count is fixed per device at compile time */
    td_node t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, n.in[0], t) : s;
}

static void emit_sum(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *a = &e->plan->shapes[nd->in[0]];
    int64_t st[TD_MAX_RANK];
    td_dense_strides(a, st);
    td_emit_reduce(c, a->rank, a->dims, st, nd->attr.reduce.axes_mask, 1.0f, nd->attr.reduce.mean);
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
}

/* g (shape G) summed down to like's shape L: reduce the axes that L
 * broadcasts (missing leading axes, or 1 where G is larger). */
static void emit_sum_to(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *gs = &e->plan->shapes[nd->in[0]], *ls = &e->plan->shapes[id];
    int64_t st[TD_MAX_RANK];
    td_dense_strides(gs, st);
    uint32_t lead = gs->rank - ls->rank, mask = 0;
    for (uint32_t i = 0; i < gs->rank; i++)
        if (i < lead || (ls->dims[i - lead] == 1 && gs->dims[i] != 1))
            mask |= 1u << i;
    td_emit_reduce(c, gs->rank, gs->dims, st, mask, 1.0f, false);
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
}

/* g holds like's non-reduced axes densely; stretch it over the reduced ones
 * with a zero stride (a SCALE by 1, or 1/count for a mean). */
static void emit_broadcast_to(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *ls = &e->plan->shapes[id];
    int64_t st[TD_MAX_RANK], s = 1, count = 1;
    for (int i = (int)ls->rank - 1; i >= 0; i--) {
        if (nd->attr.reduce.axes_mask & (1u << i)) {
            st[i] = 0;
            count *= ls->dims[i];
        } else {
            st[i] = s;
            s *= ls->dims[i];
        }
    }
    c->kernel = TD_KERNEL_ELEMENTWISE;
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
    c->p.ew.op = TD_EW_SCALE;
    c->p.ew.alpha = nd->attr.reduce.mean ? (count ? 1.0f / (float)count : 1.0f) : 1.0f;
    int64_t zero[TD_KERNEL_RANK] = {0}, dummy[TD_KERNEL_RANK];
    td_pad4(ls->rank, ls->dims, st, c->p.ew.dims, c->p.ew.a_strides);
    td_pad4(ls->rank, ls->dims, zero, dummy, c->p.ew.b_strides);
}

const td_op_def td_op_sum = {"sum", 0, infer_sum, grad_sum, NULL, NULL, emit_sum};
/* SUM_TO and BROADCAST_TO are made only by autodiff; their own gradients
 * (second derivatives) are not built in. */
const td_op_def td_op_sum_to = {"sum_to", 0, infer_like, NULL, NULL, NULL, emit_sum_to};
const td_op_def td_op_broadcast_to = {"broadcast_to", 0, infer_like, NULL, NULL, NULL, emit_broadcast_to};

/* ---- builders ---- */

static td_status reduce(td_graph *g, td_node a, uint32_t n_axes, const int32_t *axes, bool keepdims, bool mean,
                        td_node *out, const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    uint32_t rank = g->nodes[a].shape.rank;
    uint32_t mask = 0;
    if (n_axes == 0) {
        mask = (1u << rank) - 1;
    } else {
        if (!axes)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: axes is NULL for %u axes", fn, n_axes);
        for (uint32_t i = 0; i < n_axes; i++) {
            int32_t ax = axes[i] < 0 ? axes[i] + (int32_t)rank : axes[i];
            if (ax < 0 || ax >= (int32_t)rank)
                return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: axis %d is out of range for rank %u", fn,
                                    axes[i], rank);
            mask |= 1u << ax;
        }
    }
    td_node_def d = td_node_make(TD_OP_SUM, 1, a, 0, 0);
    d.attr.reduce.axes_mask = mask;
    d.attr.reduce.keepdims = keepdims;
    d.attr.reduce.mean = mean;
    return td_graph_append(g, &d, out);
}

td_status td_graph_sum(td_graph *g, td_node a, uint32_t n_axes, const int32_t *axes, bool keepdims, td_node *out)
{
    return reduce(g, a, n_axes, axes, keepdims, false, out, "td_graph_sum");
}

td_status td_graph_mean(td_graph *g, td_node a, uint32_t n_axes, const int32_t *axes, bool keepdims, td_node *out)
{
    return reduce(g, a, n_axes, axes, keepdims, true, out, "td_graph_mean");
}
