/* MATMUL: a [..., M, K] x b [K, N] -> [..., M, N] (one GEMM over the
 * flattened leading dims). trans_b gives a x b^T with b [N, K] (a tied
 * language-model head: hidden states times the embedding table); trans_a
 * gives a^T x b over a's and b's leading dims flattened (the weight
 * gradient of a batched product).
 *
 * BATCH_MATMUL: a [..., M, K] x b [..., K, N] -> [..., M, N] where both
 * operands carry the same leading (batch) dims, one product per batch
 * entry (attention's Q K^T and A V per head); trans_a / trans_b transpose
 * the last two axes of a / b. It lowers to one GEMM call per batch entry
 * at the entry's offsets, so every backend runs it with the GEMM it has. */
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
    if (n.attr.matmul.trans_a)
        return td_error_set(g->ctx, TD_ERR_UNSUPPORTED, "value_and_grad: no second derivative of matmul (node %u)", id);
    /* y = a b:   da = gy b^T, db = a^T gy;
     * y = a b^T: da = gy b,   db = gy^T a (both over a's leading dims). */
    int tb = n.attr.matmul.trans_b;
    td_node t;
    td_status s = TD_OK;
    if (td_grad_needs(c, n.in[0]) && (s = append_matmul(g, gy, n.in[1], 0, !tb, &t)) == TD_OK)
        s = td_grad_add(c, n.in[0], t);
    if (s == TD_OK && td_grad_needs(c, n.in[1]) &&
        (s = tb ? append_matmul(g, gy, n.in[0], 1, 0, &t) : append_matmul(g, n.in[0], gy, 1, 0, &t)) == TD_OK)
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

/* ---- batched ---- */

static int64_t batch_count(const td_shape *s)
{
    int64_t n = 1;
    for (uint32_t i = 0; i + 2 < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* The (rows, cols) of an operand's last two axes after its transpose. */
static void op_dims(const td_shape *s, int trans, int64_t *rows, int64_t *cols)
{
    int64_t r = s->dims[s->rank - 2], c = s->dims[s->rank - 1];
    *rows = trans ? c : r;
    *cols = trans ? r : c;
}

static td_status infer_batch(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                             uint32_t devices)
{
    (void)devices;
    const td_node_def *n = &g->nodes[id];
    const td_shape *a = in[0], *b = in[1];
    if (a->rank < 2 || a->rank != b->rank)
        return td_shape_mismatch(g, id, "batch_matmul expects a [..., M, K] and b [..., K, N] of one rank >= 2", a, b);
    for (uint32_t i = 0; i + 2 < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return td_shape_mismatch(g, id, "batch_matmul operands' batch dims differ", a, b);
    int64_t m, k, kb, nn;
    op_dims(a, n->attr.matmul.trans_a, &m, &k);
    op_dims(b, n->attr.matmul.trans_b, &kb, &nn);
    if (k != kb)
        return td_shape_mismatch(g, id, "batch_matmul inner dimensions differ", a, b);
    *out = *a;
    out->dims[out->rank - 2] = m;
    out->dims[out->rank - 1] = nn;
    return TD_OK;
}

static td_status append_batch(td_graph *g, td_node a, td_node b, int trans_a, int trans_b, td_node *out)
{
    td_node_def d = td_node_make(TD_OP_BATCH_MATMUL, 2, a, b, 0);
    d.attr.matmul.trans_a = trans_a;
    d.attr.matmul.trans_b = trans_b;
    return td_graph_append(g, &d, out);
}

/* y = op(a) op(b) per batch entry. With ta, tb the flags:
 *   da = gy op(b)^T      (ta = 0)   or  op(b) gy^T   (ta = 1)
 *   db = op(a)^T gy      (tb = 0)   or  gy^T op(a)   (tb = 1)
 * each again a batched product of a, b and gy with the flags below. */
static td_status grad_batch(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    int ta = n.attr.matmul.trans_a, tb = n.attr.matmul.trans_b;
    td_node t;
    td_status s = TD_OK;
    if (td_grad_needs(c, n.in[0]) &&
        (s = ta ? append_batch(g, n.in[1], gy, tb, 1, &t) : append_batch(g, gy, n.in[1], 0, !tb, &t)) == TD_OK)
        s = td_grad_add(c, n.in[0], t);
    if (s == TD_OK && td_grad_needs(c, n.in[1]) &&
        (s = tb ? append_batch(g, gy, n.in[0], 1, ta, &t) : append_batch(g, n.in[0], gy, !ta, 0, &t)) == TD_OK)
        s = td_grad_add(c, n.in[1], t);
    return s;
}

/* One GEMM per batch entry; an empty batch still emits one call (a FILL of
 * nothing), since a node lowers to at least one. */
static uint32_t n_calls_batch(const td_graph *g, const td_plan *plan, td_node id)
{
    (void)g;
    int64_t n = batch_count(&plan->shapes[id]);
    return n > 0 ? (uint32_t)n : 1;
}

static void emit_batch(const td_emit_ctx *e, td_node id, td_kernel_call *calls)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *so = &e->plan->shapes[id];
    const td_shape *a = &e->plan->shapes[nd->in[0]], *b = &e->plan->shapes[nd->in[1]];
    int64_t batches = batch_count(so);
    if (batches <= 0) {
        calls[0].kernel = TD_KERNEL_FILL;
        calls[0].out = td_emit_arg(e, id);
        calls[0].n = 0;
        return;
    }
    td_gemm_params p = {0};
    p.trans_a = nd->attr.matmul.trans_a;
    p.trans_b = nd->attr.matmul.trans_b;
    int64_t kb;
    op_dims(a, p.trans_a, &p.m, &p.k);
    op_dims(b, p.trans_b, &kb, &p.n);
    p.lda = a->dims[a->rank - 1] ? a->dims[a->rank - 1] : 1;
    p.ldb = b->dims[b->rank - 1] ? b->dims[b->rank - 1] : 1;
    p.ldc = p.n ? p.n : 1;
    p.alpha = 1.0f;
    p.beta = 0.0f;
    uint64_t a_step = (uint64_t)(a->dims[a->rank - 2] * a->dims[a->rank - 1]);
    uint64_t b_step = (uint64_t)(b->dims[b->rank - 2] * b->dims[b->rank - 1]);
    uint64_t c_step = (uint64_t)(p.m * p.n);
    td_arg out = td_emit_arg(e, id), aa = td_emit_arg(e, nd->in[0]), bb = td_emit_arg(e, nd->in[1]);
    for (int64_t i = 0; i < batches; i++) {
        td_kernel_call *c = &calls[i];
        c->kernel = TD_KERNEL_GEMM;
        c->p.gemm = p;
        c->out = out;
        c->out.offset += (uint64_t)i * c_step;
        c->a = aa;
        c->a.offset += (uint64_t)i * a_step;
        c->b = bb;
        c->b.offset += (uint64_t)i * b_step;
    }
}

const td_op_def td_op_batch_matmul = {"batch_matmul", 0, infer_batch, grad_batch, n_calls_batch, NULL, emit_batch};

/* ---- builders ---- */

static td_status check_operands(td_graph *g, td_node a, td_node b, td_node *out, const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    return td_graph_check_node(g, b, fn, TD_F32);
}

td_status td_graph_matmul(td_graph *g, td_node a, td_node b, td_node *out)
{
    td_status s = check_operands(g, a, b, out, "td_graph_matmul");
    return s == TD_OK ? append_matmul(g, a, b, 0, 0, out) : s;
}

td_status td_graph_matmul_transposed(td_graph *g, td_node a, td_node b, td_node *out)
{
    td_status s = check_operands(g, a, b, out, "td_graph_matmul_transposed");
    return s == TD_OK ? append_matmul(g, a, b, 0, 1, out) : s;
}

td_status td_graph_batch_matmul(td_graph *g, td_node a, td_node b, bool transpose_a, bool transpose_b, td_node *out)
{
    td_status s = check_operands(g, a, b, out, "td_graph_batch_matmul");
    return s == TD_OK ? append_batch(g, a, b, transpose_a, transpose_b, out) : s;
}
