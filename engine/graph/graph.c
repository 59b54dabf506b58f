/* Graph builders. Each validates its operands, infers the global shape at
 * once (so a mistake is reported where it is made) and appends one node. */
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

static td_status check_graph(td_graph *g, td_node *out, const char *fn)
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

static td_status check_node(td_graph *g, td_node n, const char *fn, td_dtype want)
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
    if (dtype != TD_F32 && dtype != TD_I32 && dtype != TD_U8)
        return td_dtype_error(g->ctx, "td_graph_input", "dtype", dtype, "f32, i32 or u8");
    if (placement != TD_SHARDED && placement != TD_REPLICATED)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_input: placement %d is not a td_placement",
                            (int)placement);
    td_node_def d = def_of(TD_OP_INPUT, dtype);
    d.placement = placement;
    d.attr.dims.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.attr.dims.dims[i] = dims[i];
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
    d.attr.dims.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.attr.dims.dims[i] = dims[i];
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

td_status td_graph_state(td_graph *g, const char *name, uint32_t rank, const int64_t *dims, const td_initializer *init,
                         td_node *out)
{
    td_status s = param(g, name, rank, dims, init, out, "td_graph_state");
    if (s == TD_OK)
        g->nodes[*out].is_state = true;
    return s;
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

td_status td_graph_check_out(td_graph *g, td_node *out, const char *fn)
{
    return check_graph(g, out, fn);
}

td_status td_graph_check_node(td_graph *g, td_node n, const char *fn, td_dtype want)
{
    return check_node(g, n, fn, want);
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

td_status td_graph_constant(td_graph *g, float value, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_constant");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_CONSTANT, TD_F32);
    d.attr.value = value;
    return td_graph_append(g, &d, out);
}

static td_status elementwise(td_graph *g, int32_t ew_op, float alpha, td_node a, td_node b, td_node *out,
                             const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    if (td_ew_arity(ew_op) == 2 && (s = check_node(g, b, fn, TD_F32)) != TD_OK)
        return s;
    return td_graph_emit_ew(g, ew_op, alpha, a, b, out);
}

#define TD_UNARY_BUILDER(fn_name, EW)                                    \
    td_status fn_name(td_graph *g, td_node a, td_node *out)              \
    {                                                                    \
        return elementwise(g, TD_EW_##EW, 0.0f, a, a, out, #fn_name);    \
    }
#define TD_BINARY_BUILDER(fn_name, EW)                                          \
    td_status fn_name(td_graph *g, td_node a, td_node b, td_node *out)          \
    {                                                                           \
        return elementwise(g, TD_EW_##EW, 1.0f, a, b, out, #fn_name);           \
    }

TD_BINARY_BUILDER(td_graph_add, ADD)
TD_BINARY_BUILDER(td_graph_sub, SUB)
TD_BINARY_BUILDER(td_graph_mul, MUL)
TD_BINARY_BUILDER(td_graph_div, DIV)
TD_BINARY_BUILDER(td_graph_maximum, MAXIMUM)
TD_BINARY_BUILDER(td_graph_minimum, MINIMUM)
TD_BINARY_BUILDER(td_graph_equal, EQUAL)
TD_UNARY_BUILDER(td_graph_relu, RELU)
TD_UNARY_BUILDER(td_graph_neg, NEG)
TD_UNARY_BUILDER(td_graph_exp, EXP)
TD_UNARY_BUILDER(td_graph_log, LOG)
TD_UNARY_BUILDER(td_graph_sqrt, SQRT)
TD_UNARY_BUILDER(td_graph_tanh, TANH)
TD_UNARY_BUILDER(td_graph_sigmoid, SIGMOID)
TD_UNARY_BUILDER(td_graph_silu, SILU)

td_status td_graph_gelu(td_graph *g, td_node a, bool approximate, td_node *out)
{
    return elementwise(g, approximate ? TD_EW_GELU_TANH : TD_EW_GELU_ERF, 0.0f, a, a, out, "td_graph_gelu");
}

td_status td_graph_scale(td_graph *g, td_node a, float factor, td_node *out)
{
    if (g && !(factor == factor && factor - factor == 0.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_graph_scale: factor %g is not finite", (double)factor);
    return elementwise(g, TD_EW_SCALE, factor, a, a, out, "td_graph_scale");
}

td_status td_graph_matmul(td_graph *g, td_node a, td_node b, td_node *out)
{
    const char *fn = "td_graph_matmul";
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK || (s = check_node(g, b, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_MATMUL, 2, a, b, 0);
    return td_graph_append(g, &d, out);
}

td_status td_graph_transpose(td_graph *g, td_node a, uint32_t rank, const int32_t *perm, td_node *out)
{
    const char *fn = "td_graph_transpose";
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK)
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
    td_node_def d = td_node_make(TD_OP_SUM, 1, a, 0, 0);
    d.attr.reduce.axes_mask = mask;
    d.attr.reduce.keepdims = keepdims;
    d.attr.reduce.mean = mean;
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
    td_node_def d = td_node_make(TD_OP_RESHAPE, 1, a, 0, 0);
    d.dtype = g->nodes[a].dtype;
    d.attr.dims.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.attr.dims.dims[i] = dims[i];
    return td_graph_append(g, &d, out);
}

td_status td_graph_mse(td_graph *g, td_node pred, td_node target, td_node *out)
{
    const char *fn = "td_graph_mse";
    td_node diff, sq;
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, pred, fn, TD_F32)) != TD_OK || (s = check_node(g, target, fn, TD_F32)) != TD_OK)
        return s;
    if ((s = td_graph_sub(g, pred, target, &diff)) != TD_OK)
        return s;
    if ((s = td_graph_mul(g, diff, diff, &sq)) != TD_OK)
        return s;
    return td_graph_mean(g, sq, 0, NULL, false, out);
}

static td_status xent_rows(td_graph *g, td_node logits, td_node labels, td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, logits, fn, TD_F32)) != TD_OK ||
        (s = check_node(g, labels, fn, TD_I32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_XENT, 2, logits, labels, 0);
    return td_graph_append(g, &d, out);
}

td_status td_graph_softmax_cross_entropy(td_graph *g, td_node logits, td_node labels, td_node *out)
{
    td_node rows;
    td_status s = xent_rows(g, logits, labels, &rows, "td_graph_softmax_cross_entropy");
    return s == TD_OK ? td_graph_mean(g, rows, 0, NULL, false, out) : s;
}

td_status td_graph_softmax_cross_entropy_per_example(td_graph *g, td_node logits, td_node labels, td_node *out)
{
    return xent_rows(g, logits, labels, out, "td_graph_softmax_cross_entropy_per_example");
}

/* Built from existing ops so every backend lowers it and autodiff needs no
 * new rule: the count path depends on the mask only, so no gradient flows
 * through the pmean. 2^-20 is below any device-average of a 0/1 count that
 * is not zero (1/N) and keeps 1/den far from overflow when the loss is
 * scaled afterwards. */
td_status td_graph_masked_mean(td_graph *g, td_node per_example, td_node mask, td_node *out)
{
    const char *fn = "td_graph_masked_mean";
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, per_example, fn, TD_F32)) != TD_OK || (s = check_node(g, mask, fn, TD_F32)) != TD_OK)
        return s;
    const td_shape *xs = &g->nodes[per_example].shape, *ms = &g->nodes[mask].shape;
    if (xs->rank < 1)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: per_example (node %u) is a scalar, expected [B] or [B, ...]",
                            fn, per_example);
    if (ms->rank != 1 || ms->dims[0] != xs->dims[0]) {
        char a[96], b[96];
        td_shape_format(ms, a, sizeof a);
        td_shape_format(xs, b, sizeof b);
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: mask (node %u) has shape %s, expected [%lld] to match per_example %s",
                            fn, mask, a, (long long)xs->dims[0], b);
    }
    td_node x = per_example, masked, local, count, avg_count, tiny, den, weight;
    if (xs->rank > 1) {
        int32_t axes[TD_MAX_RANK];
        for (uint32_t i = 1; i < xs->rank; i++)
            axes[i - 1] = (int32_t)i;
        if ((s = td_graph_mean(g, per_example, xs->rank - 1, axes, false, &x)) != TD_OK)
            return s;
    }
    if ((s = td_graph_mul(g, x, mask, &masked)) != TD_OK || (s = td_graph_sum(g, masked, 0, NULL, false, &local)) != TD_OK ||
        (s = td_graph_sum(g, mask, 0, NULL, false, &count)) != TD_OK || (s = td_graph_pmean(g, count, &avg_count)) != TD_OK ||
        (s = td_graph_constant(g, 0x1p-20f, &tiny)) != TD_OK || (s = td_graph_maximum(g, avg_count, tiny, &den)) != TD_OK)
        return s;
    /* Already global: divided by the shard weight, so the trainer's
     * weighted mean over the devices gives it back on any split (the
     * weight is exactly 1 on an even one). */
    if ((s = td_graph_shard_weight(g, &weight)) != TD_OK || (s = td_graph_mul(g, den, weight, &den)) != TD_OK)
        return s;
    return td_graph_div(g, local, den, out);
}

static td_status collective(td_graph *g, td_op op, td_node a, uint32_t root, td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(op, 1, a, 0, 0);
    d.attr.broadcast.root = root; /* checked against the mesh size at compile time */
    return td_graph_append(g, &d, out);
}

td_status td_graph_psum(td_graph *g, td_node a, td_node *out)
{
    return collective(g, TD_OP_PSUM, a, 0, out, "td_graph_psum");
}

td_status td_graph_pmean(td_graph *g, td_node a, td_node *out)
{
    return collective(g, TD_OP_PMEAN, a, 0, out, "td_graph_pmean");
}

td_status td_graph_all_gather(td_graph *g, td_node a, td_node *out)
{
    return collective(g, TD_OP_ALL_GATHER, a, 0, out, "td_graph_all_gather");
}

td_status td_graph_broadcast(td_graph *g, td_node a, uint32_t root, td_node *out)
{
    return collective(g, TD_OP_BROADCAST, a, root, out, "td_graph_broadcast");
}

td_status td_graph_axis_index(td_graph *g, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_axis_index");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_AXIS_INDEX, TD_F32);
    return td_graph_append(g, &d, out);
}

td_status td_graph_shard_weight(td_graph *g, td_node *out)
{
    td_status s = check_graph(g, out, "td_graph_shard_weight");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_SHARD_WEIGHT, TD_F32);
    return td_graph_append(g, &d, out);
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

/* Pads of one spatial axis for SAME / VALID / EXPLICIT. */
static void axis_pads(td_padding_kind kind, int64_t in, int64_t span, int64_t stride, const int64_t *explicit_pad,
                      int64_t *before, int64_t *after)
{
    if (kind == TD_PADDING_EXPLICIT) {
        *before = explicit_pad[0];
        *after = explicit_pad[1];
    } else if (kind == TD_PADDING_SAME) {
        int64_t out = (in + stride - 1) / stride;
        int64_t total = (out - 1) * stride + span - in;
        total = total > 0 ? total : 0;
        *before = total / 2;
        *after = total - *before;
    } else {
        *before = *after = 0;
    }
}

static td_status window_attrs(td_graph *g, const char *fn, td_node x, const int64_t window[2], const int64_t stride[2],
                              const int64_t dilation[2], td_padding_kind padding, const int64_t pad[4],
                              td_node_def *d)
{
    for (int i = 0; i < 2; i++) {
        if (stride[i] < 1 || stride[i] > ((int64_t)1 << 30))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: stride[%d] is %lld, expected 1 to 2^30", fn, i,
                                (long long)stride[i]);
        if (dilation[i] < 1 || dilation[i] > ((int64_t)1 << 30))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: dilation[%d] is %lld, expected 1 to 2^30", fn,
                                i, (long long)dilation[i]);
        if (window[i] < 1 || window[i] > ((int64_t)1 << 30))
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: window[%d] is %lld, expected 1 to 2^30", fn, i,
                                (long long)window[i]);
    }
    if (padding != TD_PADDING_SAME && padding != TD_PADDING_VALID && padding != TD_PADDING_EXPLICIT)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: padding %d is not a td_padding_kind", fn,
                            (int)padding);
    if (padding == TD_PADDING_EXPLICIT)
        for (int i = 0; i < 4; i++)
            if (pad[i] < 0 || pad[i] > ((int64_t)1 << 30))
                return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: pad[%d] is %lld, expected 0 to 2^30", fn, i,
                                    (long long)pad[i]);
    const td_shape *xs = &g->nodes[x].shape;
    if (xs->rank != 4)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: x has rank %u, expected 4 (NHWC)", fn, xs->rank);
    for (int i = 0; i < 2; i++) {
        d->attr.conv.window[i] = window[i];
        d->attr.conv.stride[i] = stride[i];
        d->attr.conv.dilation[i] = dilation[i];
        axis_pads(padding, xs->dims[1 + i], dilation[i] * (window[i] - 1) + 1, stride[i], pad + 2 * i,
                  &d->attr.conv.pad[2 * i], &d->attr.conv.pad[2 * i + 1]);
    }
    return TD_OK;
}

td_status td_conv2d_options_init(td_conv2d_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->stride[0] = o->stride[1] = 1;
    o->dilation[0] = o->dilation[1] = 1;
    o->padding = TD_PADDING_SAME;
    return TD_OK;
}

td_status td_graph_conv2d(td_graph *g, td_node x, td_node kernel, const td_conv2d_options *options, td_node *out)
{
    const char *fn = "td_graph_conv2d";
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, x, fn, TD_F32)) != TD_OK || (s = check_node(g, kernel, fn, TD_F32)) != TD_OK)
        return s;
    td_conv2d_options o;
    td_conv2d_options_init(&o);
    if (options)
        o = *options;
    const td_shape *ks = &g->nodes[kernel].shape;
    if (ks->rank != 4)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: kernel has rank %u, expected 4 (KH, KW, C, O)", fn,
                            ks->rank);
    td_node_def d = td_node_make(TD_OP_CONV2D, 2, x, kernel, 0);
    int64_t window[2] = {ks->dims[0], ks->dims[1]};
    if ((s = window_attrs(g, fn, x, window, o.stride, o.dilation, o.padding, o.pad, &d)) != TD_OK)
        return s;
    return td_graph_append(g, &d, out);
}

td_status td_pool2d_options_init(td_pool2d_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->window[0] = o->window[1] = 2;
    o->stride[0] = o->stride[1] = 2;
    o->padding = TD_PADDING_VALID;
    o->count_include_pad = true;
    return TD_OK;
}

static td_status pool(td_graph *g, td_node x, const td_pool2d_options *options, int32_t mode, td_node *out,
                      const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    td_pool2d_options o;
    td_pool2d_options_init(&o);
    if (options)
        o = *options;
    td_node_def d = td_node_make(TD_OP_POOL, 1, x, 0, 0);
    const int64_t one[2] = {1, 1};
    if ((s = window_attrs(g, fn, x, o.window, o.stride, one, o.padding, o.pad, &d)) != TD_OK)
        return s;
    d.attr.conv.mode = mode;
    d.attr.conv.count_include_pad = o.count_include_pad;
    return td_graph_append(g, &d, out);
}

td_status td_graph_max_pool2d(td_graph *g, td_node x, const td_pool2d_options *options, td_node *out)
{
    return pool(g, x, options, TD_POOL_MAX, out, "td_graph_max_pool2d");
}

td_status td_graph_avg_pool2d(td_graph *g, td_node x, const td_pool2d_options *options, td_node *out)
{
    return pool(g, x, options, TD_POOL_AVG, out, "td_graph_avg_pool2d");
}

/* ---- last-axis and data ops ---- */

static td_status rows_op(td_graph *g, td_op op, int32_t mode, td_node a, td_node *out, const char *fn)
{
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, a, fn, TD_F32)) != TD_OK)
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

td_status td_graph_argmax(td_graph *g, td_node a, td_node *out)
{
    return rows_op(g, TD_OP_ARGMAX, 0, a, out, "td_graph_argmax");
}

td_status td_graph_cast(td_graph *g, td_node a, td_node *out)
{
    const char *fn = "td_graph_cast";
    td_status s = check_graph(g, out, fn);
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
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, table, fn, TD_F32)) != TD_OK || (s = check_node(g, ids, fn, TD_I32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(TD_OP_EMBEDDING, 2, table, ids, 0);
    return td_graph_append(g, &d, out);
}

td_status td_graph_layer_norm(td_graph *g, td_node x, td_node scale, td_node bias, float epsilon, td_node *out)
{
    const char *fn = "td_graph_layer_norm";
    td_status s = check_graph(g, out, fn);
    if (s != TD_OK || (s = check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    if (!(epsilon > 0.0f) || epsilon != epsilon || epsilon > 1.0f)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: epsilon %g, expected in (0, 1]", fn,
                            (double)epsilon);
    const td_shape *xs = &g->nodes[x].shape;
    if (xs->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: x is a scalar, expected rank >= 1 (normalises the last axis)",
                            fn);
    int64_t features = xs->dims[xs->rank - 1];
    const td_node affine[2] = {scale, bias};
    for (int i = 0; i < 2; i++) {
        if (affine[i] == TD_NO_NODE)
            continue;
        if ((s = check_node(g, affine[i], fn, TD_F32)) != TD_OK)
            return s;
        const td_shape *as = &g->nodes[affine[i]].shape;
        if (as->rank != 1 || as->dims[0] != features)
            return td_shape_mismatch(g, affine[i], i ? "layer_norm bias must be [features]" : "layer_norm scale must be [features]",
                                     as, xs);
    }
    /* (x - mean) * rsqrt(var + eps) * scale + bias over the last axis, from
     * existing ops: autodiff composes the gradient. */
    const int32_t last = -1;
    td_node mean, xc, sq, var, eps, ve, inv, y;
    if ((s = td_graph_mean(g, x, 1, &last, true, &mean)) != TD_OK ||
        (s = td_graph_sub(g, x, mean, &xc)) != TD_OK || (s = td_graph_mul(g, xc, xc, &sq)) != TD_OK ||
        (s = td_graph_mean(g, sq, 1, &last, true, &var)) != TD_OK ||
        (s = td_graph_constant(g, epsilon, &eps)) != TD_OK || (s = td_graph_add(g, var, eps, &ve)) != TD_OK ||
        (s = td_graph_emit_ew(g, TD_EW_RSQRT, 0.0f, ve, ve, &inv)) != TD_OK || (s = td_graph_mul(g, xc, inv, &y)) != TD_OK)
        return s;
    if (scale != TD_NO_NODE && (s = td_graph_mul(g, y, scale, &y)) != TD_OK)
        return s;
    if (bias != TD_NO_NODE && (s = td_graph_add(g, y, bias, &y)) != TD_OK)
        return s;
    *out = y;
    return TD_OK;
}
