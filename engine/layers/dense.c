/* The dense layer (flax.linen.Dense). Every argument, including the
 * uniqueness of both parameter names, is checked before the first node is
 * added, so a refused call leaves the graph as it was. */
#include <stdio.h>
#include <string.h>

#include "tandem/layers.h"
#include "td_graph_internal.h"

/* "<name>/kernel" must fit the 63 bytes a node name holds. */
#define DENSE_MAX_NAME (63 - (sizeof "/kernel" - 1))

td_status td_layer_dense(td_graph *g, const char *name, td_node x, int64_t features, bool use_bias, uint64_t seed,
                         td_node *out)
{
    const char *fn = "td_layer_dense";
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    if (!out)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    if (!name || !*name)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: the layer name is %s, expected 1 to %zu bytes", fn,
                            name ? "empty" : "NULL", DENSE_MAX_NAME);
    size_t len = strlen(name);
    if (len > DENSE_MAX_NAME)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: layer name '%.63s%s' is %zu bytes long, expected at most %zu (room for '/kernel')", fn,
                            name, len > 63 ? "..." : "", len, DENSE_MAX_NAME);
    if (features <= 0)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': features %lld, expected > 0", fn, name,
                            (long long)features);
    if (x >= g->count)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': input node %u does not exist (graph has %u nodes)",
                            fn, name, x, g->count);
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    td_status s = td_graph_shape(g, x, &rank, dims);
    if (s != TD_OK)
        return s;
    if (rank == 0 || g->nodes[x].dtype != TD_F32)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': input node %u is a %s of rank %u, expected f32 of rank >= 1",
                            fn, name, x, td_dtype_name(g->nodes[x].dtype), rank);
    char kernel_name[64], bias_name[64];
    snprintf(kernel_name, sizeof kernel_name, "%s/kernel", name);
    snprintf(bias_name, sizeof bias_name, "%s/bias", name);
    const char *taken = td_graph_find_named(g, kernel_name) != UINT32_MAX ? kernel_name
                        : use_bias && td_graph_find_named(g, bias_name) != UINT32_MAX ? bias_name
                                                                                     : NULL;
    if (taken)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter name '%s' is already used in the graph", fn, taken);

    const int64_t in = dims[rank - 1];
    td_initializer lecun;
    td_initializer_lecun_normal(seed, &lecun);
    td_node kernel, bias, x2 = x, y;
    int64_t kernel_dims[2] = {in, features}, row[2] = {1, in};
    if ((s = td_graph_param_init(g, kernel_name, 2, kernel_dims, &lecun, &kernel)) != TD_OK)
        return s;
    /* matmul wants a matrix on the left: a vector is a one-row matrix. */
    if (rank == 1 && (s = td_graph_reshape(g, x, 2, row, &x2)) != TD_OK)
        return s;
    if ((s = td_graph_matmul(g, x2, kernel, &y)) != TD_OK)
        return s;
    if (rank == 1 && (s = td_graph_reshape(g, y, 1, &features, &y)) != TD_OK)
        return s;
    if (use_bias) {
        if ((s = td_graph_param(g, bias_name, 1, &features, &bias)) != TD_OK)
            return s;
        if ((s = td_graph_add(g, y, bias, &y)) != TD_OK)
            return s;
    }
    *out = y;
    return TD_OK;
}
