/* The Fashion-MNIST demos' common driver: options, data and the report
 * (the epoch lines and the final JSON line) around the library's loop
 * (tandem/fit.h). A demo only names its model. */
#ifndef TD_DEMO_MNIST_H
#define TD_DEMO_MNIST_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/tandem.h"

typedef struct demo_options {
    const char *devices;
    int epochs;
    int64_t batch; /* global */
    uint64_t seed;
    const char *data;
    float learning_rate; /* --lr; the recipe's (td_fit_recipe) unless given */
    int64_t limit; /* train on the first `limit` examples of each epoch's order (0 = all) */
    bool batch_norm;     /* --batch-norm: the model normalises its hidden layers (mlp) or convolutions (cnn) */
    bool deterministic;  /* --deterministic: td_context_options.deterministic */
    float dropout;       /* --dropout P: rate before the classifier (0 = none) */
    uint32_t accumulate; /* --accumulate K: micro-batches per update (1 = none) */
    const char *schedule; /* --schedule; the recipe's unless given */
    bool continue_on_loss; /* --on-device-loss continue: drop a failed device and go on (td_trainer_options) */
    const char *balance;   /* --balance: even, auto or W,W,... (td_balance_parse) */
    td_precision precision; /* --precision fp32|bf16: td_fit_options.precision */
    bool raw_inputs; /* --inputs raw: pixels / 255 only; standardized: by the training set's mean and std (recipe's unless given) */
} demo_options;

/* Parses the command line, trains the built-in classifier `model` ("mlp"
 * or "cnn", tandem/models.h) on Fashion-MNIST with its recipe
 * (td_fit_recipe) unless flags say otherwise, and reports.
 * Returns the process exit code. */
int demo_mnist_main(const char *demo, int argc, char **argv, const char *model, const demo_options *defaults);

#endif
