/* tandem — computation graphs.
 *
 * A graph is built once and compiled many times: nodes are created by the
 * td_graph_* builders below and identified by td_node handles. Shapes are
 * *global* (the whole batch); when the graph is compiled for a mesh of N
 * devices, every input declared TD_SHARDED is split along axis 0 and each
 * device runs the graph on its slice, exactly as a function under JAX's pmap.
 * Broadcasting follows NumPy: shapes are aligned on the right and a dimension
 * of 1 stretches.
 *
 * Collectives (psum, pmean, all_gather, broadcast, axis_index) act over the
 * device axis of the mesh the graph is compiled for. */
#ifndef TANDEM_GRAPH_H
#define TANDEM_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/init.h"
#include "tandem/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef struct td_graph td_graph;
typedef uint32_t td_node;

/* "No node", where an optional operand is left out. */
#define TD_NO_NODE ((td_node)UINT32_MAX)

/* Since 0.1. */
typedef enum td_placement {
    TD_REPLICATED = 0, /* every device gets the whole value */
    TD_SHARDED = 1,    /* split along axis 0, device i gets slice i */
} td_placement;

/* An empty graph, owned by ctx.
 * Since 0.1. */
TD_API td_status td_graph_create(td_context *ctx, td_graph **out);

/* Frees the graph. Programs, trainers and evaluators compiled from it keep
 * what they need, so it may go before them. NULL is ignored.
 * Since 0.1. */
TD_API void td_graph_destroy(td_graph *graph);

/* An input fed at every run (a batch, a label vector). `dims` are global.
 * Inputs and parameters share one namespace: a name must be 1 to 63 bytes
 * and unique among them (checkpoints key on it), else
 * TD_ERR_INVALID_ARGUMENT. A NULL name becomes "input_<node>".
 * Since 0.1. */
TD_API td_status td_graph_input(td_graph *g, const char *name, td_dtype dtype, uint32_t rank, const int64_t *dims,
                                td_placement placement, td_node *out);

/* A parameter: f32 state that lives on every device between runs, always
 * replicated, starting at zero. Values are set and read through the program
 * or trainer. Named as inputs are; a NULL name becomes "param_<node>".
 * Since 0.1. */
TD_API td_status td_graph_param(td_graph *g, const char *name, uint32_t rank, const int64_t *dims, td_node *out);

/* A parameter whose first values are drawn by `init` (see tandem/init.h)
 * from its seed and the parameter's name: every program compiled from the
 * graph, on any mesh, starts from the same values, and a trainer's starting
 * point is the same. td_program_set_param / td_trainer_set_param still
 * override them. A bad initializer (negative stddev, a > b, NaN, scale <= 0,
 * an unknown kind or mode) is TD_ERR_INVALID_ARGUMENT naming the field.
 * Since 0.1. */
TD_API td_status td_graph_param_init(td_graph *g, const char *name, uint32_t rank, const int64_t *dims,
                                     const td_initializer *init, td_node *out);

/* Non-trained state (flax's mutable collections, e.g. batch_stats): a
 * parameter the optimizer never touches and td_graph_params does not list.
 * A trainer changes it only through td_graph_state_update; programs read
 * and write it like any parameter (td_program_set_param / read_param), and
 * checkpoints hold it. init NULL means zeros. Named as parameters are.
 * Since 0.1. */
TD_API td_status td_graph_state(td_graph *g, const char *name, uint32_t rank, const int64_t *dims,
                                const td_initializer *init, td_node *out);

/* After every optimizer step, a trainer sets `state` (a td_graph_state) to
 * the mean over the mesh -- and over the step's accumulated micro-batches --
 * of `value`, an f32 node of the same shape computed by the training
 * program. One update per state; evaluation programs ignore updates. The
 * replicas stay identical: the mean goes through the same ring and owners
 * as the gradients.
 * Since 0.1. */
TD_API td_status td_graph_state_update(td_graph *g, td_node state, td_node value);

/* `training` in a training program (a trainer's step), `evaluation` in
 * every other program (td_pmap_compile, evaluators); both f32 of one
 * shape. Only the chosen side is computed, and the gradient flows to
 * `training`.
 * Since 0.1. */
TD_API td_status td_graph_by_mode(td_graph *g, td_node training, td_node evaluation, td_node *out);

/* Dropout (flax.linen.Dropout): in a training program, each element of x is
 * kept with probability 1 - rate and scaled by 1 / (1 - rate), else zeroed;
 * in any other program, out is x. Axis 0 is the batch: the mask of an
 * element is a pure function of (seed, this node, the trainer's step, the
 * example's global index -- device position x per-device rows + row --, the
 * element's index within the example), drawn by Philox4x32-10 on the
 * device, so an example gets the same mask on any mesh and any backend and
 * N devices train exactly as one. rate in [0, 1); 0 returns x itself.
 * x has rank >= 1.
 * Since 0.1. */
TD_API td_status td_graph_dropout(td_graph *g, td_node x, float rate, uint64_t seed, td_node *out);

/* Batch normalization (flax.linen.BatchNorm) over every axis but the last
 * (features). In a training program: the batch's mean and (biased)
 * variance normalise x, and `mean` / `var` -- td_graph_state nodes of shape
 * [features] -- get the updates
 *   mean <- momentum * mean + (1 - momentum) * batch mean   (same for var)
 * averaged over the mesh by the trainer. In any other program the running
 * `mean` and `var` normalise x. y = (x - m) * rsqrt(v + epsilon) * scale +
 * bias; scale and bias are [features] or TD_NO_NODE.
 * Since 0.1. */
typedef struct td_batch_norm_options {
    size_t struct_size; /* sizeof(td_batch_norm_options): growth-safe, see tandem/export.h */
    float momentum; /* [0, 1); flax's default 0.99 */
    float epsilon;  /* (0, 1]; flax's default 1e-5 */
    /* false: each device normalises by its own shard's statistics (what
     * pmap gives without an axis name); true: synchronized batch norm, the
     * statistics of the whole global batch (two pmean per layer), so N
     * devices compute exactly what one device does on the whole batch. */
    bool sync;
} td_batch_norm_options;

/* momentum 0.99, epsilon 1e-5, sync false.
 * Since 0.1. */
TD_API td_status td_batch_norm_options_init(td_batch_norm_options *o);

/* Since 0.1. */
TD_API td_status td_graph_batch_norm(td_graph *g, td_node x, td_node scale, td_node bias, td_node mean, td_node var,
                                     const td_batch_norm_options *options, td_node *out);

/* The input, parameter or state called `name` (layers name theirs
 * "<layer>/<param>"); TD_ERR_INVALID_ARGUMENT naming it when there is none.
 * Since 0.1. */
TD_API td_status td_graph_find(const td_graph *g, const char *name, td_node *out);

/* The graph's parameters in creation order: *count receives how many there
 * are and nodes[0..min(count, capacity)-1] the nodes. nodes may be NULL with
 * capacity 0 to ask for the count; a capacity below the count is
 * TD_ERR_INVALID_ARGUMENT (with *count set, so the caller can retry).
 * Since 0.1. */
TD_API td_status td_graph_params(const td_graph *g, uint32_t capacity, td_node *nodes, uint32_t *count);

/* A scalar f32 constant: any value, inf and NaN included, since it is data
 * as an input's values are (a -inf to mask with, say). The float arguments
 * that parametrize an op (td_graph_scale's factor, layer_norm's epsilon)
 * must be finite.
 * Since 0.1. */
TD_API td_status td_graph_constant(td_graph *g, float value, td_node *out);

/* a [.., M, K] x b [K, N] -> [.., M, N]. a may have leading batch dims; b is 2-D.
 * Since 0.1. */
TD_API td_status td_graph_matmul(td_graph *g, td_node a, td_node b, td_node *out);
/* a [.., M, K] x b^T with b [N, K] -> [.., M, N]: hidden states times an
 * embedding table, as a tied language-model head, without a transposed
 * copy of the table.
 * Since 0.1. */
TD_API td_status td_graph_matmul_transposed(td_graph *g, td_node a, td_node b, td_node *out);
/* One product per batch entry: a [..., M, K] x b [..., K, N] -> [..., M, N],
 * both of the same rank >= 2 with equal leading dims (attention's Q K^T and
 * A V, batch = examples x heads). transpose_a / transpose_b swap the last
 * two axes of a / b first (Q K^T: b = K [..., T, d], transpose_b).
 * Since 0.1. */
TD_API td_status td_graph_batch_matmul(td_graph *g, td_node a, td_node b, bool transpose_a, bool transpose_b,
                                       td_node *out);

/* Elementwise with broadcasting.
 * Since 0.1. */
TD_API td_status td_graph_add(td_graph *g, td_node a, td_node b, td_node *out);
TD_API td_status td_graph_sub(td_graph *g, td_node a, td_node b, td_node *out);
TD_API td_status td_graph_mul(td_graph *g, td_node a, td_node b, td_node *out);
TD_API td_status td_graph_scale(td_graph *g, td_node a, float factor, td_node *out);
TD_API td_status td_graph_relu(td_graph *g, td_node a, td_node *out);
/* a / b (IEEE division), and the elementwise maximum / minimum: a NaN in
 * either operand gives NaN, and on a tie the gradient goes to a.
 * Since 0.1. */
TD_API td_status td_graph_div(td_graph *g, td_node a, td_node b, td_node *out);
TD_API td_status td_graph_maximum(td_graph *g, td_node a, td_node b, td_node *out);
TD_API td_status td_graph_minimum(td_graph *g, td_node a, td_node b, td_node *out);

/* Unary math and activations, elementwise: -a, e^a, ln a, sqrt a, tanh,
 * the logistic sigmoid 1/(1+e^-a), silu a*sigmoid(a), and gelu — exact
 * (0.5 a (1 + erf(a/sqrt 2))) or, with `approximate`, the tanh form
 * 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))), as jax.nn.gelu.
 * Since 0.1. */
TD_API td_status td_graph_neg(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_exp(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_log(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_sqrt(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_tanh(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_sigmoid(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_silu(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_gelu(td_graph *g, td_node a, bool approximate, td_node *out);

/* Over the last axis: softmax, log-softmax (x - max - log sum exp), and
 * argmax — the index of the first maximum, as an f32 value (exact below
 * 2^24), without gradient. equal(a, b) is 1.0 where a == b and 0.0
 * elsewhere (no gradient): mean(equal(argmax(logits), cast(labels))) is the
 * accuracy as a graph node.
 * Since 0.1. */
TD_API td_status td_graph_softmax(td_graph *g, td_node a, td_node *out);
/* Softmax of attention scores [..., T, T] (queries x keys) under a causal
 * mask: query i attends to keys 0..i only; the later entries are exactly 0
 * and get no gradient (GPT's masked attention, without a -inf fill pass).
 * Since 0.1. */
TD_API td_status td_graph_causal_softmax(td_graph *g, td_node scores, td_node *out);
TD_API td_status td_graph_log_softmax(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_argmax(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_equal(td_graph *g, td_node a, td_node b, td_node *out);

/* A u8 or i32 node as f32 values (exact for u8; i32 rounds to nearest).
 * With a u8 input, raw image bytes go to the devices unconverted.
 * Since 0.1. */
TD_API td_status td_graph_cast(td_graph *g, td_node a, td_node *out);

/* Rows of table [V, D] picked by ids (i32, any shape of rank < 4) ->
 * [ids..., D]. An id outside [0, V) gives a row of NaN. The gradient adds
 * the rows' gradients into the table in a fixed order (deterministic).
 * Since 0.1. */
TD_API td_status td_graph_embedding(td_graph *g, td_node table, td_node ids, td_node *out);

/* Layer normalization over the last axis (flax.linen.LayerNorm):
 * (x - mean) / sqrt(var + epsilon) * scale + bias, with the biased
 * variance; scale and bias are [features] nodes or TD_NO_NODE. The
 * normalization is one kernel each way (LAYER_NORM, which keeps each row's
 * mean and 1/std, and its gradient); scale and bias are broadcast ops.
 * Since 0.1. */
TD_API td_status td_graph_layer_norm(td_graph *g, td_node x, td_node scale, td_node bias, float epsilon,
                                     td_node *out);

/* ---- convolution and pooling (NHWC images, as flax) ----
 *
 * Padding: SAME gives ceil(in / stride) outputs per spatial axis, with the
 * padding split as TensorFlow and flax do (the extra one, if odd, at the
 * bottom/right); VALID gives floor((in - effective_window) / stride) + 1
 * and no padding; EXPLICIT takes pad = {top, bottom, left, right}.
 * Since 0.1. */
typedef enum td_padding_kind {
    TD_PADDING_SAME = 0,
    TD_PADDING_VALID = 1,
    TD_PADDING_EXPLICIT = 2,
} td_padding_kind;

/* Since 0.1. */
typedef struct td_conv2d_options {
    size_t struct_size; /* sizeof(td_conv2d_options): growth-safe, see tandem/export.h */
    int64_t stride[2];   /* >= 1 */
    int64_t dilation[2]; /* >= 1 (kernel dilation) */
    td_padding_kind padding;
    int64_t pad[4];      /* EXPLICIT: top, bottom, left, right, >= 0 */
} td_conv2d_options;

/* Stride 1, dilation 1, SAME (flax.linen.Conv's defaults).
 * Since 0.1. */
TD_API td_status td_conv2d_options_init(td_conv2d_options *options);

/* x [N, H, W, C] (*) kernel [KH, KW, C, O] -> [N, OH, OW, O]: a
 * cross-correlation, as flax.linen.Conv (no bias here; the layer adds one).
 * Lowered to im2col + one GEMM. Errors name the shapes: ranks other than 4,
 * a channel mismatch, a kernel larger than the padded input, stride or
 * dilation 0.
 * Since 0.1. */
TD_API td_status td_graph_conv2d(td_graph *g, td_node x, td_node kernel, const td_conv2d_options *options,
                                 td_node *out);

/* Since 0.1. */
typedef struct td_pool2d_options {
    size_t struct_size; /* sizeof(td_pool2d_options): growth-safe, see tandem/export.h */
    int64_t window[2];      /* >= 1 */
    int64_t stride[2];      /* >= 1 */
    td_padding_kind padding;
    int64_t pad[4];         /* EXPLICIT: top, bottom, left, right */
    bool count_include_pad; /* avg: divide by the whole window (flax's default) */
} td_pool2d_options;

/* A 2x2 window, stride 2, VALID, count_include_pad (seed 000's pooling).
 * Since 0.1. */
TD_API td_status td_pool2d_options_init(td_pool2d_options *options);

/* Max pooling over each channel: padding never wins. Its gradient goes to
 * the first maximum of each window (row-major within the window); a
 * position that is the maximum of several windows receives the sum.
 * Since 0.1. */
TD_API td_status td_graph_max_pool2d(td_graph *g, td_node x, const td_pool2d_options *options, td_node *out);

/* Average pooling; with count_include_pad the divisor is the whole window
 * (padding counts as zeros), else the number of positions inside.
 * Since 0.1. */
TD_API td_status td_graph_avg_pool2d(td_graph *g, td_node x, const td_pool2d_options *options, td_node *out);

/* Axes permuted: out.dims[i] = a.dims[perm[i]]; rank must be a's rank and
 * perm a permutation of 0..rank-1.
 * Since 0.1. */
TD_API td_status td_graph_transpose(td_graph *g, td_node a, uint32_t rank, const int32_t *perm, td_node *out);

/* Sum / mean over the listed axes (negative counts from the end). With
 * keepdims the reduced axes stay as size 1. n_axes == 0 reduces every axis.
 * Since 0.1. */
TD_API td_status td_graph_sum(td_graph *g, td_node a, uint32_t n_axes, const int32_t *axes, bool keepdims,
                              td_node *out);
TD_API td_status td_graph_mean(td_graph *g, td_node a, uint32_t n_axes, const int32_t *axes, bool keepdims,
                               td_node *out);

/* Elements start .. start + size - 1 along axis 0: [size, ...], a copy of
 * one contiguous block (a third of a fused QKV projection, the first T
 * rows of a position table). Axis 0 must not be sharded (a slice of the
 * batch would differ per device): TD_ERR_INVALID_ARGUMENT naming it at
 * compile time.
 * Since 0.1. */
TD_API td_status td_graph_slice(td_graph *g, td_node a, int64_t start, int64_t size, td_node *out);
/* Same elements, new shape; one dim may be -1 (inferred).
 * Since 0.1. */
TD_API td_status td_graph_reshape(td_graph *g, td_node a, uint32_t rank, const int64_t *dims, td_node *out);

/* mean((pred - target)^2) over all elements: a scalar.
 * Since 0.1. */
TD_API td_status td_graph_mse(td_graph *g, td_node pred, td_node target, td_node *out);

/* Mean over rows of softmax cross-entropy: logits [B, C] f32, labels [B] i32
 * in [0, C). A scalar. Labels can only come from an i32 input, possibly
 * reshaped (no op computes i32 values), and td_program_run /
 * td_trainer_step check every bound label against C before anything runs:
 * one outside [0, C) is TD_ERR_INVALID_ARGUMENT naming the input, the
 * index and the value.
 * Since 0.1. */
TD_API td_status td_graph_softmax_cross_entropy(td_graph *g, td_node logits, td_node labels, td_node *out);

/* The same per example (optax.softmax_cross_entropy_with_integer_labels):
 * [B], for td_graph_masked_mean or a weighted loss.
 * Since 0.1. */
TD_API td_status td_graph_softmax_cross_entropy_per_example(td_graph *g, td_node logits, td_node labels,
                                                            td_node *out);

/* The mean of `per_example` over the valid examples of the GLOBAL batch.
 * per_example is f32 [B] or [B, ...] (trailing axes are first reduced by
 * their mean); mask is an f32 [B] input placed like the batch (1 = valid,
 * 0 = padding; other values act as weights). On each device the value is
 * sum(mask * x) / pmean(sum(mask)), i.e. N times the device's masked sum over
 * the global valid count (divided by td_graph_shard_weight, 1 on an even
 * split), so the trainer's average over devices -- and its
 * gradient -- is exactly sum_all(mask * x) / sum_all(mask): N devices with
 * padded shards train as one device on the unpadded batch. The denominator
 * is max(pmean(sum(mask)), 2^-20): a batch with no valid example gives a
 * loss of 0 and a gradient of 0, never NaN, provided the padding rows hold
 * finite values (zeros, a valid label), since 0 * inf is NaN.
 * Since 0.1. */
TD_API td_status td_graph_masked_mean(td_graph *g, td_node per_example, td_node mask, td_node *out);

/* Collectives over the device axis.
 * Since 0.1. */
TD_API td_status td_graph_psum(td_graph *g, td_node a, td_node *out);
TD_API td_status td_graph_pmean(td_graph *g, td_node a, td_node *out);
/* Concatenates every device's value along axis 0, in mesh order:
 * [d0, ...] on each device -> [N*d0, ...] on every device.
 * Since 0.1. */
TD_API td_status td_graph_all_gather(td_graph *g, td_node a, td_node *out);
/* Every device gets device `root`'s value.
 * Since 0.1. */
TD_API td_status td_graph_broadcast(td_graph *g, td_node a, uint32_t root, td_node *out);
/* A scalar f32 holding the device's position in the mesh.
 * Since 0.1. */
TD_API td_status td_graph_axis_index(td_graph *g, td_node *out);
/* A scalar f32 holding the device's share of the global batch times the
 * device count: N * rows_d / B. It is exactly 1 on an even split (every
 * td_pmap_compile program, every evaluator); a trainer with an uneven
 * split (td_trainer_options.balance) gives each device its own. The
 * trainer combines per-device scalars -- the loss, the metrics, and
 * through the gradient all-reduce the gradients -- as the weighted mean
 * sum_d w_d * v_d / N, which is the mean over the global batch when v_d is
 * a mean over the device's rows. A graph that averages over the devices
 * itself weights by it: pmean(w * local_mean) is the global batch's mean
 * on any split (synchronized batch norm does this), and a value that is
 * already global divides by it (td_graph_masked_mean does).
 * Since 0.1. */
TD_API td_status td_graph_shard_weight(td_graph *g, td_node *out);

/* Reverse-mode autodiff: adds to the graph the gradient of the scalar `loss`
 * with respect to each of `params` (nodes made by td_graph_param) and
 * returns them in grads[0..n-1]. The loss value is `loss` itself, so this is
 * value_and_grad. Call once per graph and loss.
 * Since 0.1. */
TD_API td_status td_graph_value_and_grad(td_graph *g, td_node loss, uint32_t n, const td_node *params,
                                         td_node *grads);

/* Activation recomputation (jax.checkpoint, flax's nn.remat): the nodes
 * first..last (a block, built in between: every node made after first up
 * to last) are not kept for the backward pass; td_graph_value_and_grad
 * builds them again, from the values they take from outside the range,
 * right before the block's gradient, so only the block's inputs (and
 * parameters) stay alive between the forward and the backward pass, at the
 * cost of a second forward pass of the block. Dropout in the range draws
 * the same masks again. The same values and gradients, to the bit. Call
 * before td_graph_value_and_grad; ranges may not overlap, and may not hold
 * collectives (TD_ERR_INVALID_ARGUMENT naming the node).
 * Since 0.1. */
TD_API td_status td_graph_recompute(td_graph *g, td_node first, td_node last);

/* The node's global shape.
 * Since 0.1. */
TD_API td_status td_graph_shape(const td_graph *g, td_node node, uint32_t *rank, int64_t *dims);

#ifdef __cplusplus
}
#endif
#endif
