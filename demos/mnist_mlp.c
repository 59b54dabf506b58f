/* Seed 003's MLP on Fashion-MNIST: 784 -> 512 -> 512 -> 10 with relu,
 * softmax cross-entropy, Adam 1e-3, global batch 128, trained
 * data-parallel on any mesh (--devices). --batch-norm normalises each
 * hidden layer before its relu; --dropout P follows each hidden relu. */
#include "td_demo_mnist.h"

static td_status hidden(td_graph *g, const char *name, const char *norm, td_node x, const demo_options *o,
                        td_node *out)
{
    td_node h;
    td_status s = td_layer_dense(g, name, x, 512, !o->batch_norm, o->seed, &h);
    if (s == TD_OK && o->batch_norm)
        s = td_layer_batch_norm(g, norm, h, NULL, &h);
    if (s == TD_OK)
        s = td_graph_relu(g, h, &h);
    if (s == TD_OK)
        s = td_graph_dropout(g, h, o->dropout, o->seed, out);
    return s;
}

static td_status build_mlp(td_graph *g, td_node images, const demo_options *o, td_node *logits)
{
    const int64_t flat[2] = {-1, 784};
    td_node x, h;
    td_status s = td_graph_reshape(g, images, 2, flat, &x);
    if (s == TD_OK)
        s = hidden(g, "dense1", "norm1", x, o, &h);
    if (s == TD_OK)
        s = hidden(g, "dense2", "norm2", h, o, &h);
    if (s == TD_OK)
        s = td_layer_dense(g, "dense3", h, 10, true, o->seed, logits);
    return s;
}

int main(int argc, char **argv)
{
    const demo_options defaults = {.devices = "cpu:4", .epochs = 5, .batch = 128, .seed = 0,
                                   .data = TD_FASHION_MNIST_DIR, .learning_rate = 1e-3f, .accumulate = 1};
    return demo_mnist_main("mnist_mlp", argc, argv, build_mlp, &defaults);
}
