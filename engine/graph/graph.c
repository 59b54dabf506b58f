/* Graph builders. Each validates its operands, infers the global shape at
 * once (so a mistake is reported where it is made) and appends one node. */
#include <stdio.h>
#include <string.h>

#include "td_graph_internal.h"
#include "td_init_internal.h"

static void graph_destroy_owned(td_owned *self)
{
    td_graph_destroy((td_graph *)self);
}

td_status td_graph_create(td_context *ctx, td_graph **out)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!out)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_create: out is NULL");
    td_graph *g = td_alloc_zeroed(ctx, sizeof *g);
    if (!g)
        return TD_OOM(ctx, "a graph", sizeof *g);
    g->ctx = ctx;
    td_context_own(ctx, &g->owned, graph_destroy_owned);
    *out = g;
    return TD_OK;
}

void td_graph_destroy(td_graph *g)
{
    if (!g)
        return;
    td_context_disown(g->ctx, &g->owned);
    td_free(g->ctx, g->nodes);
    td_free(g->ctx, g);
}

td_status td_graph_append(td_graph *g, const td_node_def *def, td_node *out)
{
    if (g->count == g->capacity) {
        uint32_t cap = g->capacity ? g->capacity * 2 : 32;
        td_node_def *nodes = td_alloc(g->ctx, sizeof *nodes * cap);
        if (!nodes)
            return TD_OOM(g->ctx, "graph nodes", sizeof *nodes * cap);
        if (g->count)
            memcpy(nodes, g->nodes, sizeof *nodes * g->count);
        td_free(g->ctx, g->nodes);
        g->nodes = nodes;
        g->capacity = cap;
    }
    td_node id = g->count;
    g->nodes[id] = *def;
    /* Inference reads only earlier nodes' shapes, which live in the nodes. */
    td_shape shapes_tmp;
    td_shape *shapes = td_alloc(g->ctx, sizeof *shapes * (id + 1));
    if (!shapes)
        return TD_OOM(g->ctx, "shape inference", sizeof *shapes * (id + 1));
    for (uint32_t i = 0; i < id; i++)
        shapes[i] = g->nodes[i].shape;
    td_status s = td_graph_infer(g, id, shapes, 1);
    shapes_tmp = shapes[id];
    td_free(g->ctx, shapes);
    if (s != TD_OK)
        return s;
    g->nodes[id].shape = shapes_tmp;
    g->count++;
    if (out)
        *out = id;
    return TD_OK;
}

static td_status check_graph(td_graph *g, td_node *out, const char *fn)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    if (!out)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    return TD_OK;
}

static td_status check_node(td_graph *g, td_node n, const char *fn, td_dtype want)
{
    if (n >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u does not exist (graph has %u nodes)", fn, n,
                            g->count);
    if (g->nodes[n].dtype != want)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u is %s, expected %s", fn, n,
                            td_dtype_name(g->nodes[n].dtype), td_dtype_name(want));
    return TD_OK;
}

static td_status check_dims(td_graph *g, uint32_t rank, const int64_t *dims, const char *fn, int allow_minus_one)
{
    if (rank > TD_MAX_RANK)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: rank %u exceeds the maximum %d", fn, rank,
                            TD_MAX_RANK);
    if (rank && !dims)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: dims is NULL for rank %u", fn, rank);
    for (uint32_t i = 0; i < rank; i++)
        if (dims[i] < 0 && !(allow_minus_one && dims[i] == -1))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: dimension %u is %lld (expected >= 0)", fn, i,
                                (long long)dims[i]);
    return TD_OK;
}

td_node td_graph_find_named(const td_graph *g, const char *name)
{
    for (uint32_t id = 0; id < g->count; id++) {
        td_op op = g->nodes[id].op;
        if ((op == TD_OP_INPUT || op == TD_OP_PARAM) && strcmp(g->nodes[id].name, name) == 0)
            return id;
    }
    return UINT32_MAX;
}

/* Checkpoints and bindings by name key on inputs' and parameters' names, so
 * each must be unique and fit the node's name field whole: a truncated name
 * could silently collide with another. A NULL name gets "<kind>_<node id>",
 * which is unique unless the caller chose that very name. */
static td_status node_name(td_graph *g, const char *name, const char *fn, const char *kind, char out[64])
{
    if (!name) {
        snprintf(out, 64, "%s_%u", kind, g->count);
    } else {
        size_t len = strlen(name);
        if (len == 0)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: the %s name is empty, expected 1 to 63 bytes", fn,
                                kind);
        if (len >= 64)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: %s name '%.63s...' is %zu bytes long, expected at most 63", fn, kind, name, len);
        memcpy(out, name, len + 1);
    }
    td_node other = td_graph_find_named(g, out);
    if (other != UINT32_MAX)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: name '%s' is already used by %s node %u, expected a name unique among the graph's inputs "
                            "and parameters",
                            fn, out, g->nodes[other].op == TD_OP_PARAM ? "parameter" : "input", other);
    return TD_OK;
}

static td_node_def def_of(td_op op, td_dtype dtype)
{
    td_node_def d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.dtype = dtype;
    return d;
}

td_status td_graph_input(td_graph *g, const char *name, td_dtype dtype, uint32_t rank, const int64_t *dims,
                         td_placement placement, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_input");
    if (s != TD_OK || (s = check_dims(g, rank, dims, "td_graph_input", 0)) != TD_OK)
        return s;
    if (dtype != TD_F32 && dtype != TD_I32)
        return td_error_set(g->ctx, TD_ERR_UNSUPPORTED, "td_graph_input: dtype %s is not supported yet (f32 or i32)",
                            td_dtype_name(dtype));
    if (placement != TD_SHARDED && placement != TD_REPLICATED)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_input: placement %d is not a td_placement",
                            (int)placement);
    td_node_def d = def_of(TD_OP_INPUT, dtype);
    d.placement = placement;
    d.requested.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.requested.dims[i] = dims[i];
    if ((s = node_name(g, name, "td_graph_input", "input", d.name)) != TD_OK)
        return s;
    return td_graph_append(g, &d, out);
}

static td_status param(td_graph *g, const char *name, uint32_t rank, const int64_t *dims, const td_initializer *init,
                       td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_dims(g, rank, dims, fn, 0)) != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_PARAM, TD_F32);
    d.placement = TD_REPLICATED;
    d.requested.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.requested.dims[i] = dims[i];
    if ((s = node_name(g, name, fn, "param", d.name)) != TD_OK)
        return s;
    if (init) {
        if ((s = td_init_check(g->ctx, init, fn, d.name)) != TD_OK)
            return s;
        d.init = *init;
    }
    return td_graph_append(g, &d, out);
}

td_status td_graph_param(td_graph *g, const char *name, uint32_t rank, const int64_t *dims, td_node *out)
{
    return param(g, name, rank, dims, NULL, out, "td_graph_param");
}

td_status td_graph_param_init(td_graph *g, const char *name, uint32_t rank, const int64_t *dims,
                              const td_initializer *init, td_node *out)
{
    if (g && !init)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_param_init: init is NULL");
    return param(g, name, rank, dims, init, out, "td_graph_param_init");
}

td_status td_graph_params(const td_graph *g, uint32_t capacity, td_node *nodes, uint32_t *count)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    if (!count || (capacity && !nodes))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_graph_params: count is NULL, or nodes is NULL for capacity %u", capacity);
    uint32_t n = 0;
    for (uint32_t id = 0; id < g->count; id++)
        if (g->nodes[id].op == TD_OP_PARAM) {
            if (nodes && n < capacity)
                nodes[n] = id;
            n++;
        }
    *count = n;
    if (nodes && n > capacity)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_graph_params: capacity %u is less than the graph's %u parameters", capacity, n);
    return TD_OK;
}

td_status td_graph_constant(td_graph *g, float value, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_constant");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_CONSTANT, TD_F32);
    d.alpha = value;
    return td_graph_append(g, &d, out);
}

static td_status unary(td_graph *g, td_op op, td_node a, float alpha, td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = def_of(op, TD_F32);
    d.in[0] = a;
    d.n_in = 1;
    d.alpha = alpha;
    return td_graph_append(g, &d, out);
}

static td_status binary(td_graph *g, td_op op, td_node a, td_node b, td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK || (s = check_node(g, b, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = def_of(op, TD_F32);
    d.in[0] = a;
    d.in[1] = b;
    d.n_in = 2;
    return td_graph_append(g, &d, out);
}

td_status td_graph_matmul(td_graph *g, td_node a, td_node b, td_node *out)
{
    return binary(g, TD_OP_MATMUL, a, b, out, "td_graph_matmul");
}

td_status td_graph_add(td_graph *g, td_node a, td_node b, td_node *out)
{
    return binary(g, TD_OP_ADD, a, b, out, "td_graph_add");
}

td_status td_graph_sub(td_graph *g, td_node a, td_node b, td_node *out)
{
    return binary(g, TD_OP_SUB, a, b, out, "td_graph_sub");
}

td_status td_graph_mul(td_graph *g, td_node a, td_node b, td_node *out)
{
    return binary(g, TD_OP_MUL, a, b, out, "td_graph_mul");
}

td_status td_graph_scale(td_graph *g, td_node a, float factor, td_node *out)
{
    return unary(g, TD_OP_SCALE, a, factor, out, "td_graph_scale");
}

td_status td_graph_relu(td_graph *g, td_node a, td_node *out)
{
    return unary(g, TD_OP_RELU, a, 0.0f, out, "td_graph_relu");
}

static td_status reduce(td_graph *g, td_node a, uint32_t n_axes, const int32_t *axes, bool keepdims, bool mean,
                        td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK)
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
    td_node_def d = def_of(TD_OP_SUM, TD_F32);
    d.in[0] = a;
    d.n_in = 1;
    d.axes_mask = mask;
    d.keepdims = keepdims;
    d.mean = mean;
    d.alpha = 1.0f;
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

td_status td_graph_reshape(td_graph *g, td_node a, uint32_t rank, const int64_t *dims, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_reshape");
    if (s != TD_OK || (s = check_dims(g, rank, dims, "td_graph_reshape", 1)) != TD_OK)
        return s;
    if (a >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_reshape: node %u does not exist", a);
    td_node_def d = def_of(TD_OP_RESHAPE, g->nodes[a].dtype);
    d.in[0] = a;
    d.n_in = 1;
    d.requested.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.requested.dims[i] = dims[i];
    return td_graph_append(g, &d, out);
}

td_status td_graph_mse(td_graph *g, td_node pred, td_node target, td_node *out)
{
    td_node diff, sq;
    td_status s = check_graph(g, out, "td_graph_mse");
    if (s != TD_OK)
        return s;
    if ((s = td_graph_sub(g, pred, target, &diff)) != TD_OK)
        return s;
    if ((s = td_graph_mul(g, diff, diff, &sq)) != TD_OK)
        return s;
    return td_graph_mean(g, sq, 0, NULL, false, out);
}

td_status td_graph_softmax_cross_entropy(td_graph *g, td_node logits, td_node labels, td_node *out)
{
    const char *fn = "td_graph_softmax_cross_entropy";
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, logits, fn, TD_F32)) != TD_OK ||
        (s = check_node(g, labels, fn, TD_I32)) != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_XENT, TD_F32);
    d.in[0] = logits;
    d.in[1] = labels;
    d.n_in = 2;
    td_node rows;
    if ((s = td_graph_append(g, &d, &rows)) != TD_OK)
        return s;
    return td_graph_mean(g, rows, 0, NULL, false, out);
}

td_status td_graph_psum(td_graph *g, td_node a, td_node *out)
{
    return unary(g, TD_OP_PSUM, a, 1.0f, out, "td_graph_psum");
}

td_status td_graph_pmean(td_graph *g, td_node a, td_node *out)
{
    return unary(g, TD_OP_PMEAN, a, 1.0f, out, "td_graph_pmean");
}

td_status td_graph_all_gather(td_graph *g, td_node a, td_node *out)
{
    return unary(g, TD_OP_ALL_GATHER, a, 1.0f, out, "td_graph_all_gather");
}

td_status td_graph_broadcast(td_graph *g, td_node a, uint32_t root, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_broadcast");
    if (s != TD_OK || (s = check_node(g, a, "td_graph_broadcast", TD_F32)) != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_BROADCAST, TD_F32);
    d.in[0] = a;
    d.n_in = 1;
    d.root = root; /* checked against the mesh size at compile time */
    return td_graph_append(g, &d, out);
}

td_status td_graph_axis_index(td_graph *g, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_axis_index");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_AXIS_INDEX, TD_F32);
    return td_graph_append(g, &d, out);
}

td_status td_graph_shape(const td_graph *g, td_node node, uint32_t *rank, int64_t *dims)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    if (!rank || !dims)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_shape: rank or dims is NULL");
    if (node >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_shape: node %u does not exist (graph has %u nodes)",
                            node, g->count);
    *rank = g->nodes[node].shape.rank;
    for (uint32_t i = 0; i < *rank; i++)
        dims[i] = g->nodes[node].shape.dims[i];
    return TD_OK;
}
