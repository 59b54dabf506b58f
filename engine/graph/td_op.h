/* The op table: everything the engine knows about an op, in one entry.
 *
 * An op is defined in one place (an ops_*.c file): its name, how its output
 * shape follows from its inputs', how its gradient is built from other
 * nodes, and how it lowers to kernel calls on a device — any number of
 * calls, with extra arena memory after its output when it needs some.
 * shape.c, autodiff.c and lower.c only walk the graph and ask the table.
 * Adding an op is: an enum value (td_graph_internal.h), an entry in
 * op_table.c, and its file — the table entry and its public builder. */
#ifndef TD_OP_H
#define TD_OP_H

#include "td_plan.h"

enum {
    TD_OPF_SOURCE = 1,     /* input or parameter: lives in its own buffer, emits nothing */
    TD_OPF_ALIAS = 2,      /* shares its first input's memory, emits nothing (reshape) */
    TD_OPF_COLLECTIVE = 4, /* a ring step between kernel segments, not a kernel */
    /* Needs only input 0 in a training program and only input 1 in an
     * evaluation program (td_plan.training): the other side is not run.
     * With TD_OPF_ALIAS, the node is that input's memory. */
    TD_OPF_BY_MODE = 8,
    /* Reads two uint32 words the program writes before every run, at
     * slot.words in the step buffer: [0] the step, [1] the global index of
     * the example in row 0 on this device (the rows of the devices
     * before it). */
    TD_OPF_STEP_WORDS = 16,
    /* Each output element is computed from the inputs' elements at its own
     * index alone (elementwise): the output may take over the memory of an
     * input of its own element count whose last reader it is (lower.c). */
    TD_OPF_IN_PLACE = 32,
    /* Reads its first input only through that input's extra memory (a
     * convolution's kernel gradient, the forward's patches): the input's
     * output may be written over before it runs (lower.c). */
    TD_OPF_READS_FIRST_EXTRA = 64,
};

typedef struct td_grad_ctx td_grad_ctx;

typedef struct td_emit_ctx {
    const td_graph *g;
    const td_plan *plan;
    td_buffer *const *buffers;
    uint32_t position; /* the device's place in the mesh */
} td_emit_ctx;

typedef struct td_op_def {
    const char *name;
    uint32_t flags;
    /* out from the inputs' shapes (in[k] is the shape of input k), with
     * sharded inputs divided over `devices`. Sets the context error. */
    td_status (*infer)(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out, uint32_t devices);
    /* Adds to the inputs the gradient contributions of node `id` whose
     * output gradient is `gy`. NULL: the op is not differentiable. */
    td_status (*grad)(td_grad_ctx *c, td_node id, td_node gy);
    /* Kernel calls the node lowers to (NULL: exactly one) and arena
     * elements it needs after its output (NULL: none); the extra memory
     * lives as long as the node's output (slot.extra). */
    uint32_t (*n_calls)(const td_graph *g, const td_plan *plan, td_node id);
    uint64_t (*extra)(const td_graph *g, const td_plan *plan, td_node id);
    /* Writes the node's n_calls calls. */
    void (*emit)(const td_emit_ctx *e, td_node id, td_kernel_call *calls);
} td_op_def;

const td_op_def *td_op_def_of(td_op op);

/* ---- services for gradient rules (autodiff.c) ---- */

td_graph *td_grad_graph(td_grad_ctx *c);
/* Whether `node` leads to a parameter whose gradient is wanted. */
bool td_grad_needs(const td_grad_ctx *c, td_node node);
/* Adds `contribution` to the gradient of `target`, summing it down to the
 * target's shape first when it was broadcast. */
td_status td_grad_add(td_grad_ctx *c, td_node target, td_node contribution);

/* ---- services for lowering (lower.c) ---- */

td_arg td_emit_arg(const td_emit_ctx *e, td_node id);
/* A shape as the row kernels see it: rows x cols, cols its last axis (a
 * scalar is one row of one; an empty last axis, no rows). */
td_rows_params td_rows_of(const td_shape *s, int32_t mode, float epsilon);
/* Dense row-major strides of a shape. */
void td_dense_strides(const td_shape *s, int64_t *strides);
/* A rank-r view padded to the kernels' rank 4 (leading 1s, stride 0). */
void td_pad4(uint32_t rank, const int64_t *dims, const int64_t *strides, int64_t *d4, int64_t *s4);
/* One ELEMENTWISE call computing node `out` from a (and b when the op has
 * arity 2), both broadcast to out's shape. */
void td_emit_elementwise(const td_emit_ctx *e, td_kernel_call *c, int32_t ew_op, float alpha, td_node out, td_node a,
                         td_node b);
/* A REDUCE call over a view (dims, strides) of `rank` axes, keeping the axes
 * not in `reduced`; alpha / count of reduced elements when mean. */
void td_emit_reduce(td_kernel_call *c, uint32_t rank, const int64_t *dims, const int64_t *strides, uint32_t reduced,
                    float alpha, bool mean);

/* The entries, one per ops_*.c file. */
extern const td_op_def td_op_input, td_op_param, td_op_constant, td_op_axis_index, td_op_shard_weight;
extern const td_op_def td_op_elementwise;
extern const td_op_def td_op_matmul, td_op_batch_matmul;
extern const td_op_def td_op_sum, td_op_sum_to, td_op_broadcast_to;
extern const td_op_def td_op_reshape, td_op_transpose, td_op_slice, td_op_slice_grad;
extern const td_op_def td_op_xent, td_op_xent_grad;
extern const td_op_def td_op_psum, td_op_pmean, td_op_all_gather, td_op_broadcast;
extern const td_op_def td_op_conv2d, td_op_conv2d_grad_kernel, td_op_conv2d_grad_input, td_op_pool,
    td_op_pool_grad;
extern const td_op_def td_op_softmax, td_op_argmax, td_op_cast, td_op_embedding, td_op_embedding_grad;
extern const td_op_def td_op_dropout, td_op_by_mode;
extern const td_op_def td_op_layer_norm, td_op_layer_norm_grad;

#endif
