/* tandem — layers: graph builders for the common building blocks.
 *
 * A layer is a function of the graph that creates its parameters and the
 * nodes computing its output, the way a flax.linen module's __call__ does.
 * Every layer takes a `name` and calls its parameters "<name>/<param>" with
 * flax's parameter names ("kernel", "bias", later "scale", "embedding"...),
 * and flax's default initializers drawn from `seed`; each parameter's values
 * also depend on its full name, so layers may share one seed. Parameter
 * names are unique within a graph, so a name can be used once. Layers only
 * compose the public graph builders: what they build can be written by hand. */
#ifndef TANDEM_LAYERS_H
#define TANDEM_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* flax.linen.Dense: y = x @ kernel + bias over the last axis of x [..., in],
 * giving [..., features]. Parameters "<name>/kernel" [in, features],
 * lecun_normal(seed), and with use_bias "<name>/bias" [features], zeros.
 * `name` must leave room for the suffixes (at most 56 bytes); nothing is
 * added to the graph when an argument is refused.
 * Since 0.1. */
TD_API td_status td_layer_dense(td_graph *g, const char *name, td_node x, int64_t features, bool use_bias,
                                uint64_t seed, td_node *out);

/* flax.linen.Conv: x [N, H, W, C] -> [N, OH, OW, features] with kernel
 * "<name>/kernel" [kernel_h, kernel_w, C, features], lecun_normal(seed),
 * and with use_bias "<name>/bias" [features], zeros. options: NULL for
 * stride 1, SAME (flax's defaults); see td_graph_conv2d. A bad shape found
 * after the kernel was added leaves that parameter in the graph.
 * Since 0.1. */
TD_API td_status td_layer_conv2d(td_graph *g, const char *name, td_node x, int64_t features, int64_t kernel_h,
                                 int64_t kernel_w, const td_conv2d_options *options, bool use_bias, uint64_t seed,
                                 td_node *out);

/* flax.linen.LayerNorm over the last axis of x [..., features]: parameters
 * "<name>/scale" [features] (ones) and "<name>/bias" [features] (zeros),
 * epsilon (flax's default is 1e-6).
 * Since 0.1. */
TD_API td_status td_layer_layer_norm(td_graph *g, const char *name, td_node x, float epsilon, td_node *out);

/* flax.linen.BatchNorm over every axis of x but the last (features):
 * parameters "<name>/scale" (ones) and "<name>/bias" (zeros), states
 * "<name>/mean" (zeros) and "<name>/var" (ones), all [features]; see
 * td_graph_batch_norm for the options (NULL: momentum 0.99, epsilon 1e-5,
 * per-device statistics).
 * Since 0.1. */
TD_API td_status td_layer_batch_norm(td_graph *g, const char *name, td_node x, const td_batch_norm_options *options,
                                     td_node *out);

#ifdef __cplusplus
}
#endif
#endif
