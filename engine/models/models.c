/* The built-in models (tandem/models.h), composed of public layers only. */
#include <math.h>
#include <string.h>

#include "tandem/layers.h"
#include "tandem/models.h"
#include "td_graph_internal.h"

td_status td_model_options_init(td_model_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->classes = 10;
    o->input_std = 1.0f;
    return TD_OK;
}

static td_status check_input_scaling(td_graph *g, const td_model_options *o, const char *fn)
{
    if (isfinite(o->input_mean) && o->input_std > 0.0f && isfinite(o->input_std))
        return TD_OK;
    return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                        "%s: input_mean %g and input_std %g, expected finite values with input_std > 0", fn,
                        (double)o->input_mean, (double)o->input_std);
}

static td_status check(td_graph *g, td_node images, const td_model_options *in, td_model_options *o,
                       td_node *out, const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, images, fn, TD_F32)) != TD_OK)
        return s;
    td_model_options_init(o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_model_options, in, o)) != TD_OK)
        return s;
    if (o->classes < 1)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: classes %lld, expected >= 1", fn,
                            (long long)o->classes);
    if ((s = check_input_scaling(g, o, fn)) != TD_OK)
        return s;
    if (!(o->dropout >= 0.0f && o->dropout < 1.0f))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: dropout %g, expected in [0, 1)", fn,
                            (double)o->dropout);
    if (g->nodes[images].shape.rank != 4)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: images (node %u) have rank %u, expected [B, H, W, C]",
                            fn, images, g->nodes[images].shape.rank);
    return TD_OK;
}

/* x -> [B, everything else]. */
static td_status flatten(td_graph *g, td_node x, td_node *out)
{
    const td_shape *s = &g->nodes[x].shape;
    int64_t features = 1;
    for (uint32_t i = 1; i < s->rank; i++)
        features *= s->dims[i];
    const int64_t dims[2] = {-1, features};
    return td_graph_reshape(g, x, 2, dims, out);
}

static td_status batch_norm(td_graph *g, const char *name, td_node x, const td_model_options *o, td_node *out)
{
    td_batch_norm_options bn;
    td_batch_norm_options_init(&bn);
    bn.sync = o->sync_batch_norm;
    return td_layer_batch_norm(g, name, x, &bn, out);
}

static td_status mlp_hidden(td_graph *g, const char *dense, const char *norm, td_node x, const td_model_options *o,
                            td_node *out)
{
    td_node h;
    td_status s = td_layer_dense(g, dense, x, 512, !o->batch_norm, o->seed, &h);
    if (s == TD_OK && o->batch_norm)
        s = batch_norm(g, norm, h, o, &h);
    if (s == TD_OK)
        s = td_graph_relu(g, h, &h);
    if (s == TD_OK)
        s = td_graph_dropout(g, h, o->dropout, o->seed, &h);
    if (s == TD_OK)
        *out = h;
    return s;
}

td_status td_model_mlp(td_graph *g, td_node images, const td_model_options *options, td_node *logits)
{
    td_model_options o;
    td_status s = check(g, images, options, &o, logits, "td_model_mlp");
    td_node h;
    if (s == TD_OK)
        s = flatten(g, images, &h);
    if (s == TD_OK)
        s = mlp_hidden(g, "dense1", "norm1", h, &o, &h);
    if (s == TD_OK)
        s = mlp_hidden(g, "dense2", "norm2", h, &o, &h);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense3", h, o.classes, true, o.seed, logits);
    return s;
}

static td_status conv_block(td_graph *g, const char *conv, const char *norm, td_node x, int64_t features,
                            const td_model_options *o, td_node *out)
{
    td_pool2d_options pool;
    td_pool2d_options_init(&pool); /* 2x2, stride 2 */
    td_node h;
    td_status s = td_layer_conv2d(g, conv, x, features, 3, 3, NULL, !o->batch_norm, o->seed, &h);
    if (s == TD_OK && o->batch_norm)
        s = batch_norm(g, norm, h, o, &h);
    if (s == TD_OK)
        s = td_graph_relu(g, h, &h);
    if (s == TD_OK)
        s = td_graph_max_pool2d(g, h, &pool, out);
    return s;
}

td_status td_model_cnn(td_graph *g, td_node images, const td_model_options *options, td_node *logits)
{
    const char *fn = "td_model_cnn";
    td_model_options o;
    td_status s = check(g, images, options, &o, logits, fn);
    if (s != TD_OK)
        return s;
    const td_shape *is = &g->nodes[images].shape;
    if (is->dims[1] % 4 || is->dims[2] % 4 || is->dims[1] == 0 || is->dims[2] == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "%s: images are %lldx%lld, expected a height and width that are positive multiples of 4 "
                            "(two 2x2 pools)", fn, (long long)is->dims[1], (long long)is->dims[2]);
    td_node h;
    s = conv_block(g, "conv1", "norm1", images, 32, &o, &h);
    if (s == TD_OK)
        s = conv_block(g, "conv2", "norm2", h, 64, &o, &h);
    if (s == TD_OK)
        s = flatten(g, h, &h);
    if (s == TD_OK)
        s = td_graph_dropout(g, h, o.dropout, o.seed, &h);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense", h, o.classes, true, o.seed, logits);
    return s;
}

td_status td_model_classifier(td_graph *g, const char *name, td_node images, const td_model_options *options,
                              td_node *logits)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    if (name && strcmp(name, "mlp") == 0)
        return td_model_mlp(g, images, options, logits);
    if (name && strcmp(name, "cnn") == 0)
        return td_model_cnn(g, images, options, logits);
    return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_model_classifier: unknown model '%s' (expected mlp or cnn)",
                        name ? name : "(null)");
}

/* pixels (0..255) -> (pixels / 255 - mean) / std, as one scale and one
 * shift: (pixels - 255 mean) * (1 / (255 std)). Only the scale when the
 * mean is 0 and the std 1. */
static td_status standardize(td_graph *g, td_node pixels, float mean, float std, td_node *out)
{
    if (mean == 0.0f && std == 1.0f)
        return td_graph_scale(g, pixels, 1.0f / 255.0f, out);
    td_node shift, centred;
    td_status s = td_graph_constant(g, -255.0f * mean, &shift);
    if (s == TD_OK)
        s = td_graph_add(g, pixels, shift, &centred);
    if (s == TD_OK)
        s = td_graph_scale(g, centred, 1.0f / (255.0f * std), out);
    return s;
}

td_status td_model_classification(td_graph *g, const char *name, td_node images, td_node labels, td_node mask,
                                  const td_model_options *options, td_node *loss, td_node *accuracy)
{
    const char *fn = "td_model_classification";
    td_status s = td_graph_check_out(g, loss, fn);
    if (s != TD_OK || (s = td_graph_check_out(g, accuracy, fn)) != TD_OK ||
        (s = td_graph_check_node(g, images, fn, TD_U8)) != TD_OK)
        return s;
    td_model_options o;
    td_model_options_init(&o);
    if ((s = TD_STRUCT_READ(g->ctx, fn, td_model_options, options, &o)) != TD_OK ||
        (s = check_input_scaling(g, &o, fn)) != TD_OK)
        return s;
    td_node pixels, scaled, logits, per_example, predicted, label_f32, correct;
    if ((s = td_graph_cast(g, images, &pixels)) != TD_OK ||
        (s = standardize(g, pixels, o.input_mean, o.input_std, &scaled)) != TD_OK ||
        (s = td_model_classifier(g, name, scaled, options, &logits)) != TD_OK ||
        (s = td_graph_softmax_cross_entropy_per_example(g, logits, labels, &per_example)) != TD_OK ||
        (s = td_graph_masked_mean(g, per_example, mask, loss)) != TD_OK || (s = td_graph_argmax(g, logits, &predicted)) != TD_OK ||
        (s = td_graph_cast(g, labels, &label_f32)) != TD_OK || (s = td_graph_equal(g, predicted, label_f32, &correct)) != TD_OK)
        return s;
    return td_graph_masked_mean(g, correct, mask, accuracy);
}

td_status td_model_linreg(td_graph *g, td_node x, td_node *predictions)
{
    const char *fn = "td_model_linreg";
    td_status s = td_graph_check_out(g, predictions, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, x, fn, TD_F32)) != TD_OK)
        return s;
    if (g->nodes[x].shape.rank != 2)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "%s: x (node %u) has rank %u, expected [B, features]", fn, x,
                            g->nodes[x].shape.rank);
    td_node w, b, xw;
    const int64_t wd[2] = {g->nodes[x].shape.dims[1], 1}, bd[1] = {1};
    if ((s = td_graph_param(g, "linreg/kernel", 2, wd, &w)) != TD_OK || (s = td_graph_param(g, "linreg/bias", 1, bd, &b)) != TD_OK ||
        (s = td_graph_matmul(g, x, w, &xw)) != TD_OK)
        return s;
    return td_graph_add(g, xw, b, predictions);
}
