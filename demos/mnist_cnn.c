/* Seed 000's CNN on Fashion-MNIST (28x28x1): conv 3x3 32, relu, max-pool 2,
 * conv 3x3 64, relu, max-pool 2, dense 10; Adam 1e-3, global batch 128,
 * trained data-parallel on any mesh (--devices). --batch-norm puts a batch
 * norm between each conv (then without bias, which the norm cancels) and
 * its relu; --dropout P drops the flattened features before the dense. */
#include "td_demo_mnist.h"

static td_status conv_block(td_graph *g, const char *name, const char *norm, td_node x, int64_t features,
                            const demo_options *o, td_node *out)
{
    td_pool2d_options pool;
    td_pool2d_options_init(&pool); /* 2x2, stride 2 */
    td_node h;
    td_status s = td_layer_conv2d(g, name, x, features, 3, 3, NULL, !o->batch_norm, o->seed, &h);
    if (s == TD_OK && o->batch_norm)
        s = td_layer_batch_norm(g, norm, h, NULL, &h);
    if (s == TD_OK)
        s = td_graph_relu(g, h, &h);
    if (s == TD_OK)
        s = td_graph_max_pool2d(g, h, &pool, out);
    return s;
}

static td_status build_cnn(td_graph *g, td_node images, const demo_options *o, td_node *logits)
{
    const int64_t flat[2] = {-1, 7 * 7 * 64};
    td_node h;
    td_status s = conv_block(g, "conv1", "norm1", images, 32, o, &h);
    if (s == TD_OK)
        s = conv_block(g, "conv2", "norm2", h, 64, o, &h);
    if (s == TD_OK)
        s = td_graph_reshape(g, h, 2, flat, &h);
    if (s == TD_OK)
        s = td_graph_dropout(g, h, o->dropout, o->seed, &h);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense", h, 10, true, o->seed, logits);
    return s;
}

int main(int argc, char **argv)
{
    const demo_options defaults = {.devices = "cpu:4", .epochs = 5, .batch = 128, .seed = 0,
                                   .data = TD_FASHION_MNIST_DIR, .learning_rate = 1e-3f, .accumulate = 1};
    return demo_mnist_main("mnist_cnn", argc, argv, build_cnn, &defaults);
}
