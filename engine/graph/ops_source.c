/* Ops with no operands: inputs, parameters, constants and the device index. */
#include <stdio.h>
#include <string.h>

#include "td_init_internal.h"
#include "td_op.h"

static td_status infer_input(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                             uint32_t devices)
{
    const td_node_def *n = &g->nodes[id];
    (void)in;
    *out = n->attr.dims;
    if (n->placement != TD_SHARDED)
        return TD_OK;
    if (out->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "input '%s' is sharded but is a scalar (needs axis 0)",
                            n->name);
    if (out->dims[0] % devices != 0)
        return td_error_set(g->ctx, TD_ERR_NOT_DIVISIBLE,
                            "input '%s': batch size %lld (axis 0) does not split evenly over %u devices", n->name,
                            (long long)out->dims[0], devices);
    out->dims[0] /= devices;
    return TD_OK;
}

static td_status infer_requested(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                 uint32_t devices)
{
    (void)in;
    (void)devices;
    *out = g->nodes[id].attr.dims;
    return TD_OK;
}

static td_status infer_scalar(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                              uint32_t devices)
{
    (void)g, (void)id, (void)in, (void)devices;
    out->rank = 0;
    return TD_OK;
}

static td_status grad_none(td_grad_ctx *c, td_node id, td_node gy)
{
    (void)c, (void)id, (void)gy;
    return TD_OK; /* leaves of the graph: nothing upstream */
}

static void emit_fill(const td_emit_ctx *e, td_node id, td_kernel_call *c)
{
    const td_node_def *n = &e->g->nodes[id];
    c->kernel = TD_KERNEL_FILL;
    c->out = td_emit_arg(e, id);
    c->n = td_shape_count(&e->plan->shapes[id]);
    c->alpha = n->op == TD_OP_CONSTANT     ? n->attr.value
               : n->op == TD_OP_SHARD_WEIGHT ? e->plan->shard_weight
                                             : (float)e->position;
}

const td_op_def td_op_input = {"input", TD_OPF_SOURCE, infer_input, grad_none, NULL, NULL, NULL};
const td_op_def td_op_param = {"param", TD_OPF_SOURCE, infer_requested, grad_none, NULL, NULL, NULL};
/* Constants are scalars; ops broadcast them. */
const td_op_def td_op_constant = {"constant", 0, infer_scalar, grad_none, NULL, NULL, emit_fill};
const td_op_def td_op_axis_index = {"axis_index", 0, infer_scalar, grad_none, NULL, NULL, emit_fill};
const td_op_def td_op_shard_weight = {"shard_weight", 0, infer_scalar, grad_none, NULL, NULL, emit_fill};

/* ---- builders ---- */

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
    td_status s = td_graph_check_out(g, out, "td_graph_input");
    if (s != TD_OK || (s = td_graph_check_dims(g, rank, dims, "td_graph_input", 0)) != TD_OK)
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
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_dims(g, rank, dims, fn, 0)) != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_PARAM, TD_F32);
    d.placement = TD_REPLICATED;
    d.attr.dims.rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        d.attr.dims.dims[i] = dims[i];
    if ((s = node_name(g, name, fn, "param", d.name)) != TD_OK)
        return s;
    if (init) {
        td_initializer local;
        td_initializer_zeros(&local);
        if ((s = TD_STRUCT_READ(g->ctx, fn, td_initializer, init, &local)) != TD_OK ||
            (s = td_init_check(g->ctx, &local, fn, d.name)) != TD_OK)
            return s;
        d.init = local;
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

td_status td_graph_constant(td_graph *g, float value, td_node *out)
{
    td_status s = td_graph_check_out(g, out, "td_graph_constant");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_CONSTANT, TD_F32);
    d.attr.value = value;
    return td_graph_append(g, &d, out);
}

td_status td_graph_axis_index(td_graph *g, td_node *out)
{
    td_status s = td_graph_check_out(g, out, "td_graph_axis_index");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_AXIS_INDEX, TD_F32);
    return td_graph_append(g, &d, out);
}

td_status td_graph_shard_weight(td_graph *g, td_node *out)
{
    td_status s = td_graph_check_out(g, out, "td_graph_shard_weight");
    if (s != TD_OK)
        return s;
    td_node_def d = def_of(TD_OP_SHARD_WEIGHT, TD_F32);
    return td_graph_append(g, &d, out);
}
