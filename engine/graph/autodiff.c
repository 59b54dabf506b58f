/* Reverse-mode autodiff: walks the graph backwards from the loss and asks
 * each node's op (td_op.h) to add its inputs' gradient contributions. Only
 * nodes that lead to a requested parameter receive a gradient;
 * contributions to a node used several times are added. */
#include <stdio.h>
#include <string.h>

#include "td_op.h"
#include "td_kernel.h"

struct td_grad_ctx {
    td_graph *g;
    uint32_t count; /* nodes of the forward graph */
    td_node *grads;
    uint8_t *has;
    uint8_t *needs;
    /* Recomputation: clone_of[forward id] is the node's copy made for the
     * backward pass (or the id itself), and origin[id - count] the forward
     * node a copy stands for (or UINT32_MAX), so gradient rules that name
     * a copy's inputs reach the forward graph's bookkeeping. */
    td_node *clone_of;
    td_node *origin;
    uint32_t origin_capacity;
};

/* The forward node a gradient rule's node stands for. */
static td_node forward_id(const td_grad_ctx *c, td_node node)
{
    if (node < c->count)
        return node;
    uint32_t k = node - c->count;
    return k < c->origin_capacity && c->origin[k] != UINT32_MAX ? c->origin[k] : node;
}

td_graph *td_grad_graph(td_grad_ctx *c)
{
    return c->g;
}

bool td_grad_needs(const td_grad_ctx *c, td_node node)
{
    node = forward_id(c, node);
    return node < c->count && c->needs[node];
}

td_status td_grad_add(td_grad_ctx *c, td_node target, td_node contribution)
{
    target = forward_id(c, target);
    if (!td_grad_needs(c, target))
        return TD_OK;
    td_graph *g = c->g;
    td_status s = TD_OK;
    if (!td_shape_equal(&g->nodes[contribution].shape, &g->nodes[target].shape)) {
        /* The target was broadcast in the forward op: sum it back down. */
        td_node_def d = td_node_make(TD_OP_SUM_TO, 2, contribution, target, 0);
        if ((s = td_graph_append(g, &d, &contribution)) != TD_OK)
            return s;
    }
    if (!c->has[target]) {
        c->grads[target] = contribution;
        c->has[target] = 1;
        return TD_OK;
    }
    return td_graph_emit_ew(g, TD_EW_ADD, 1.0f, c->grads[target], contribution, &c->grads[target]);
}

/* The gradient of a parameter the loss does not depend on: zeros. */
static td_status zero_gradient(td_graph *g, td_node param, td_node *out)
{
    td_node zero;
    td_status s = td_graph_constant(g, 0.0f, &zero);
    if (s != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_BROADCAST_TO, 2, zero, param, 0);
    d.attr.reduce.axes_mask = (1u << g->nodes[param].shape.rank) - 1;
    return td_graph_append(g, &d, out);
}

/* Copies recompute region `region`, whose last node is `last`, at the end
 * of the graph: each node with its inputs inside the region redirected to
 * their copies. Sources (parameters, inputs, constants) are not copied:
 * they are state, not activations. */
static td_status clone_region(td_grad_ctx *c, uint32_t region, td_node last)
{
    td_graph *g = c->g;
    td_node first = last;
    while (first > 0 && g->nodes[first - 1].recompute == region)
        first--;
    for (td_node id = first; id <= last; id++) {
        td_node_def d = g->nodes[id];
        if (td_op_def_of(d.op)->flags & TD_OPF_SOURCE)
            continue;
        for (uint32_t k = 0; k < d.n_in; k++)
            d.in[k] = c->clone_of[d.in[k]];
        d.recompute = 0;
        td_node copy;
        td_status s = td_graph_append(g, &d, &copy);
        if (s != TD_OK)
            return s;
        uint32_t k = copy - c->count;
        if (k >= c->origin_capacity) {
            uint32_t cap = c->origin_capacity ? 2 * c->origin_capacity : 256;
            while (cap <= k)
                cap *= 2;
            td_node *grown = td_alloc(g->ctx, sizeof *grown * cap);
            if (!grown)
                return TD_OOM(g->ctx, "recomputation bookkeeping", sizeof *grown * cap);
            for (uint32_t i = 0; i < cap; i++)
                grown[i] = i < c->origin_capacity ? c->origin[i] : UINT32_MAX;
            td_free(g->ctx, c->origin);
            c->origin = grown;
            c->origin_capacity = cap;
        }
        c->origin[k] = id;
        c->clone_of[id] = copy;
    }
    return TD_OK;
}

td_status td_graph_recompute(td_graph *g, td_node first, td_node last)
{
    static const char fn[] = "td_graph_recompute";
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&g->owned, fn);
    if (s != TD_OK)
        return s;
    if (first > last || last >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: nodes %u..%u, expected first <= last < %u (the graph's nodes)", fn, first, last,
                            g->count);
    if (g->has_grad)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: the graph already has its gradient; mark regions before td_graph_value_and_grad", fn);
    for (td_node id = first; id <= last; id++) {
        const td_node_def *n = &g->nodes[id];
        if (n->recompute)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u is already in recompute region %u", fn,
                                id, n->recompute);
        if (td_op_def_of(n->op)->flags & TD_OPF_COLLECTIVE)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: node %u (%s) is a collective; a recomputed region holds none", fn, id,
                                td_op_def_of(n->op)->name);
    }
    uint32_t region = ++g->n_recompute;
    for (td_node id = first; id <= last; id++)
        g->nodes[id].recompute = region;
    return TD_OK;
}

td_status td_graph_value_and_grad(td_graph *g, td_node loss, uint32_t n, const td_node *params, td_node *grads_out)
{
    static const char fn[] = "td_graph_value_and_grad";
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    td_status live = td_owned_check_live(&g->owned, fn);
    if (live != TD_OK)
        return live;
    if (loss >= g->count)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: loss node %u does not exist (graph has %u nodes)", fn,
                            loss, g->count);
    if (g->nodes[loss].dtype != TD_F32) {
        char what[48];
        snprintf(what, sizeof what, "the loss (node %u)", loss);
        return td_dtype_error(ctx, fn, what, g->nodes[loss].dtype, "an f32 scalar");
    }
    if (td_shape_count(&g->nodes[loss].shape) != 1)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s: the loss (node %u) has %lld elements, expected an f32 scalar",
                            fn, loss, (long long)td_shape_count(&g->nodes[loss].shape));
    if (n > 0 && (!params || !grads_out))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: params or grads is NULL for %u parameters", fn, n);
    for (uint32_t i = 0; i < n; i++)
        if (params[i] >= g->count || g->nodes[params[i]].op != TD_OP_PARAM)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: params[%u] (node %u) is not a parameter", fn, i,
                                params[i]);

    td_grad_ctx c = {g, g->count, NULL, NULL, NULL, NULL, NULL, 0};
    c.grads = td_alloc_zeroed(ctx, sizeof *c.grads * c.count);
    c.has = td_alloc_zeroed(ctx, c.count);
    c.needs = td_alloc_zeroed(ctx, c.count);
    c.clone_of = td_alloc(ctx, sizeof *c.clone_of * c.count);
    td_status s = TD_OK;
    if (!c.grads || !c.has || !c.needs || !c.clone_of) {
        s = TD_OOM(ctx, "autodiff bookkeeping", sizeof *c.grads * c.count);
        goto done;
    }
    for (uint32_t id = 0; id < c.count; id++)
        c.clone_of[id] = id;
    for (uint32_t i = 0; i < n; i++)
        c.needs[params[i]] = 1;
    for (uint32_t id = 0; id < c.count; id++)
        for (uint32_t k = 0; k < g->nodes[id].n_in; k++)
            c.needs[id] |= c.needs[g->nodes[id].in[k]];

    td_node seed;
    if ((s = td_graph_constant(g, 1.0f, &seed)) != TD_OK)
        goto done;
    if (g->nodes[loss].shape.rank != 0) {
        td_node_def d = td_node_make(TD_OP_RESHAPE, 2, seed, loss, 0);
        if ((s = td_graph_append(g, &d, &seed)) != TD_OK)
            goto done;
    }
    c.grads[loss] = seed;
    c.has[loss] = 1;

    for (int64_t id = loss; id >= 0 && s == TD_OK; id--) {
        if (!c.has[id] || !c.needs[id])
            continue;
        const td_op_def *op = td_op_def_of(g->nodes[id].op);
        /* The first node of a recomputed region the walk reaches is its
         * last: copy the region now, right before its gradients, and let
         * the rules read the copies. */
        uint32_t region = g->nodes[id].recompute;
        if (region && c.clone_of[id] == (td_node)id && !(op->flags & TD_OPF_SOURCE) &&
            (s = clone_region(&c, region, (td_node)id)) != TD_OK)
            break;
        if (!op->grad)
            s = td_error_set(ctx, TD_ERR_UNSUPPORTED, "%s: node %lld (%s) is not differentiable", fn, (long long)id,
                             op->name);
        else
            s = op->grad(&c, c.clone_of[id], c.grads[id]);
    }
    for (uint32_t i = 0; i < n && s == TD_OK; i++) {
        if (c.has[params[i]])
            grads_out[i] = c.grads[params[i]];
        else
            s = zero_gradient(g, params[i], &grads_out[i]);
    }
    if (s == TD_OK)
        g->has_grad = true;
done:
    td_free(ctx, c.grads);
    td_free(ctx, c.has);
    td_free(ctx, c.needs);
    td_free(ctx, c.clone_of);
    td_free(ctx, c.origin);
    return s;
}
