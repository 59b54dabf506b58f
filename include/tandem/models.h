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

/* ---- the GPT of seed 002 ---- */

typedef struct td_gpt_options {
    uint64_t seed;   /* initial parameters and dropout masks */
    int64_t vocab;   /* token ids 0..vocab-1: 256 for bytes, 50257 for GPT-2's tokens */
    int64_t context; /* rows of the position table: the longest sequence */
    int64_t layers;
    int64_t heads;   /* must divide width */
    int64_t width;   /* the residual stream's features (GPT-2: n_embd) */
    /* Rate of the dropouts GPT-2 places: after the embeddings, on the
     * attention weights, and on each block's two residual branches. 0 =
     * none (the programs then hold no dropout node). */
    float dropout;
    /* Keep only each block's input for the backward pass and compute the
     * block again there (td_graph_recompute): activation memory of about
     * one block instead of all of them, for a second forward pass. The
     * same values and gradients. */
    bool recompute;
} td_gpt_options;

/* seed 0, vocab 256 (bytes), context 64, 4 layers, 4 heads, width 128, no
 * dropout: nanoGPT's character model on a CPU. */
TD_API td_status td_gpt_options_init(td_gpt_options *options);

/* GPT-2 (Radford et al. 2019, as Hugging Face's GPT2LMHeadModel): tokens
 * i32 [B, T] (1 <= T <= context) -> logits [B, T, vocab]. Token and learned
 * position embeddings, `layers` pre-LayerNorm blocks of causal multi-head
 * self-attention (one fused QKV projection, an output projection) and a 4x
 * GELU(tanh) MLP, each with its residual, a final LayerNorm, and a head
 * tied to the token table. Parameters are named as Hugging Face's GPT-2
 * keys without "transformer.", every matrix [in, out] (x @ W, the layout of
 * GPT-2's Conv1D): "wte.weight" [vocab, width], "wpe.weight" [context,
 * width], "h.<l>.ln_1.weight" / ".bias", "h.<l>.attn.c_attn.weight" [width,
 * 3 width] (columns q | k | v, heads contiguous in each) and ".bias",
 * "h.<l>.attn.c_proj.*", "h.<l>.ln_2.*", "h.<l>.mlp.c_fc.weight" [width,
 * 4 width], "h.<l>.mlp.c_proj.*", "ln_f.weight" / ".bias". GPT-2's
 * initialization: weights and embeddings normal(0, 0.02), the two residual
 * projections of each block normal(0, 0.02 / sqrt(2 layers)), biases 0,
 * LayerNorm scales 1. options NULL: the defaults. */
TD_API td_status td_model_gpt(td_graph *g, td_node tokens, const td_gpt_options *options, td_node *logits);

/* The language-model loss: tokens and targets i32 [B, T] (targets[b, t] =
 * the token after tokens[b, t]), mask f32 [B] (1 = a real sequence, 0 =
 * padding): the mean cross-entropy over every token of the valid
 * sequences of the global batch (td_graph_masked_mean), a scalar. Builds
 * td_model_gpt. */
TD_API td_status td_model_gpt_loss(td_graph *g, td_node tokens, td_node targets, td_node mask,
                                   const td_gpt_options *options, td_node *loss);

#ifdef __cplusplus
}
#endif
#endif
