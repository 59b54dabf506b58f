/* tandem — the built-in models: the seed tutorials' networks as library
 * code, so the demos, `tandem train` and an application build the very
 * same graph. Each model only composes public layers (tandem/layers.h);
 * parameter names are flax's ("conv1/kernel", "dense/bias", ...). GPT-2's
 * weights are read from and written to llm.c's and Hugging Face's files
 * below (engine/checkpoint). */
#ifndef TANDEM_MODELS_H
#define TANDEM_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef struct td_model_options {
    size_t struct_size; /* sizeof(td_model_options): growth-safe, see tandem/export.h */
    uint64_t seed;    /* initial parameters and dropout masks */
    int64_t classes;  /* classifier outputs; Fashion-MNIST has 10 */
    bool batch_norm;  /* normalise after each conv / hidden dense (their bias then dropped) */
    float dropout;    /* rate before the classifier (cnn) or after each hidden relu (mlp); 0 = none */
    /* td_model_classification's input scaling: pixels / 255, then
     * (x - input_mean) / input_std. The defaults 0 and 1 leave [0, 1];
     * td_data_pixel_stats gives a training set's mean and std. */
    float input_mean;
    float input_std;
    /* Batch norm's statistics over the global batch (td_batch_norm_options
     * .sync: two pmean per layer) instead of each device's shard. Per-device
     * statistics (the default, as flax's without an axis name) depend on
     * the shards, so a run on another mesh or split differs by more than
     * rounding; synchronized ones do not. */
    bool sync_batch_norm;
} td_model_options;

/* seed 0, 10 classes, no batch norm, no dropout, inputs in [0, 1].
 * Since 0.1. */
TD_API td_status td_model_options_init(td_model_options *options);

/* Seed 003's MLP: images [B, H, W, C] f32 flattened, dense 512, relu,
 * dense 512, relu, dense classes -> logits [B, classes]. options NULL:
 * the defaults.
 * Since 0.1. */
TD_API td_status td_model_mlp(td_graph *g, td_node images, const td_model_options *options, td_node *logits);

/* Seed 000's CNN: images [B, H, W, C] (H and W multiples of 4): conv 3x3
 * 32, relu, max-pool 2, conv 3x3 64, relu, max-pool 2, flatten, dense
 * classes -> logits [B, classes].
 * Since 0.1. */
TD_API td_status td_model_cnn(td_graph *g, td_node images, const td_model_options *options, td_node *logits);

/* The classifier called `name` ("mlp" or "cnn"); any other name is
 * TD_ERR_INVALID_ARGUMENT naming it and the choices.
 * Since 0.1. */
TD_API td_status td_model_classifier(td_graph *g, const char *name, td_node images, const td_model_options *options,
                                     td_node *logits);

/* The classifier `name` trained the way the demos and `tandem train` do:
 * images u8 [B, H, W, C] (raw bytes, cast and scaled on the device: / 255,
 * then standardized by options' input_mean and input_std), labels i32 [B] and mask f32 [B] (1 valid, 0 padding) give
 *   *loss     = masked mean over the global batch of the per-example
 *               softmax cross-entropy of the logits,
 *   *accuracy = masked mean of argmax(logits) == label,
 * both scalars, fit for a trainer (loss, metric) and an evaluator.
 * Since 0.1. */
TD_API td_status td_model_classification(td_graph *g, const char *name, td_node images, td_node labels, td_node mask,
                                         const td_model_options *options, td_node *loss, td_node *accuracy);

/* The seed linear regression: x [B, F] -> x @ "linreg/kernel" [F, 1] +
 * "linreg/bias" [1], predictions [B, 1]; parameters start at zero.
 * Since 0.1. */
TD_API td_status td_model_linreg(td_graph *g, td_node x, td_node *predictions);

/* ---- the GPT of seed 002 ---- */

/* Since 0.1. */
typedef struct td_gpt_options {
    size_t struct_size; /* sizeof(td_gpt_options): growth-safe, see tandem/export.h */
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
 * dropout: nanoGPT's character model on a CPU.
 * Since 0.1. */
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
 * LayerNorm scales 1. options NULL: the defaults.
 * Since 0.1. */
TD_API td_status td_model_gpt(td_graph *g, td_node tokens, const td_gpt_options *options, td_node *logits);

/* The language-model loss: tokens and targets i32 [B, T] (targets[b, t] =
 * the token after tokens[b, t]), mask f32 [B] (1 = a real sequence, 0 =
 * padding): the mean cross-entropy over every token of the valid
 * sequences of the global batch (td_graph_masked_mean), a scalar. Builds
 * td_model_gpt.
 * Since 0.1. */
TD_API td_status td_model_gpt_loss(td_graph *g, td_node tokens, td_node targets, td_node mask,
                                   const td_gpt_options *options, td_node *loss);

/* ---- GPT-2 weights in and out ----
 *
 * A GPT-2's parameters, named as Hugging Face's GPT2Model names them (its
 * keys without the "transformer." prefix), every matrix stored [in, out]
 * (y = x @ W: Hugging Face's Conv1D layout). With V = vocab, T = context,
 * D = width and L = layers, in this order:
 *   wte.weight [V, D] (token embeddings; the output head is tied to them),
 *   wpe.weight [T, D] (position embeddings),
 *   for each layer l = 0 .. L-1, under "h.<l>.":
 *     ln_1.weight [D], ln_1.bias [D],
 *     attn.c_attn.weight [D, 3D], attn.c_attn.bias [3D],
 *     attn.c_proj.weight [D, D], attn.c_proj.bias [D],
 *     ln_2.weight [D], ln_2.bias [D],
 *     mlp.c_fc.weight [D, 4D], mlp.c_fc.bias [4D],
 *     mlp.c_proj.weight [4D, D], mlp.c_proj.bias [D],
 *   ln_f.weight [D], ln_f.bias [D]
 * -- 4 + 12 L tensors. c_attn's 3D columns are [q | k | v], D each, and
 * head h owns columns h*D/H .. (h+1)*D/H - 1 of each (H = heads). */

/* A GPT-2's sizes.
 * Since 0.1. */
typedef struct td_gpt_config {
    size_t struct_size; /* sizeof(td_gpt_config): growth-safe, see tandem/export.h */
    int64_t vocab;        /* V: token ids 0 .. V-1 */
    /* llm.c's padded vocabulary Vp >= V: the rows its wte has (V .. Vp-1
     * unused), so its logits are Vp wide. Read from an llm.c file; 0 when
     * the file does not say (safetensors). For td_gpt_weights_write_llmc,
     * 0 means llm.c's own rule: V rounded up to a multiple of 128. */
    int64_t padded_vocab;
    int64_t context;      /* T: positions, the longest sequence */
    int64_t layers;       /* L */
    int64_t heads;        /* H, dividing width */
    int64_t width;        /* D, the model's channels */
} td_gpt_config;

/* Zeroes *config and sets its struct_size: ready for td_gpt_weights_config,
 * or to fill for td_gpt_weights_write_llmc.
 * Since 0.1. */
TD_API td_status td_gpt_config_init(td_gpt_config *config);

/* GPT-2 parameters read from a file: the config and one f32 host tensor
 * per parameter, in the order above. Owned by its context (released by
 * td_gpt_weights_destroy or td_context_destroy, with the tensors).
 * Since 0.1. */
typedef struct td_gpt_weights td_gpt_weights;

/* Reads GPT-2 weights from `path`, telling the format by its first bytes:
 *   - llm.c's checkpoint (gpt2_124M.bin; int32 magic 20240326): a
 *     256-int32 header (version, T, V, L, H, D, Vp), then the f32 values
 *     in llm.c's order with matrices [out, in]. Version 3 (float32) only:
 *     version 5 (bfloat16) and others are TD_ERR_UNSUPPORTED naming it.
 *     Matrices are transposed to [in, out]; wte's padding rows V .. Vp-1
 *     are dropped; padded_vocab is the header's Vp.
 *   - safetensors (Hugging Face's model.safetensors, or a tandem
 *     checkpoint of a GPT-2): the tensors above by name, each possibly
 *     prefixed "transformer." (dropped), F32, F16 or BF16 (widened to f32
 *     exactly; another dtype is TD_ERR_UNSUPPORTED naming it). V, T, D
 *     and L come from the shapes; padded_vocab is 0. Heads are not in
 *     the tensors: they are "n_head" of the config.json beside the file
 *     (Hugging Face's), else of the file's metadata (a decimal string: a
 *     tandem checkpoint saved with that caller pair), else D / 64 (what
 *     every released GPT-2 size has). config.json's n_embd, n_layer,
 *     n_positions and vocab_size, when present, must agree with the
 *     shapes. Ignored: Hugging Face's
 *     causal-mask buffers h.<l>.attn.bias and h.<l>.attn.masked_bias,
 *     names holding '/' (a tandem checkpoint's optimizer state,
 *     "opt/<slot>/<name>") and lm_head.weight, which must equal
 *     wte.weight (an untied head is TD_ERR_UNSUPPORTED). Any other tensor
 *     is TD_ERR_CORRUPT_DATA naming it. Needs a build with checkpoints
 *     (Jansson); otherwise TD_ERR_UNSUPPORTED.
 * A directory is read as its model.safetensors. Every shape is checked
 * against the config; a bad magic, a header or size that does not add up
 * (a truncated or oversized file), heads not dividing the width, a
 * missing or misshapen tensor are TD_ERR_CORRUPT_DATA naming the file,
 * the tensor, the shape found and the one expected; TD_ERR_IO when the
 * file cannot be read. Each tensor is read straight into its own host
 * tensor (no second copy of the file). On failure *out is NULL and
 * nothing stays allocated.
 * Since 0.1. */
TD_API td_status td_gpt_weights_read(td_context *ctx, const char *path, td_gpt_weights **out);

/* Since 0.1. */
TD_API void td_gpt_weights_destroy(td_gpt_weights *weights);

/* The sizes read (see td_gpt_config).
 * Since 0.1. */
TD_API td_status td_gpt_weights_config(const td_gpt_weights *weights, td_gpt_config *config);

/* The number of tensors, 4 + 12 * layers.
 * Since 0.1. */
TD_API td_status td_gpt_weights_count(const td_gpt_weights *weights, uint32_t *count);

/* Tensor `index` (0 .. count-1, the order above): its name and value,
 * both valid until the weights are destroyed; the tensor is the weights'
 * (read it, do not destroy it). Either out-pointer may be NULL.
 * Since 0.1. */
TD_API td_status td_gpt_weights_get(const td_gpt_weights *weights, uint32_t index, const char **name,
                                    const td_tensor **value);

/* The tensor called `name` ("h.0.ln_1.weight"; no "transformer." prefix):
 * TD_ERR_INVALID_ARGUMENT naming it when there is none (*value NULL).
 * Since 0.1. */
TD_API td_status td_gpt_weights_find(const td_gpt_weights *weights, const char *name, const td_tensor **value);

/* Writes llm.c's version 3 checkpoint (float32, padded vocabulary: what
 * llm.c's train_gpt2.c reads) of a GPT-2 of `config` to `path`, from the
 * n tensors values[i] named names[i]: exactly the 4 + 12 L tensors above,
 * in any order, f32, each of its shape for config -- a missing, unknown,
 * repeated or misshapen one is TD_ERR_INVALID_ARGUMENT naming it. The
 * header gets config's sizes (each 1 .. 2^31-1, heads dividing width,
 * padded_vocab 0 or >= vocab: 0 takes llm.c's multiple of 128); matrices
 * are written [out, in], wte's rows V .. Vp-1 as zeros. The file is
 * replaced atomically, as td_checkpoint_save replaces one (a temporary
 * file beside it, fsync, rename; only a regular file or nothing at
 * `path`); TD_ERR_IO naming the path when writing fails, leaving nothing
 * behind. Needs no Jansson.
 * Since 0.1. */
TD_API td_status td_gpt_weights_write_llmc(td_context *ctx, const char *path, const td_gpt_config *config, uint32_t n,
                                           const char *const *names, const td_tensor *const *values);

#ifdef __cplusplus
}
#endif
#endif
