/* The checks every layer makes first, so a refused call adds nothing. */
#include <stdio.h>
#include <string.h>

#include "td_layer_internal.h"

td_status td_layer_check(td_graph *g, const char *fn, const char *name, td_node x, const td_node *out,
                         uint32_t min_rank, bool use_bias, char kernel_name[64], char bias_name[64], uint32_t *rank,
                         int64_t *dims)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    if (!out)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    if (!name || !*name)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: the layer name is %s, expected 1 to %zu bytes", fn,
                            name ? "empty" : "NULL", TD_LAYER_MAX_NAME);
    size_t len = strlen(name);
    if (len > TD_LAYER_MAX_NAME)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: layer name '%.63s%s' is %zu bytes long, expected at most %zu (room for '/kernel')", fn,
                            name, len > 63 ? "..." : "", len, TD_LAYER_MAX_NAME);
    if (x >= g->count)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': input node %u does not exist (graph has %u nodes)",
                            fn, name, x, g->count);
    td_status s = td_graph_shape(g, x, rank, dims);
    if (s != TD_OK)
        return s;
    if (g->nodes[x].dtype != TD_F32) {
        char what[96];
        snprintf(what, sizeof what, "layer '%s': input node %u", name, x);
        return td_dtype_error(ctx, fn, what, g->nodes[x].dtype, "f32");
    }
    if (*rank < min_rank)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': input node %u has rank %u, expected rank >= %u",
                            fn, name, x, *rank, min_rank);
    snprintf(kernel_name, 64, "%s/kernel", name);
    snprintf(bias_name, 64, "%s/bias", name);
    const char *taken = td_graph_find_named(g, kernel_name) != UINT32_MAX ? kernel_name
                        : use_bias && td_graph_find_named(g, bias_name) != UINT32_MAX ? bias_name
                                                                                     : NULL;
    if (taken)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter name '%s' is already used in the graph", fn,
                            taken);
    return TD_OK;
}
