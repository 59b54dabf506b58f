/* Ops that move elements without computing: RESHAPE (no kernel: the node
 * aliases its input's memory) and TRANSPOSE (one strided elementwise copy,
 * a SCALE by 1, which is exact). */
#include <string.h>

#include "td_op.h"

static td_status infer_reshape(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                               uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    const td_shape *a = in[0];
    if (n->n_in == 2) { /* reshape like another node (gradients) */
        *out = *in[1];
        if (td_shape_count(out) != td_shape_count(a))
            return td_shape_mismatch(g, id, "reshape changes the element count", a, in[1]);
        return TD_OK;
    }
    int64_t known = 1, total = td_shape_count(a);
    int infer_at = -1;
    *out = n->attr.dims;
    for (uint32_t i = 0; i < out->rank; i++) {
        if (out->dims[i] == -1 && infer_at >= 0)
            return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                                "node %u: reshape may infer one dimension (-1), not several", id);
        if (out->dims[i] == -1)
            infer_at = (int)i;
        else if (__builtin_mul_overflow(known, out->dims[i], &known))
            return td_shape_mismatch(g, id, "reshape target's element count overflows", a, &n->attr.dims);
    }
    if (infer_at >= 0 && known > 0 && total % known == 0)
        out->dims[infer_at] = total / known;
    if (td_shape_count(out) != total || (infer_at >= 0 && known == 0))
        return td_shape_mismatch(g, id, "reshape changes the element count", a, &n->attr.dims);
    return TD_OK;
}

static td_status grad_reshape(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    td_node a = g->nodes[id].in[0], t;
    td_node_def d = td_node_make(TD_OP_RESHAPE, 2, gy, a, 0);
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, a, t) : s;
}

static td_status infer_transpose(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)devices;
    const int32_t *perm = g->nodes[id].attr.transpose.perm;
    out->rank = in[0]->rank;
    for (uint32_t i = 0; i < out->rank; i++)
        out->dims[i] = in[0]->dims[perm[i]];
    return TD_OK;
}

static td_status grad_transpose(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    td_node_def d = td_node_make(TD_OP_TRANSPOSE, 1, gy, 0, 0);
    for (uint32_t i = 0; i < n.shape.rank; i++)
        d.attr.transpose.perm[n.attr.transpose.perm[i]] = (int32_t)i; /* the inverse permutation */
    td_node t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, n.in[0], t) : s;
}

static void emit_transpose(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *a = &e->plan->shapes[nd->in[0]], *so = &e->plan->shapes[id];
    int64_t dense[TD_MAX_RANK], st[TD_MAX_RANK], zero[TD_KERNEL_RANK] = {0}, dummy[TD_KERNEL_RANK];
    td_dense_strides(a, dense);
    for (uint32_t i = 0; i < so->rank; i++)
        st[i] = dense[nd->attr.transpose.perm[i]];
    c->kernel = TD_KERNEL_ELEMENTWISE;
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
    c->p.ew.op = TD_EW_SCALE;
    c->p.ew.alpha = 1.0f;
    td_pad4(so->rank, so->dims, st, c->p.ew.dims, c->p.ew.a_strides);
    td_pad4(so->rank, so->dims, zero, dummy, c->p.ew.b_strides);
}

const td_op_def td_op_reshape = {"reshape", TD_OPF_ALIAS, infer_reshape, grad_reshape, NULL, NULL, NULL};
const td_op_def td_op_transpose = {"transpose", 0, infer_transpose, grad_transpose, NULL, NULL, emit_transpose};

/* ---- builders ---- */

td_status td_graph_transpose(td_graph *g, td_node a, uint32_t rank, const int32_t *perm, td_node *out)
{
    const char *fn = "td_graph_transpose";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    uint32_t r = g->nodes[a].shape.rank;
    if (rank != r || (r && !perm))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: the permutation has %u entries (perm %s), expected the operand's rank %u", fn, rank,
                            perm ? "given" : "NULL", r);
    td_node_def d = td_node_make(TD_OP_TRANSPOSE, 1, a, 0, 0);
    uint32_t seen = 0;
    for (uint32_t i = 0; i < r; i++) {
        if (perm[i] < 0 || perm[i] >= (int32_t)r || (seen & (1u << perm[i])))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: perm[%u] = %d, expected each of 0..%u exactly once", fn, i, perm[i], r - 1);
        seen |= 1u << perm[i];
        d.attr.transpose.perm[i] = perm[i];
    }
    return td_graph_append(g, &d, out);
}

td_status td_graph_reshape(td_graph *g, td_node a, uint32_t rank, const int64_t *dims, td_node *out)
{
    td_status s = td_graph_check_out(g, out, "td_graph_reshape");
    if (s != TD_OK || (s = td_graph_check_dims(g, rank, dims, "td_graph_reshape", 1)) != TD_OK)
        return s;
    if (a >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_reshape: node %u does not exist", a);
    td_node_def d = td_node_make(TD_OP_RESHAPE, 1, a, 0, 0);
    d.dtype = g->nodes[a].dtype;
    d.attr.dims.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.attr.dims.dims[i] = dims[i];
    return td_graph_append(g, &d, out);
}
