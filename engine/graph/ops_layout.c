/* Ops that move elements without computing: RESHAPE (no kernel: the node
 * aliases its input's memory), TRANSPOSE (one strided elementwise copy,
 * a SCALE by 1, which is exact) and SLICE along axis 0 (a contiguous
 * block, so one COPY; its gradient places gy in zeros: FILL, COPY, FILL). */
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

/* Axis 0 of the operand as this program sees it: slicing a sharded axis
 * would take a different block on every device, which is not the slice of
 * the global tensor, so it is refused (the global and per-device sizes of
 * axis 0 differ exactly when it is sharded). */
static td_status infer_slice(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                             uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    const td_shape *a = in[0];
    if (a->rank < 1)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "node %u: slice needs rank >= 1 (it slices axis 0)", id);
    if (a->dims[0] != g->nodes[n->in[0]].shape.dims[0])
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "node %u: slice of axis 0, which is sharded over the devices (%lld of %lld rows here); "
                            "expected an axis every device holds whole",
                            id, (long long)a->dims[0], (long long)g->nodes[n->in[0]].shape.dims[0]);
    int64_t start = n->attr.slice.start, size = n->attr.slice.size;
    if (start > a->dims[0] || size > a->dims[0] - start) {
        char buf[96];
        td_shape_format(a, buf, sizeof buf);
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "node %u: slice [%lld, %lld) of axis 0 does not fit the operand %s", id, (long long)start,
                            (long long)(start + size), buf);
    }
    *out = *a;
    out->dims[0] = size;
    return TD_OK;
}

static uint64_t row_elems(const td_shape *s)
{
    uint64_t n = 1;
    for (uint32_t i = 1; i < s->rank; i++)
        n *= (uint64_t)s->dims[i];
    return n;
}

static void emit_slice(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    uint64_t row = row_elems(&e->plan->shapes[nd->in[0]]);
    c->kernel = TD_KERNEL_COPY;
    c->n = (int64_t)(row * (uint64_t)nd->attr.slice.size);
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
    c->a.offset += row * (uint64_t)nd->attr.slice.start;
}

static td_status grad_slice(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    td_node_def d = td_node_make(TD_OP_SLICE_GRAD, 2, gy, n.in[0], 0);
    d.attr.slice = n.attr.slice;
    td_node t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, n.in[0], t) : s;
}

/* (gy, like a): a's shape. The operand `like` is there for its shape only. */
static td_status infer_slice_grad(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                  uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[1];
    return TD_OK;
}

static uint32_t n_calls_slice_grad(const td_graph *g, const td_plan *plan, td_node id)
{
    (void)g, (void)plan, (void)id;
    return 3;
}

/* Zeros before the block, gy, zeros after: each element written once. */
static void emit_slice_grad(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *so = &e->plan->shapes[id];
    uint64_t row = row_elems(so), start = (uint64_t)nd->attr.slice.start, size = (uint64_t)nd->attr.slice.size;
    uint64_t total = row * (uint64_t)so->dims[0];
    td_arg out = td_emit_arg(e, id);
    c[0].kernel = TD_KERNEL_FILL;
    c[0].out = out;
    c[0].n = (int64_t)(row * start);
    c[0].alpha = 0.0f;
    c[1].kernel = TD_KERNEL_COPY;
    c[1].out = out;
    c[1].out.offset += row * start;
    c[1].a = td_emit_arg(e, nd->in[0]);
    c[1].n = (int64_t)(row * size);
    c[2].kernel = TD_KERNEL_FILL;
    c[2].out = out;
    c[2].out.offset += row * (start + size);
    c[2].n = (int64_t)(total - row * (start + size));
    c[2].alpha = 0.0f;
}

const td_op_def td_op_reshape = {"reshape", TD_OPF_ALIAS, infer_reshape, grad_reshape, NULL, NULL, NULL};
const td_op_def td_op_transpose = {"transpose", 0, infer_transpose, grad_transpose, NULL, NULL, emit_transpose};
const td_op_def td_op_slice = {"slice", 0, infer_slice, grad_slice, NULL, NULL, emit_slice};
const td_op_def td_op_slice_grad = {"slice_grad", 0, infer_slice_grad, NULL, n_calls_slice_grad, NULL,
                                    emit_slice_grad};

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

td_status td_graph_slice(td_graph *g, td_node a, int64_t start, int64_t size, td_node *out)
{
    const char *fn = "td_graph_slice";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    if (start < 0 || size < 0)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: start %lld and size %lld, expected both >= 0", fn,
                            (long long)start, (long long)size);
    td_node_def d = td_node_make(TD_OP_SLICE, 1, a, 0, 0);
    d.attr.slice.start = start;
    d.attr.slice.size = size;
    return td_graph_append(g, &d, out);
}
