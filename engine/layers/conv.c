/* The convolution layer (flax.linen.Conv): an HWIO kernel with lecun_normal
 * and a bias of zeros over the output channels. */
#include "td_layer_internal.h"

td_status td_layer_conv2d(td_graph *g, const char *name, td_node x, int64_t features, int64_t kernel_h,
                          int64_t kernel_w, const td_conv2d_options *options, bool use_bias, uint64_t seed,
                          td_node *out)
{
    const char *fn = "td_layer_conv2d";
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    char kernel_name[64], bias_name[64];
    td_status s = td_layer_check(g, fn, name, x, out, 4, use_bias, kernel_name, bias_name, &rank, dims);
    if (s != TD_OK)
        return s;
    td_context *ctx = g->ctx;
    if (rank != 4 || features <= 0 || kernel_h <= 0 || kernel_w <= 0)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: layer '%s': input rank %u, features %lld, kernel %lldx%lld; expected an NHWC input "
                            "and positive sizes",
                            fn, name, rank, (long long)features, (long long)kernel_h, (long long)kernel_w);
    td_initializer lecun;
    td_initializer_lecun_normal(seed, &lecun);
    const int64_t kd[4] = {kernel_h, kernel_w, dims[3], features};
    td_node kernel, bias, y;
    if ((s = td_graph_param_init(g, kernel_name, 4, kd, &lecun, &kernel)) != TD_OK)
        return s;
    if ((s = td_graph_conv2d(g, x, kernel, options, &y)) != TD_OK)
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
