/* Ops over the last axis (rows = everything before it): softmax,
 * log-softmax, causal softmax (attention), argmax; and the data ops: cast to f32 and embedding lookup. */
#include <stdio.h>

#include "td_op.h"

static td_status infer_same(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                            uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[0];
    return TD_OK;
}

/* Causal: square blocks of scores [..., T, T], row = query position. */
static td_status infer_softmax(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                               uint32_t devices)
{
    const td_shape *a = in[0];
    if ((g->nodes[id].attr.rows_mode & TD_ROWS_CAUSAL) &&
        (a->rank < 2 || a->dims[a->rank - 1] != a->dims[a->rank - 2]))
        return td_shape_mismatch(g, id, "causal_softmax expects scores [..., T, T] (queries x keys)", a, a);
    return infer_same(g, id, in, out, devices);
}

static void emit_softmax(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_SOFTMAX;
    c->a = td_emit_arg(e, n->in[0]);
    c->out = td_emit_arg(e, id);
    c->p.rows = td_rows_of(&e->plan->shapes[id], n->attr.rows_mode, 0.0f);
}

/* softmax:     dx = y * (gy - sum(gy * y))
 * log-softmax: dx = gy - exp(y) * sum(gy)      (sums over the last axis) */
static td_status grad_softmax(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    int32_t last = -1;
    td_node t, s, u;
    td_status st;
    if ((n.attr.rows_mode & 1) == 0) { /* causal too: y is 0 where masked, so is dx */
        if ((st = td_graph_emit_ew(g, TD_EW_MUL, 1.0f, gy, id, &t)) != TD_OK ||
            (st = td_graph_sum(g, t, 1, &last, true, &s)) != TD_OK ||
            (st = td_graph_emit_ew(g, TD_EW_SUB, 1.0f, gy, s, &u)) != TD_OK ||
            (st = td_graph_emit_ew(g, TD_EW_MUL, 1.0f, id, u, &t)) != TD_OK)
            return st;
    } else {
        if ((st = td_graph_emit_ew(g, TD_EW_EXP, 0.0f, id, id, &t)) != TD_OK ||
            (st = td_graph_sum(g, gy, 1, &last, true, &s)) != TD_OK ||
            (st = td_graph_emit_ew(g, TD_EW_MUL, 1.0f, t, s, &u)) != TD_OK ||
            (st = td_graph_emit_ew(g, TD_EW_SUB, 1.0f, gy, u, &t)) != TD_OK)
            return st;
    }
    return td_grad_add(c, n.in[0], t);
}

static td_status infer_argmax(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                              uint32_t devices)
{
    (void)devices;
    if (in[0]->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "node %u: argmax needs rank >= 1 (it reduces the last axis)",
                            id);
    *out = *in[0];
    out->rank--;
    return TD_OK;
}

static void emit_argmax(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_ARGMAX;
    c->a = td_emit_arg(e, n->in[0]);
    c->out = td_emit_arg(e, id);
    c->p.rows = td_rows_of(&e->plan->shapes[n->in[0]], 0, 0.0f);
}

static void emit_cast(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_CAST;
    c->a = td_emit_arg(e, n->in[0]);
    c->out = td_emit_arg(e, id);
    c->p.cast.n = td_shape_count(&e->plan->shapes[id]);
    c->p.cast.from = e->g->nodes[n->in[0]].dtype == TD_U8 ? TD_CAST_U8 : TD_CAST_I32;
}

/* ---- embedding ---- */

static td_status infer_embedding(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)devices;
    const td_shape *table = in[0], *ids = in[1];
    if (table->rank != 2 || ids->rank >= TD_MAX_RANK)
        return td_shape_mismatch(g, id, "embedding expects a table [V, D] and ids of rank < 4", table, ids);
    *out = *ids;
    out->dims[out->rank++] = table->dims[1];
    return TD_OK;
}

static td_gather_params gather_params(const td_shape *table, const td_shape *ids)
{
    td_gather_params p = {td_shape_count(ids), table->dims[0], table->dims[1]};
    return p;
}

static void emit_embedding(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_GATHER_ROWS;
    c->a = td_emit_arg(e, n->in[0]);
    c->b = td_emit_arg(e, n->in[1]);
    c->out = td_emit_arg(e, id);
    c->p.gather = gather_params(&e->plan->shapes[n->in[0]], &e->plan->shapes[n->in[1]]);
}

static td_status grad_embedding(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    td_node_def d = td_node_make(TD_OP_EMBEDDING_GRAD, 3, gy, n.in[1], n.in[0]);
    td_node t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, n.in[0], t) : s;
}

static td_status infer_like_table(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                  uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[2];
    return TD_OK;
}

/* The table is an input of the gradient node only for its shape; the
 * kernel does not read it (it stays alive anyway: it is a parameter). */
static void emit_embedding_grad(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_SCATTER_ADD_ROWS;
    c->a = td_emit_arg(e, n->in[0]);
    c->b = td_emit_arg(e, n->in[1]);
    c->out = td_emit_arg(e, id);
    c->p.gather = gather_params(&e->plan->shapes[id], &e->plan->shapes[n->in[1]]);
}

const td_op_def td_op_softmax = {"softmax", 0, infer_softmax, grad_softmax, NULL, NULL, emit_softmax};
/* argmax and cast are flat: no gradient flows through them (they are
 * never on a path to a parameter with integer or index outputs). */
const td_op_def td_op_argmax = {"argmax", 0, infer_argmax, NULL, NULL, NULL, emit_argmax};
const td_op_def td_op_cast = {"cast", 0, infer_same, NULL, NULL, NULL, emit_cast};
const td_op_def td_op_embedding = {"embedding", 0, infer_embedding, grad_embedding, NULL, NULL, emit_embedding};
const td_op_def td_op_embedding_grad = {"embedding_grad", 0, infer_like_table, NULL, NULL, NULL,
                                        emit_embedding_grad};

/* ---- builders ---- */

static td_status rows_op(td_graph *g, td_op op, int32_t mode, td_node a, td_node *out, const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(op, 1, a, 0, 0);
    d.attr.rows_mode = mode;
    return td_graph_append(g, &d, out);
}

td_status td_graph_softmax(td_graph *g, td_node a, td_node *out)
{
    return rows_op(g, TD_OP_SOFTMAX, 0, a, out, "td_graph_softmax");
}

td_status td_graph_log_softmax(td_graph *g, td_node a, td_node *out)
{
    return rows_op(g, TD_OP_SOFTMAX, 1, a, out, "td_graph_log_softmax");
}

td_status td_graph_causal_softmax(td_graph *g, td_node scores, td_node *out)
{
    return rows_op(g, TD_OP_SOFTMAX, TD_ROWS_CAUSAL, scores, out, "td_graph_causal_softmax");
}

td_status td_graph_argmax(td_graph *g, td_node a, td_node *out)
{
    return rows_op(g, TD_OP_ARGMAX, 0, a, out, "td_graph_argmax");
}

td_status td_graph_cast(td_graph *g, td_node a, td_node *out)
{
    const char *fn = "td_graph_cast";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK)
        return s;
    if (a >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u does not exist (graph has %u nodes)", fn, a,
                            g->count);
    if (g->nodes[a].dtype != TD_U8 && g->nodes[a].dtype != TD_I32) {
        char what[32];
        snprintf(what, sizeof what, "node %u", a);
        return td_dtype_error(g->ctx, fn, what, g->nodes[a].dtype, "u8 or i32");
    }
    td_node_def d = td_node_make(TD_OP_CAST, 1, a, 0, 0);
    return td_graph_append(g, &d, out);
}

td_status td_graph_embedding(td_graph *g, td_node table, td_node ids, td_node *out)
{
    const char *fn = "td_graph_embedding";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, table, fn, TD_F32)) != TD_OK || (s = td_graph_check_node(g, ids, fn, TD_I32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_EMBEDDING, 2, table, ids, 0);
    return td_graph_append(g, &d, out);
}
