/* The graph itself: creation, appending a node (checking its inputs and
 * inferring its global shape at once, so a mistake is reported where it is
 * made), lookups by name, and the checks every builder shares. The builders
 * live beside their op's table entry, in the ops_*.c files. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "td_op.h"
#include "td_kernel.h"
#include "td_init_internal.h"

_Static_assert(offsetof(td_graph, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

static void graph_release(td_owned *self)
{
    td_graph *g = (td_graph *)self;
    td_free(g->ctx, g->nodes);
    td_free(g->ctx, g->updates);
    g->nodes = NULL;
    g->updates = NULL;
    g->count = g->capacity = 0;
    g->n_updates = g->updates_capacity = 0;
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
    td_context_own(ctx, &g->owned, "graph", NULL, graph_release);
    *out = g;
    return TD_OK;
}

void td_graph_destroy(td_graph *g)
{
    if (g)
        td_owned_destroy(&g->owned);
}

td_status td_graph_append(td_graph *g, const td_node_def *def, td_node *out)
{
    td_status live = td_owned_check_live(&g->owned, td_op_def_of(def->op)->name);
    if (live != TD_OK)
        return live;
    for (uint32_t k = 0; k < def->n_in; k++)
        if (def->in[k] >= g->count)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: input %u is node %u, which does not exist",
                                td_op_def_of(def->op)->name, k, def->in[k]);
    if (g->count == UINT32_MAX - 1)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "the graph already has %u nodes", g->count);
    if (g->count == g->capacity) {
        uint32_t cap = g->capacity ? (g->capacity < UINT32_MAX / 2 ? g->capacity * 2 : UINT32_MAX) : 32;
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
    /* Inference reads the inputs' shapes, which live in the nodes. */
    const td_shape *in[3] = {NULL, NULL, NULL};
    for (uint32_t k = 0; k < def->n_in; k++)
        in[k] = &g->nodes[def->in[k]].shape;
    td_shape shape;
    td_status s = td_graph_infer_node(g, id, in, &shape, 1);
    if (s != TD_OK)
        return s;
    g->nodes[id].shape = shape;
    g->count++;
    if (out)
        *out = id;
    return TD_OK;
}

td_node_def td_node_make(td_op op, uint32_t n_in, td_node a, td_node b, td_node c)
{
    td_node_def d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.dtype = TD_F32;
    d.n_in = n_in;
    d.in[0] = a;
    d.in[1] = b;
    d.in[2] = c;
    return d;
}

td_status td_graph_emit_ew(td_graph *g, int32_t ew_op, float alpha, td_node a, td_node b, td_node *out)
{
    int arity = td_ew_arity(ew_op);
    td_node_def d = td_node_make(TD_OP_ELEMENTWISE, arity == 2 ? 2 : 1, a, b, 0);
    d.attr.ew.op = ew_op;
    d.attr.ew.alpha = alpha;
    return td_graph_append(g, &d, out);
}

td_status td_graph_check_out(td_graph *g, td_node *out, const char *fn)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&g->owned, fn);
    if (s != TD_OK)
        return s;
    if (!out)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    return TD_OK;
}

td_status td_graph_check_node(td_graph *g, td_node n, const char *fn, td_dtype want)
{
    if (n >= g->count)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u does not exist (graph has %u nodes)", fn, n,
                            g->count);
    if (g->nodes[n].dtype != want) {
        char what[32];
        snprintf(what, sizeof what, "node %u", n);
        return td_dtype_error(g->ctx, fn, what, g->nodes[n].dtype, td_dtype_name(want));
    }
    return TD_OK;
}

td_status td_graph_check_dims(td_graph *g, uint32_t rank, const int64_t *dims, const char *fn, int allow_minus_one)
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

td_status td_graph_find(const td_graph *g, const char *name, td_node *out)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&g->owned, "td_graph_find");
    if (s != TD_OK)
        return s;
    if (!name || !out)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_find: name or out is NULL");
    td_node n = td_graph_find_named(g, name);
    if (n == UINT32_MAX)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_find: the graph has no input or parameter '%s'",
                            name);
    *out = n;
    return TD_OK;
}

td_status td_graph_params(const td_graph *g, uint32_t capacity, td_node *nodes, uint32_t *count)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&g->owned, "td_graph_params");
    if (s != TD_OK)
        return s;
    if (!count || (capacity && !nodes))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_graph_params: count is NULL, or nodes is NULL for capacity %u", capacity);
    uint32_t n = 0;
    for (uint32_t id = 0; id < g->count; id++)
        if (g->nodes[id].op == TD_OP_PARAM && !g->nodes[id].is_state) {
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

td_status td_graph_shape(const td_graph *g, td_node node, uint32_t *rank, int64_t *dims)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&g->owned, "td_graph_shape");
    if (s != TD_OK)
        return s;
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

/* ---- convolution and pooling builders ---- */

/* ---- last-axis and data ops ---- */

