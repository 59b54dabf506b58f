/* Seed 003's MLP on Fashion-MNIST: 784 -> 512 -> 512 -> 10 with relu,
 * softmax cross-entropy, Adam 1e-3, global batch 128, trained
 * data-parallel on any mesh (--devices). */
#include "td_demo_mnist.h"

static td_status build_mlp(td_graph *g, td_node images, const demo_options *o, td_node *logits)
{
    const int64_t flat[2] = {-1, 784};
    td_node x, h1, h2;
    td_status s = td_graph_reshape(g, images, 2, flat, &x);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense1", x, 512, true, o->seed, &h1);
    if (s == TD_OK)
        s = td_graph_relu(g, h1, &h1);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense2", h1, 512, true, o->seed, &h2);
    if (s == TD_OK)
        s = td_graph_relu(g, h2, &h2);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense3", h2, 10, true, o->seed, logits);
    return s;
}

int main(int argc, char **argv)
{
    const demo_options defaults = {.devices = "cpu:4", .epochs = 5, .batch = 128, .seed = 0,
                                   .data = TD_FASHION_MNIST_DIR, .learning_rate = 1e-3f};
    return demo_mnist_main("mnist_mlp", argc, argv, build_mlp, &defaults);
}
