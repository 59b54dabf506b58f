/* MATMUL: a [..., M, K] x b [K, N] -> [..., M, N] (one GEMM over the
 * flattened leading dims). The transposed forms exist for gradients:
 * trans_b gives a x b^T, trans_a gives a^T x b over a's and b's leading
 * dims flattened (the weight gradient of a batched product). */
#include "td_op.h"

static td_status infer(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out, uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    const td_shape *a = in[0], *b = in[1];
    if (a->rank < 1 || b->rank < 1)
        return td_shape_mismatch(g, id, "matmul needs operands of rank >= 1", a, b);
    if (!n->attr.matmul.trans_a) {
        if (a->rank < 2 || b->rank != 2)
            return td_shape_mismatch(g, id, "matmul expects a [..., M, K] and b [K, N]", a, b);
        int64_t k = a->dims[a->rank - 1];
        int64_t kb = n->attr.matmul.trans_b ? b->dims[1] : b->dims[0];
        int64_t nn = n->attr.matmul.trans_b ? b->dims[0] : b->dims[1];
        if (k != kb)
            return td_shape_mismatch(g, id, "matmul inner dimensions differ", a, b);
        *out = *a;
        out->dims[out->rank - 1] = nn;
        return TD_OK;
    }
    int64_t ra = td_shape_count(a) / (a->dims[a->rank - 1] ? a->dims[a->rank - 1] : 1);
    int64_t rb = td_shape_count(b) / (b->dims[b->rank - 1] ? b->dims[b->rank - 1] : 1);
    if (ra != rb || n->attr.matmul.trans_b)
        return td_shape_mismatch(g, id, "transposed matmul rows differ", a, b);
    out->rank = 2;
    out->dims[0] = a->dims[a->rank - 1];
    out->dims[1] = b->dims[b->rank - 1];
    return TD_OK;
}

static td_status append_matmul(td_graph *g, td_node a, td_node b, int trans_a, int trans_b, td_node *out)
{
    td_node_def d = td_node_make(TD_OP_MATMUL, 2, a, b, 0);
    d.attr.matmul.trans_a = trans_a;
    d.attr.matmul.trans_b = trans_b;
    return td_graph_append(g, &d, out);
}

static td_status grad(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    if (n.attr.matmul.trans_a || n.attr.matmul.trans_b)
        return td_error_set(g->ctx, TD_ERR_UNSUPPORTED, "value_and_grad: no second derivative of matmul (node %u)", id);
    td_node t;
    td_status s = TD_OK;
    if (td_grad_needs(c, n.in[0]) && (s = append_matmul(g, gy, n.in[1], 0, 1, &t)) == TD_OK)
        s = td_grad_add(c, n.in[0], t);
    if (s == TD_OK && td_grad_needs(c, n.in[1]) && (s = append_matmul(g, n.in[0], gy, 1, 0, &t)) == TD_OK)
        s = td_grad_add(c, n.in[1], t);
    return s;
}

static void emit(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *so = &e->plan->shapes[id];
    const td_shape *a = &e->plan->shapes[nd->in[0]], *b = &e->plan->shapes[nd->in[1]];
    td_gemm_params *p = &c->p.gemm;
    c->kernel = TD_KERNEL_GEMM;
    c->out = td_emit_arg(e, id);
    c->a = td_emit_arg(e, nd->in[0]);
    c->b = td_emit_arg(e, nd->in[1]);
    p->alpha = 1.0f;
    p->beta = 0.0f;
    p->trans_a = nd->attr.matmul.trans_a;
    p->trans_b = nd->attr.matmul.trans_b;
    if (!p->trans_a) {
        p->k = a->dims[a->rank - 1];
        int64_t cols = so->dims[so->rank - 1] ? so->dims[so->rank - 1] : 1;
        p->m = p->k ? td_shape_count(a) / p->k : td_shape_count(so) / cols;
        p->n = so->dims[so->rank - 1];
        p->lda = p->k;
        p->ldb = p->trans_b ? p->k : p->n;
    } else {
        p->m = a->dims[a->rank - 1];
        p->n = b->dims[b->rank - 1];
        p->k = p->m ? td_shape_count(a) / p->m : 0;
        p->lda = p->m;
        p->ldb = p->n;
    }
    p->ldc = p->n;
    if (p->lda == 0) p->lda = 1;
    if (p->ldb == 0) p->ldb = 1;
    if (p->ldc == 0) p->ldc = 1;
}

const td_op_def td_op_matmul = {"matmul", 0, infer, grad, NULL, NULL, emit};

/* ---- builders ---- */

td_status td_graph_matmul(td_graph *g, td_node a, td_node b, td_node *out)
{
    const char *fn = "td_graph_matmul";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK || (s = td_graph_check_node(g, b, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_MATMUL, 2, a, b, 0);
    return td_graph_append(g, &d, out);
}
