/* tandem — the built-in models: the seed tutorials' networks as library
 * code, so the demos, `tandem train` and an application build the very
 * same graph. Each model only composes public layers (tandem/layers.h);
 * parameter names are flax's ("conv1/kernel", "dense/bias", ...). */
#ifndef TANDEM_MODELS_H
#define TANDEM_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_model_options {
    uint64_t seed;    /* initial parameters and dropout masks */
    int64_t classes;  /* classifier outputs; Fashion-MNIST has 10 */
    bool batch_norm;  /* normalise after each conv / hidden dense (their bias then dropped) */
    float dropout;    /* rate before the classifier (cnn) or after each hidden relu (mlp); 0 = none */
    /* td_model_classification's input scaling: pixels / 255, then
     * (x - input_mean) / input_std. The defaults 0 and 1 leave [0, 1];
     * td_dataset_pixel_stats gives a training set's mean and std. */
    float input_mean;
    float input_std;
    /* Batch norm's statistics over the global batch (td_batch_norm_options
     * .sync: two pmean per layer) instead of each device's shard. Per-device
     * statistics (the default, as flax's without an axis name) depend on
     * the shards, so a run on another mesh or split differs by more than
     * rounding; synchronized ones do not. */
    bool sync_batch_norm;
} td_model_options;

/* seed 0, 10 classes, no batch norm, no dropout, inputs in [0, 1]. */
TD_API td_status td_model_options_init(td_model_options *options);

/* Seed 003's MLP: images [B, H, W, C] f32 flattened, dense 512, relu,
 * dense 512, relu, dense classes -> logits [B, classes]. options NULL:
 * the defaults. */
TD_API td_status td_model_mlp(td_graph *g, td_node images, const td_model_options *options, td_node *logits);

/* Seed 000's CNN: images [B, H, W, C] (H and W multiples of 4): conv 3x3
 * 32, relu, max-pool 2, conv 3x3 64, relu, max-pool 2, flatten, dense
 * classes -> logits [B, classes]. */
TD_API td_status td_model_cnn(td_graph *g, td_node images, const td_model_options *options, td_node *logits);

/* The classifier called `name` ("mlp" or "cnn"); any other name is
 * TD_ERR_INVALID_ARGUMENT naming it and the choices. */
TD_API td_status td_model_classifier(td_graph *g, const char *name, td_node images, const td_model_options *options,
                                     td_node *logits);

/* The classifier `name` trained the way the demos and `tandem train` do:
 * images u8 [B, H, W, C] (raw bytes, cast and scaled on the device: / 255,
 * then standardized by options' input_mean and input_std), labels i32 [B] and mask f32 [B] (1 valid, 0 padding) give
 *   *loss     = masked mean over the global batch of the per-example
 *               softmax cross-entropy of the logits,
 *   *accuracy = masked mean of argmax(logits) == label,
 * both scalars, fit for a trainer (loss, metric) and an evaluator. */
TD_API td_status td_model_classification(td_graph *g, const char *name, td_node images, td_node labels, td_node mask,
                                         const td_model_options *options, td_node *loss, td_node *accuracy);

/* The seed linear regression: x [B, F] -> x @ "linreg/kernel" [F, 1] +
 * "linreg/bias" [1], predictions [B, 1]; parameters start at zero. */
TD_API td_status td_model_linreg(td_graph *g, td_node x, td_node *predictions);

#ifdef __cplusplus
}
#endif
#endif
