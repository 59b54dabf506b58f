/* The dense layer (flax.linen.Dense). Every argument, including the
 * uniqueness of both parameter names, is checked before the first node is
 * added, so a refused call leaves the graph as it was. */
#include <stdio.h>
#include <string.h>

#include "td_layer_internal.h"

td_status td_layer_dense(td_graph *g, const char *name, td_node x, int64_t features, bool use_bias, uint64_t seed,
                         td_node *out)
{
    const char *fn = "td_layer_dense";
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    char kernel_name[64], bias_name[64];
    td_status s = td_layer_check(g, fn, name, x, out, 1, use_bias, kernel_name, bias_name, &rank, dims);
    if (s != TD_OK)
        return s;
    td_context *ctx = g->ctx;
    if (features <= 0)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': features %lld, expected > 0", fn, name,
                            (long long)features);

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
