/* Ops whose forward differs between a training program and every other
 * program (td_plan.training): dropout, the by-mode choice, and batch norm
 * built from it, plus the state updates batch norm leaves for the trainer.
 *
 * Why dropout is one op with its mask drawn on the device, not a mask input
 * fed by the host: the mask of an example must not depend on the mesh, and
 * a counter-based generator keyed by the example's global index gives that
 * with nothing to upload. Its gradient is the same op applied to the
 * output gradient: the mask is a pure function of the node's key, the step
 * and the example, so drawing it again costs a few integer multiplies per
 * element and no memory kept from the forward. */
#include <math.h>
#include <string.h>

#include "td_op.h"
#include "td_random.h"

/* ---- DROPOUT ---- */

static td_status infer_dropout(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                               uint32_t devices)
{
    (void)devices;
    if (in[0]->rank == 0)
        return td_shape_mismatch(g, id, "dropout expects x of rank >= 1 (axis 0 is the batch)", in[0], in[0]);
    *out = *in[0];
    return TD_OK;
}

static td_status grad_dropout(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    const td_node_def n = g->nodes[id];
    td_node_def d = td_node_make(TD_OP_DROPOUT, 1, gy, 0, 0);
    d.attr.dropout = n.attr.dropout;
    td_node t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, n.in[0], t) : s;
}

static uint32_t calls_dropout(const td_graph *g, const td_plan *plan, td_node id)
{
    (void)g;
    (void)id;
    return 1 + plan->training;
}

static void emit_dropout(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    const td_shape *s = &e->plan->shapes[id];
    if (!e->plan->training) {
        c->kernel = TD_KERNEL_COPY;
        c->a = td_emit_arg(e, n->in[0]);
        c->out = td_emit_arg(e, id);
        c->n = td_shape_count(s);
        return;
    }
    /* The mask into the output, then x times it in place. */
    const float keep = n->attr.dropout.keep;
    double threshold = floor((double)keep * 4294967296.0);
    c[0].kernel = TD_KERNEL_DROPOUT_MASK;
    c[0].out = td_emit_arg(e, id);
    c[0].b.buffer = e->buffers[TD_BUF_STEP];
    c[0].b.offset = e->plan->slots[id].words;
    c[0].p.dropout.rows = s->dims[0];
    c[0].p.dropout.cols = s->dims[0] ? td_shape_count(s) / s->dims[0] : 0;
    c[0].p.dropout.seed_lo = n->attr.dropout.key[0];
    c[0].p.dropout.seed_hi = n->attr.dropout.key[1];
    c[0].p.dropout.keep_threshold = threshold > 4294967295.0 ? 4294967295u : (uint32_t)threshold;
    c[0].p.dropout.scale = 1.0f / keep;
    td_emit_elementwise(e, &c[1], TD_EW_MUL, 0.0f, id, n->in[0], id);
}

const td_op_def td_op_dropout = {"dropout", TD_OPF_STEP_WORDS, infer_dropout, grad_dropout, calls_dropout, NULL,
                                 emit_dropout};

td_status td_graph_dropout(td_graph *g, td_node x, float rate, uint64_t seed, td_node *out)
{
    const char *fn = "td_graph_dropout";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    if (!(rate >= 0.0f && rate < 1.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: rate %g, expected in [0, 1)", fn, (double)rate);
    if (g->nodes[x].shape.rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: x (node %u) is a scalar, expected rank >= 1 (axis 0 is "
                            "the batch)", fn, x);
    if (rate == 0.0f) {
        *out = x;
        return TD_OK;
    }
    /* The key mixes the seed with this node's id, so two dropouts given one
     * seed draw different masks; the id is the same on any mesh. */
    td_random_stream key_stream;
    td_random_stream_init(&key_stream, seed, g->count, 0x6b657973u /* "keys" */, 0);
    td_node_def d = td_node_make(TD_OP_DROPOUT, 1, x, 0, 0);
    d.attr.dropout.key[0] = td_random_u32(&key_stream);
    d.attr.dropout.key[1] = td_random_u32(&key_stream);
    d.attr.dropout.keep = 1.0f - rate;
    return td_graph_append(g, &d, out);
}

/* ---- BY_MODE ---- */

static td_status infer_by_mode(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                               uint32_t devices)
{
    (void)devices;
    if (!td_shape_equal(in[0], in[1]))
        return td_shape_mismatch(g, id, "by_mode expects its training and evaluation values to have one shape", in[0],
                                 in[1]);
    *out = *in[0];
    return TD_OK;
}

/* Gradients exist only in training programs, where the value is input 0. */
static td_status grad_by_mode(td_grad_ctx *c, td_node id, td_node gy)
{
    return td_grad_add(c, td_grad_graph(c)->nodes[id].in[0], gy);
}

/* An alias of the chosen input: no copy, no kernel. */
const td_op_def td_op_by_mode = {"by_mode", TD_OPF_BY_MODE | TD_OPF_ALIAS, infer_by_mode, grad_by_mode, NULL, NULL,
                                 NULL};

td_status td_graph_by_mode(td_graph *g, td_node training, td_node evaluation, td_node *out)
{
    const char *fn = "td_graph_by_mode";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, training, fn, TD_F32)) != TD_OK ||
        (s = td_graph_check_node(g, evaluation, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_BY_MODE, 2, training, evaluation, 0);
    return td_graph_append(g, &d, out);
}

/* ---- state updates ---- */

td_status td_graph_state_update(td_graph *g, td_node state, td_node value)
{
    const char *fn = "td_graph_state_update";
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&g->owned, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, state, fn, TD_F32)) != TD_OK ||
        (s = td_graph_check_node(g, value, fn, TD_F32)) != TD_OK)
        return s;
    const td_node_def *sd = &g->nodes[state];
    if (sd->op != TD_OP_PARAM || !sd->is_state)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u is not a state (td_graph_state)", fn, state);
    if (!td_shape_equal(&sd->shape, &g->nodes[value].shape))
        return td_shape_mismatch(g, value, "a state update's value must have the state's shape", &g->nodes[value].shape,
                                 &sd->shape);
    for (uint32_t i = 0; i < g->n_updates; i++)
        if (g->updates[i].state == state)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: state '%s' (node %u) already has an update (node %u)",
                                fn, sd->name, state, g->updates[i].value);
    if (g->n_updates == g->updates_capacity) {
        uint32_t cap = g->updates_capacity ? 2 * g->updates_capacity : 8;
        td_state_update *u = td_alloc(g->ctx, sizeof *u * cap);
        if (!u)
            return TD_OOM(g->ctx, "state updates", sizeof *u * cap);
        if (g->n_updates)
            memcpy(u, g->updates, sizeof *u * g->n_updates);
        td_free(g->ctx, g->updates);
        g->updates = u;
        g->updates_capacity = cap;
    }
    g->updates[g->n_updates].state = state;
    g->updates[g->n_updates].value = value;
    g->n_updates++;
    return TD_OK;
}

/* ---- batch norm, from the ops above and existing ones ---- */

td_status td_batch_norm_options_init(td_batch_norm_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->momentum = 0.99f;
    o->epsilon = 1e-5f;
    o->sync = false;
    return TD_OK;
}

td_status td_batch_norm_check_options(td_graph *g, const char *fn, const td_batch_norm_options *o)
{
    if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: momentum %g, expected in [0, 1)", fn,
                            (double)o->momentum);
    if (!(o->epsilon > 0.0f && o->epsilon <= 1.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: epsilon %g, expected in (0, 1]", fn,
                            (double)o->epsilon);
    return TD_OK;
}

/* m * state + (1 - m) * batch, the value of a running statistic's update. */
static td_status running_update(td_graph *g, td_node state, td_node batch, float momentum)
{
    td_node a, b, sum;
    td_status s;
    if ((s = td_graph_scale(g, state, momentum, &a)) != TD_OK || (s = td_graph_scale(g, batch, 1.0f - momentum, &b)) != TD_OK ||
        (s = td_graph_add(g, a, b, &sum)) != TD_OK)
        return s;
    return td_graph_state_update(g, state, sum);
}

td_status td_graph_batch_norm(td_graph *g, td_node x, td_node scale, td_node bias, td_node mean, td_node var,
                              const td_batch_norm_options *options, td_node *out)
{
    const char *fn = "td_graph_batch_norm";
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    td_batch_norm_options o;
    td_batch_norm_options_init(&o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_batch_norm_options, options, &o)) != TD_OK)
        return s;
    if ((s = td_batch_norm_check_options(g, fn, &o)) != TD_OK)
        return s;
    const td_shape xs = g->nodes[x].shape;
    if (xs.rank < 2)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "%s: x (node %u) has rank %u, expected >= 2 (a batch axis and the features last)", fn, x,
                            xs.rank);
    const int64_t features = xs.dims[xs.rank - 1];
    const td_node affine[4] = {scale, bias, mean, var};
    static const char *const what[4] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; i++) {
        if (affine[i] == TD_NO_NODE && i < 2)
            continue;
        if ((s = td_graph_check_node(g, affine[i], fn, TD_F32)) != TD_OK)
            return s;
        const td_shape *as = &g->nodes[affine[i]].shape;
        if (as->rank != 1 || as->dims[0] != features)
            return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: %s (node %u) must be [%lld], x's features", fn,
                                what[i], affine[i], (long long)features);
        if (i >= 2 && !g->nodes[affine[i]].is_state)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: %s (node %u) must be a state (td_graph_state), not a trained parameter or input", fn,
                                what[i], affine[i]);
    }
    /* Batch statistics over every axis but the last; with sync, the mesh
     * mean of each weighted by the device's share of the batch
     * (td_graph_shard_weight), which is the global batch's on any split. */
    int32_t axes[TD_MAX_RANK];
    for (uint32_t i = 0; i + 1 < xs.rank; i++)
        axes[i] = (int32_t)i;
    td_node bm, xc_batch, xc_running, xc, sq, bv, v, eps, ve, inv, y, weight = TD_NO_NODE;
    if ((s = td_graph_mean(g, x, xs.rank - 1, axes, false, &bm)) != TD_OK)
        return s;
    if (o.sync && ((s = td_graph_shard_weight(g, &weight)) != TD_OK || (s = td_graph_mul(g, bm, weight, &bm)) != TD_OK ||
                   (s = td_graph_pmean(g, bm, &bm)) != TD_OK))
        return s;
    if ((s = td_graph_sub(g, x, bm, &xc_batch)) != TD_OK || (s = td_graph_mul(g, xc_batch, xc_batch, &sq)) != TD_OK ||
        (s = td_graph_mean(g, sq, xs.rank - 1, axes, false, &bv)) != TD_OK)
        return s;
    if (o.sync && ((s = td_graph_mul(g, bv, weight, &bv)) != TD_OK || (s = td_graph_pmean(g, bv, &bv)) != TD_OK))
        return s;
    if ((s = running_update(g, mean, bm, o.momentum)) != TD_OK || (s = running_update(g, var, bv, o.momentum)) != TD_OK)
        return s;
    /* x centred once per mode: training reuses the variance's x - batch
     * mean (by_mode is an alias, not a copy); evaluation alone computes
     * x - running mean. */
    if ((s = td_graph_sub(g, x, mean, &xc_running)) != TD_OK || (s = td_graph_by_mode(g, xc_batch, xc_running, &xc)) != TD_OK ||
        (s = td_graph_by_mode(g, bv, var, &v)) != TD_OK || (s = td_graph_constant(g, o.epsilon, &eps)) != TD_OK ||
        (s = td_graph_add(g, v, eps, &ve)) != TD_OK || (s = td_graph_emit_ew(g, TD_EW_RSQRT, 0.0f, ve, ve, &inv)) != TD_OK ||
        (s = td_graph_mul(g, xc, inv, &y)) != TD_OK)
        return s;
    return td_graph_affine(g, y, scale, bias, out);
}
