/* Seed 000's CNN on Fashion-MNIST (28x28x1): conv 3x3 32, relu, max-pool 2,
 * conv 3x3 64, relu, max-pool 2, dense 10; Adam 1e-3, global batch 128,
 * trained data-parallel on any mesh (--devices). */
#include "td_demo_mnist.h"

static td_status build_cnn(td_graph *g, td_node images, const demo_options *o, td_node *logits)
{
    td_pool2d_options pool;
    td_pool2d_options_init(&pool); /* 2x2, stride 2 */
    const int64_t flat[2] = {-1, 7 * 7 * 64};
    td_node h;
    td_status s = td_layer_conv2d(g, "conv1", images, 32, 3, 3, NULL, true, o->seed, &h);
    if (s == TD_OK)
        s = td_graph_relu(g, h, &h);
    if (s == TD_OK)
        s = td_graph_max_pool2d(g, h, &pool, &h);
    if (s == TD_OK)
        s = td_layer_conv2d(g, "conv2", h, 64, 3, 3, NULL, true, o->seed, &h);
    if (s == TD_OK)
        s = td_graph_relu(g, h, &h);
    if (s == TD_OK)
        s = td_graph_max_pool2d(g, h, &pool, &h);
    if (s == TD_OK)
        s = td_graph_reshape(g, h, 2, flat, &h);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense", h, 10, true, o->seed, logits);
    return s;
}

int main(int argc, char **argv)
{
    const demo_options defaults = {.devices = "cpu:4", .epochs = 5, .batch = 128, .seed = 0,
                                   .data = TD_FASHION_MNIST_DIR, .learning_rate = 1e-3f};
    return demo_mnist_main("mnist_cnn", argc, argv, build_cnn, &defaults);
}
