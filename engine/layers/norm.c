/* Normalization layers (flax.linen.LayerNorm, BatchNorm): scale ones,
 * bias zeros; batch norm's running mean zeros and variance ones. */
#include <stdio.h>

#include "td_layer_internal.h"

td_status td_layer_layer_norm(td_graph *g, const char *name, td_node x, float epsilon, td_node *out)
{
    const char *fn = "td_layer_layer_norm";
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    char scale_name[64], bias_name[64];
    /* td_layer_check names "<name>/kernel"; the scale is "<name>/scale". */
    td_status s = td_layer_check(g, fn, name, x, out, 1, true, scale_name, bias_name, &rank, dims);
    if (s != TD_OK)
        return s;
    /* td_graph_layer_norm's own check comes after the parameters exist; a
     * refused layer must leave the graph as it was. NaN fails both tests. */
    if (!(epsilon > 0.0f && epsilon <= 1.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: layer '%s': epsilon %g, expected in (0, 1]", fn, name,
                            (double)epsilon);
    snprintf(scale_name, sizeof scale_name, "%s/scale", name);
    if (td_graph_find_named(g, scale_name) != UINT32_MAX)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter name '%s' is already used in the graph", fn,
                            scale_name);
    int64_t features = dims[rank - 1];
    td_initializer ones;
    td_initializer_ones(&ones);
    td_node scale, bias;
    if ((s = td_graph_param_init(g, scale_name, 1, &features, &ones, &scale)) != TD_OK ||
        (s = td_graph_param(g, bias_name, 1, &features, &bias)) != TD_OK)
        return s;
    return td_graph_layer_norm(g, x, scale, bias, epsilon, out);
}

td_status td_layer_batch_norm(td_graph *g, const char *name, td_node x, const td_batch_norm_options *options,
                              td_node *out)
{
    const char *fn = "td_layer_batch_norm";
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    char names[4][64];
    td_status s = td_layer_check(g, fn, name, x, out, 2, true, names[0], names[1], &rank, dims);
    if (s != TD_OK)
        return s;
    td_batch_norm_options o;
    td_batch_norm_options_init(&o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_batch_norm_options, options, &o)) != TD_OK)
        return s;
    /* Before the parameters exist: a refused layer leaves the graph alone. */
    if ((s = td_batch_norm_check_options(g, fn, &o)) != TD_OK)
        return s;
    static const char *const suffix[4] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof names[i], "%s/%s", name, suffix[i]);
        if (td_graph_find_named(g, names[i]) != UINT32_MAX)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: name '%s' is already used in the graph", fn,
                                names[i]);
    }
    int64_t features = dims[rank - 1];
    td_initializer ones;
    td_initializer_ones(&ones);
    td_node scale, bias, mean, var;
    if ((s = td_graph_param_init(g, names[0], 1, &features, &ones, &scale)) != TD_OK ||
        (s = td_graph_param(g, names[1], 1, &features, &bias)) != TD_OK ||
        (s = td_graph_state(g, names[2], 1, &features, NULL, &mean)) != TD_OK ||
        (s = td_graph_state(g, names[3], 1, &features, &ones, &var)) != TD_OK)
        return s;
    return td_graph_batch_norm(g, x, scale, bias, mean, var, options, out);
}
