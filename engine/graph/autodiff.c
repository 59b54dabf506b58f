/* Reverse-mode autodiff: walks the graph backwards from the loss and appends
 * the gradient nodes. Only nodes that depend on a requested parameter receive
 * a gradient; contributions to a node used several times are added. */
#include <string.h>

#include "td_graph_internal.h"

static td_node_def mk(td_op op)
{
    td_node_def d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.dtype = TD_F32;
    d.alpha = 1.0f;
    return d;
}

static td_status emit1(td_graph *g, td_op op, td_node a, float alpha, td_node *out)
{
    td_node_def d = mk(op);
    d.in[0] = a;
    d.n_in = 1;
    d.alpha = alpha;
    return td_graph_append(g, &d, out);
}

static td_status emit2(td_graph *g, td_op op, td_node a, td_node b, td_node *out)
{
    td_node_def d = mk(op);
    d.in[0] = a;
    d.in[1] = b;
    d.n_in = 2;
    return td_graph_append(g, &d, out);
}

static int same_shape(const td_graph *g, td_node a, td_node b)
{
    const td_shape *x = &g->nodes[a].shape, *y = &g->nodes[b].shape;
    return x->rank == y->rank && memcmp(x->dims, y->dims, sizeof(int64_t) * x->rank) == 0;
}

/* g reduced to the shape of `like` (undoing broadcasting). */
static td_status sum_to(td_graph *g, td_node grad, td_node like, td_node *out)
{
    if (same_shape(g, grad, like)) {
        *out = grad;
        return TD_OK;
    }
    return emit2(g, TD_OP_SUM_TO, grad, like, out);
}

static td_status accumulate(td_graph *g, td_node *grads, uint8_t *has, td_node target, td_node contribution)
{
    if (!has[target]) {
        grads[target] = contribution;
        has[target] = 1;
        return TD_OK;
    }
    return emit2(g, TD_OP_ADD, grads[target], contribution, &grads[target]);
}

td_status td_graph_value_and_grad(td_graph *g, td_node loss, uint32_t n, const td_node *params, td_node *grads_out)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    if (loss >= g->count)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "value_and_grad: loss node %u does not exist", loss);
    if (td_shape_count(&g->nodes[loss].shape) != 1 || g->nodes[loss].dtype != TD_F32)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "value_and_grad: the loss (node %u) must be an f32 scalar", loss);
    if (n > 0 && (!params || !grads_out))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "value_and_grad: params or grads is NULL");
    for (uint32_t i = 0; i < n; i++)
        if (params[i] >= g->count || g->nodes[params[i]].op != TD_OP_PARAM)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "value_and_grad: params[%u] (node %u) is not a parameter",
                                i, params[i]);

    uint32_t count = g->count; /* nodes of the forward graph */
    td_node *grads = td_alloc_zeroed(ctx, sizeof *grads * count);
    uint8_t *has = td_alloc_zeroed(ctx, count);
    uint8_t *needs = td_alloc_zeroed(ctx, count);
    td_status s = TD_OK;
    if (!grads || !has || !needs) {
        s = TD_OOM(ctx, "autodiff bookkeeping", sizeof *grads * count);
        goto done;
    }
    for (uint32_t i = 0; i < n; i++)
        needs[params[i]] = 1;
    for (uint32_t id = 0; id < count; id++)
        for (uint32_t k = 0; k < g->nodes[id].n_in; k++)
            needs[id] |= needs[g->nodes[id].in[k]];

    td_node seed;
    if ((s = td_graph_constant(g, 1.0f, &seed)) != TD_OK)
        goto done;
    if (g->nodes[loss].shape.rank != 0 && (s = emit2(g, TD_OP_RESHAPE, seed, loss, &seed)) != TD_OK)
        goto done;
    grads[loss] = seed;
    has[loss] = 1;

    for (int64_t id = loss; id >= 0 && s == TD_OK; id--) {
        if (!has[id] || !needs[id])
            continue;
        const td_node_def nd = g->nodes[id]; /* copy: appends may move the array */
        td_node gy = grads[id], a = nd.in[0], b = nd.in[1], t, u;
        switch (nd.op) {
        case TD_OP_INPUT:
        case TD_OP_PARAM:
        case TD_OP_CONSTANT:
        case TD_OP_AXIS_INDEX:
            break;
        case TD_OP_ADD:
        case TD_OP_SUB:
            if (needs[a] && (s = sum_to(g, gy, a, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            if (s == TD_OK && needs[b]) {
                t = gy;
                if (nd.op == TD_OP_SUB)
                    s = emit1(g, TD_OP_SCALE, gy, -1.0f, &t);
                if (s == TD_OK && (s = sum_to(g, t, b, &u)) == TD_OK)
                    s = accumulate(g, grads, has, b, u);
            }
            break;
        case TD_OP_MUL:
            if (needs[a] && (s = emit2(g, TD_OP_MUL, gy, b, &t)) == TD_OK && (s = sum_to(g, t, a, &u)) == TD_OK)
                s = accumulate(g, grads, has, a, u);
            if (s == TD_OK && needs[b] && (s = emit2(g, TD_OP_MUL, gy, a, &t)) == TD_OK &&
                (s = sum_to(g, t, b, &u)) == TD_OK)
                s = accumulate(g, grads, has, b, u);
            break;
        case TD_OP_SCALE:
            if ((s = emit1(g, TD_OP_SCALE, gy, nd.alpha, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            break;
        case TD_OP_RELU:
            if ((s = emit2(g, TD_OP_RELU_GRAD, a, gy, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            break;
        case TD_OP_MATMUL: {
            if (nd.trans_a || nd.trans_b) {
                s = td_error_set(ctx, TD_ERR_UNSUPPORTED, "value_and_grad: no second derivative of matmul (node %lld)",
                                 (long long)id);
                break;
            }
            if (needs[a]) {
                td_node_def d = mk(TD_OP_MATMUL);
                d.in[0] = gy;
                d.in[1] = b;
                d.n_in = 2;
                d.trans_b = 1;
                if ((s = td_graph_append(g, &d, &t)) == TD_OK)
                    s = accumulate(g, grads, has, a, t);
            }
            if (s == TD_OK && needs[b]) {
                td_node_def d = mk(TD_OP_MATMUL);
                d.in[0] = a;
                d.in[1] = gy;
                d.n_in = 2;
                d.trans_a = 1;
                if ((s = td_graph_append(g, &d, &t)) == TD_OK)
                    s = accumulate(g, grads, has, b, t);
            }
            break;
        }
        case TD_OP_SUM: {
            td_node_def d = mk(TD_OP_BROADCAST_TO);
            d.in[0] = gy;
            d.in[1] = a;
            d.n_in = 2;
            d.axes_mask = nd.axes_mask;
            d.mean = nd.mean; /* 1/count is fixed per device at compile time */
            if ((s = td_graph_append(g, &d, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            break;
        }
        case TD_OP_RESHAPE:
            if ((s = emit2(g, TD_OP_RESHAPE, gy, a, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            break;
        case TD_OP_XENT: {
            td_node_def d = mk(TD_OP_XENT_GRAD);
            d.in[0] = (td_node)id;
            d.in[1] = b;
            d.in[2] = gy;
            d.n_in = 3;
            if ((s = td_graph_append(g, &d, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            break;
        }
        case TD_OP_PSUM:
        case TD_OP_PMEAN:
            if ((s = emit1(g, nd.op, gy, 1.0f, &t)) == TD_OK)
                s = accumulate(g, grads, has, a, t);
            break;
        default:
            s = td_error_set(ctx, TD_ERR_UNSUPPORTED,
                             "value_and_grad: node %lld (op %d) is not differentiable (all_gather, broadcast and "
                             "gradient ops are not)",
                             (long long)id, (int)nd.op);
            break;
        }
    }
    for (uint32_t i = 0; i < n && s == TD_OK; i++) {
        if (has[params[i]]) {
            grads_out[i] = grads[params[i]];
        } else {
            /* The loss does not depend on this parameter: its gradient is 0. */
            td_node zero;
            if ((s = td_graph_constant(g, 0.0f, &zero)) == TD_OK) {
                td_node_def d = mk(TD_OP_BROADCAST_TO);
                d.in[0] = zero;
                d.in[1] = params[i];
                d.n_in = 2;
                d.axes_mask = (1u << g->nodes[params[i]].shape.rank) - 1;
                d.keepdims = false;
                s = td_graph_append(g, &d, &grads_out[i]);
            }
        }
    }
    if (s == TD_OK)
        g->has_grad = true;
done:
    td_free(ctx, grads);
    td_free(ctx, has);
    td_free(ctx, needs);
    return s;
}
