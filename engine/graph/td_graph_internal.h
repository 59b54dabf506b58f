/* The graph's insides: nodes in creation order (which is a topological
 * order) and their shapes. What each op means — its shape rule, its
 * gradient, its lowering to kernel calls — lives in the op table
 * (td_op.h), one entry per op, defined in the ops_*.c files. */
#ifndef TD_GRAPH_INTERNAL_H
#define TD_GRAPH_INTERNAL_H

#include <stdbool.h>

#include "tandem/graph.h"
#include "tandem/init.h"
#include "td_context_internal.h"

typedef enum td_op {
    TD_OP_INPUT,        /* fed at every run */
    TD_OP_PARAM,        /* f32 state kept on every device */
    TD_OP_CONSTANT,     /* fill */
    TD_OP_AXIS_INDEX,   /* the device's mesh position */
    TD_OP_SHARD_WEIGHT, /* N x the device's rows / the global batch: 1 on an even split */
    TD_OP_ELEMENTWISE,  /* one td_ew_op of kernels/common/td_ew_ops.h, with broadcasting */
    TD_OP_MATMUL,
    TD_OP_SUM,          /* over axes; mean = divide by the count */
    TD_OP_SUM_TO,       /* (g, like): g summed down to like's (broadcast) shape */
    TD_OP_BROADCAST_TO, /* (g, like): g with reduced axes stretched to like's shape */
    TD_OP_RESHAPE,      /* no kernel: aliases its input */
    TD_OP_TRANSPOSE,
    TD_OP_XENT,         /* (logits, labels) -> per-row loss [B], keeps the probabilities */
    TD_OP_XENT_GRAD,    /* (xent node, labels, g [B]) -> [B, C] */
    TD_OP_PSUM,
    TD_OP_PMEAN,
    TD_OP_ALL_GATHER,
    TD_OP_BROADCAST,
    TD_OP_CONV2D,             /* (x NHWC, kernel HWIO): im2col into extra memory, then one GEMM */
    TD_OP_CONV2D_GRAD_KERNEL, /* (conv node, gy): patches^T gy, reading the conv's patches */
    TD_OP_CONV2D_GRAD_INPUT,  /* (gy, kernel, like x): gy kernel^T into extra memory, then col2im */
    TD_OP_POOL,               /* max / avg pooling, NHWC */
    TD_OP_POOL_GRAD,          /* (x, pool node, gy) */
    TD_OP_SOFTMAX,            /* over the last axis; attr.rows_mode 0 softmax, 1 log-softmax */
    TD_OP_ARGMAX,             /* over the last axis, the index as f32 */
    TD_OP_CAST,               /* u8 / i32 -> f32 */
    TD_OP_EMBEDDING,          /* (table [V, D], ids i32 [...]) -> [..., D] */
    TD_OP_EMBEDDING_GRAD,     /* (gy, ids, like table) -> [V, D] */
    TD_OP_DROPOUT,            /* x * keep mask of (seed, step, example) in training; x in evaluation */
    TD_OP_BY_MODE,            /* (training value, evaluation value): the one the program's mode picks */
    TD_OP_BATCH_MATMUL,       /* a [..., M, K] x b [..., K, N], one GEMM per batch entry */
    TD_OP_SLICE,              /* a block of axis 0: one copy */
    TD_OP_SLICE_GRAD,         /* (gy, like a): gy placed in zeros */
    TD_OP_LAYER_NORM,         /* xhat over the last axis, {mean, rstd} kept; attr.value = epsilon */
    TD_OP_LAYER_NORM_GRAD,    /* (gy, the norm node) -> dx */
    TD_OP_COUNT
} td_op;

typedef struct td_shape {
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
} td_shape;

/* Attributes, one member per op family (the op says which). */
typedef union td_node_attr {
    td_shape dims;                         /* INPUT, PARAM: requested shape; RESHAPE: request (may hold -1) */
    float value;                           /* CONSTANT; LAYER_NORM: epsilon */
    struct { int32_t op; float alpha; } ew; /* ELEMENTWISE */
    struct { int32_t trans_a, trans_b; } matmul;
    struct { uint32_t axes_mask; bool keepdims, mean; } reduce; /* SUM, BROADCAST_TO (axes of `like`) */
    struct { int32_t perm[TD_MAX_RANK]; } transpose;
    struct { uint32_t root; } broadcast;
    int32_t rows_mode;                     /* SOFTMAX: td_rows_params.mode */
    struct { int64_t start, size; } slice; /* SLICE, SLICE_GRAD: rows of axis 0 */
    struct {                     /* CONV2D(+grads), POOL(+grad) */
        int64_t window[2];       /* POOL: kh, kw (CONV2D: from the kernel) */
        int64_t stride[2], dilation[2];
        int64_t pad[4];          /* top, bottom, left, right */
        int64_t in_hwc[3];       /* the forward input's h, w, c (gradients' shapes) */
        int64_t out_channels;    /* CONV2D_GRAD_KERNEL: o */
        int32_t mode;            /* POOL: td_pool_mode */
        int32_t count_include_pad;
    } conv;
    struct {                     /* DROPOUT (and its gradient, the same mask) */
        uint32_t key[2];         /* the seed mixed with the forward node's id */
        float keep;              /* 0 < keep < 1 */
    } dropout;
} td_node_attr;

typedef struct td_node_def {
    td_op op;
    td_dtype dtype;
    td_node in[3];
    uint32_t n_in;
    td_shape shape; /* global shape, from inference at build time */
    td_node_attr attr;
    td_placement placement; /* INPUT */
    char name[64];          /* INPUT, PARAM: unique among them, 1 to 63 bytes */
    td_initializer init;    /* PARAM: its first values (zeros unless given) */
    bool is_state;          /* PARAM: non-trained state (td_graph_state), updated by td_graph_state_update */
    /* Nonzero: the node belongs to recompute region number `recompute`
     * (td_graph_recompute): the backward pass computes it again rather
     * than keeping it. Regions are contiguous runs of node ids. */
    uint32_t recompute;
} td_node_def;

/* A state update: after a training step, `state` takes the mean over the
 * mesh of `value` (batch norm's running statistics). */
typedef struct td_state_update {
    td_node state, value;
} td_state_update;

struct td_graph {
    td_owned owned;
    td_context *ctx;
    td_node_def *nodes;
    uint32_t count, capacity;
    bool has_grad;
    uint32_t n_recompute; /* regions marked so far (td_graph_recompute) */
    td_state_update *updates;
    uint32_t n_updates, updates_capacity;
};

/* y * scale + bias, each when it is a node (not TD_NO_NODE): the affine
 * tail of layer and batch normalization. */
td_status td_graph_affine(td_graph *g, td_node y, td_node scale, td_node bias, td_node *out);

/* Infers the shape of node `id` from its inputs' shapes in `shapes`, with
 * sharded inputs divided over `devices` (1 = global shapes). On failure sets
 * the context error and returns the status. */
td_status td_graph_infer(const td_graph *g, td_node id, td_shape *shapes, uint32_t devices);
/* The same for a node whose input shapes are given directly. */
td_status td_graph_infer_node(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                              uint32_t devices);

/* Appends a node (used by the builders and by autodiff): checks its inputs
 * exist, infers its shape (refusing element counts whose byte size does not
 * fit), and returns its id. */
td_status td_graph_append(td_graph *g, const td_node_def *def, td_node *out);

/* A node of op `op` with inputs, zeroed attributes, dtype f32. */
td_node_def td_node_make(td_op op, uint32_t n_in, td_node a, td_node b, td_node c);

/* An ELEMENTWISE node: ew_op over a (and b for arity 2), broadcast. */
td_status td_graph_emit_ew(td_graph *g, int32_t ew_op, float alpha, td_node a, td_node b, td_node *out);

/* Element count; the product saturates at INT64_MAX (callers that size
 * memory check td_shape_bytes instead). */
int64_t td_shape_count(const td_shape *s);

/* Bytes of a shape of 4-byte elements, or 0 with *ok = false when the count
 * or the byte size overflows (or exceeds what one buffer may hold). */
uint64_t td_shape_bytes(const td_shape *s, bool *ok);

/* "[2, 3, 4]" into buf. */
void td_shape_format(const td_shape *s, char *buf, size_t size);

/* NumPy broadcasting of a and b into out; false when they do not fit. */
bool td_shape_broadcast(const td_shape *a, const td_shape *b, td_shape *out);

bool td_shape_equal(const td_shape *a, const td_shape *b);

/* The builders' common checks: g and out not NULL; node n exists and has
 * dtype `want`. Set the context error naming fn. */
td_status td_graph_check_out(td_graph *g, td_node *out, const char *fn);
td_status td_graph_check_node(td_graph *g, td_node n, const char *fn, td_dtype want);
/* rank <= TD_MAX_RANK, dims given, each >= 0 (or -1 when allowed: reshape). */
td_status td_graph_check_dims(td_graph *g, uint32_t rank, const int64_t *dims, const char *fn, int allow_minus_one);
/* batch norm's momentum in [0, 1) and epsilon in (0, 1] (NaN and inf fail),
 * for the op and for the layer, which checks before adding parameters. */
td_status td_batch_norm_check_options(td_graph *g, const char *fn, const td_batch_norm_options *o);

/* The input or parameter called `name`, or UINT32_MAX when there is none. */
td_node td_graph_find_named(const td_graph *g, const char *name);

/* Sets a TD_ERR_SHAPE_MISMATCH naming the node, what was wrong and both shapes. */
td_status td_shape_mismatch(const td_graph *g, td_node id, const char *what, const td_shape *a, const td_shape *b);

#endif
