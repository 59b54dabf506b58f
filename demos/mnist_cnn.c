/* Seed 000's CNN on Fashion-MNIST (28x28x1): conv 3x3 32, relu, max-pool 2,
 * conv 3x3 64, relu, max-pool 2, dense 10; Adam 1e-3, global batch 128,
 * trained data-parallel on any mesh (--devices). The model is the
 * library's (td_model_cnn): --batch-norm puts a batch norm between each
 * conv and its relu, --dropout P drops the flattened features. */
#include "td_demo_mnist.h"

int main(int argc, char **argv)
{
    const demo_options defaults = {.devices = "cpu:4", .epochs = 5, .batch = 128, .seed = 0,
                                   .data = TD_FASHION_MNIST_DIR, .learning_rate = 1e-3f, .accumulate = 1};
    return demo_mnist_main("mnist_cnn", argc, argv, "cnn", &defaults);
}
