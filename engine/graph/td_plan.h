/* A graph compiled for a mesh: where every node lives, and the sequence of
 * kernel segments and collectives every device runs. Shapes are per device
 * (sharded inputs divided), identical on every device of the mesh. */
#ifndef TD_PLAN_H
#define TD_PLAN_H

#include "td_backend.h"
#include "td_graph_internal.h"

/* TD_BUF_STEP holds the uint32 word pairs of TD_OPF_STEP_WORDS nodes,
 * written by the program before every run. */
enum { TD_BUF_ARENA = 0, TD_BUF_PARAMS = 1, TD_BUF_GRADS = 2, TD_BUF_STEP = 3, TD_BUF_COUNT = 4 };

typedef struct td_slot {
    int32_t buffer;  /* TD_BUF_*, or -1 for a node that is never materialised */
    uint64_t offset; /* elements */
    uint64_t extra;  /* offset of the node's extra arena memory (td_op_def.extra) */
    uint64_t words;  /* TD_OPF_STEP_WORDS: offset of its word pair in TD_BUF_STEP */
} td_slot;

typedef enum td_step_kind {
    TD_STEP_SEGMENT,
    TD_STEP_ALLREDUCE,  /* psum / pmean */
    TD_STEP_ALL_GATHER,
    TD_STEP_BROADCAST,
} td_step_kind;

typedef struct td_step {
    td_step_kind kind;
    uint32_t first_call, n_calls; /* SEGMENT: its calls in the plan's call list */
    td_node node;                 /* collectives: the node computed */
    int mean;
} td_step;

typedef struct td_plan {
    uint32_t n_nodes;
    td_shape *shapes;
    td_slot *slots;
    uint8_t *needed;
    uint64_t size[TD_BUF_COUNT]; /* elements per buffer */
    td_step *steps;
    uint32_t n_steps;
    uint32_t n_calls; /* calls per device (same count on every device) */
    /* Gradients that could not be computed in place in the bucket are
     * copied there by the last calls of the plan. */
    uint32_t n_grad_copies;
    td_node *grad_copy_src;
    uint64_t *grad_copy_dst;
    /* True for the trainer's step program, false for td_pmap_compile and
     * evaluation programs: ops whose forward differs between training and
     * inference (dropout, batch norm's statistics) lower by it. Given to
     * td_plan_build, so every op hook may read it. */
    bool training;
    /* Nodes with TD_OPF_STEP_WORDS, in node order (their pairs follow
     * that order in TD_BUF_STEP). */
    uint32_t n_step_nodes;
    td_node *step_nodes;
    /* N x this device's rows / the global batch (td_graph_shard_weight):
     * exactly 1 on an even split. */
    float shard_weight;
} td_plan;

/* How the sharded inputs split on one device: `rows` of a global batch of
 * `total` examples (axis 0 of every sharded input, which must all be
 * `total` long). A NULL split divides each sharded input evenly by the
 * device count, which it must divide. */
typedef struct td_plan_split {
    uint64_t rows, total;
} td_plan_split;

/* Per-device shapes, slots and steps for the given outputs, for one device
 * of a `devices`-device mesh that gets `split` of the batch (NULL: an even
 * share). grad_nodes[i], when given, is placed at param_nodes[i]'s offset
 * in the gradient buffer (the bucket the trainer all-reduces). */
td_status td_plan_build(const td_graph *g, uint32_t devices, const td_plan_split *split, uint32_t n_outputs,
                        const td_node *outputs, uint32_t n_grads, const td_node *param_nodes,
                        const td_node *grad_nodes, bool training, td_plan *plan);
void td_plan_free(td_context *ctx, td_plan *plan);

/* 4-byte elements node `id` occupies on a device (u8 values are packed
 * four to an element). */
uint64_t td_plan_node_elems(const td_graph *g, const td_plan *plan, td_node id);

/* The kernel calls of the whole plan for one device (n_calls of them, in
 * step order), with that device's buffers and mesh position. */
td_status td_plan_emit(const td_graph *g, const td_plan *plan, td_buffer *const buffers[TD_BUF_COUNT],
                       uint32_t position, td_kernel_call *calls);

/* The name of the graph op behind each of the plan's n_calls calls, in
 * td_plan_emit's order (traces name kernels by it). */
void td_plan_call_names(const td_graph *g, const td_plan *plan, const char **names);

#endif
