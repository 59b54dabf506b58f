/* The graph's insides: nodes in creation order (which is a topological
 * order), shapes, and the passes over them (shape inference, autodiff,
 * lowering to kernel calls). */
#ifndef TD_GRAPH_INTERNAL_H
#define TD_GRAPH_INTERNAL_H

#include <stdbool.h>

#include "tandem/graph.h"
#include "tandem/init.h"
#include "td_context_internal.h"

typedef enum td_op {
    TD_OP_INPUT,
    TD_OP_PARAM,
    TD_OP_CONSTANT,    /* fill: shape dims, value alpha */
    TD_OP_MATMUL,      /* attrs trans_a, trans_b */
    TD_OP_ADD,
    TD_OP_SUB,
    TD_OP_MUL,
    TD_OP_SCALE,       /* alpha */
    TD_OP_RELU,
    TD_OP_RELU_GRAD,   /* (x, g) */
    TD_OP_SUM,         /* axes mask, keepdims, mean flag */
    TD_OP_SUM_TO,      /* (g, like): sum g down to like's (broadcast) shape */
    TD_OP_BROADCAST_TO,/* (g, like, alpha): g with reduced axes (mask) stretched to like's shape */
    TD_OP_RESHAPE,     /* requested dims in attr dims (may hold -1) */
    TD_OP_XENT,        /* (logits, labels) -> per-row loss [B] */
    TD_OP_XENT_GRAD,   /* (xent node, labels, g [B]) -> [B, C] */
    TD_OP_PSUM,
    TD_OP_PMEAN,
    TD_OP_ALL_GATHER,
    TD_OP_BROADCAST,   /* root */
    TD_OP_AXIS_INDEX,
} td_op;

typedef struct td_shape {
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
} td_shape;

typedef struct td_node_def {
    td_op op;
    td_dtype dtype;
    td_node in[3];
    uint32_t n_in;
    td_shape shape; /* global shape, from inference at build time */
    /* attributes */
    float alpha;
    uint32_t axes_mask; /* SUM / BROADCAST_TO: reduced axes of the input */
    bool keepdims, mean;
    int32_t trans_a, trans_b;
    uint32_t root;
    td_placement placement;
    td_shape requested; /* RESHAPE request, CONSTANT shape */
    char name[64];      /* INPUT, PARAM: unique among them, 1 to 63 bytes */
    td_initializer init; /* PARAM: its first values (zeros unless given) */
} td_node_def;

struct td_graph {
    td_owned owned;
    td_context *ctx;
    td_node_def *nodes;
    uint32_t count, capacity;
    bool has_grad;
};

/* Infers the shape of node `id` from its inputs' shapes in `shapes`, with
 * sharded inputs divided over `devices` (1 = global shapes). On failure sets
 * the context error and returns the status. */
td_status td_graph_infer(const td_graph *g, td_node id, td_shape *shapes, uint32_t devices);

/* Appends a node (used by the builders and by autodiff). */
td_status td_graph_append(td_graph *g, const td_node_def *def, td_node *out);

int64_t td_shape_count(const td_shape *s);

/* The input or parameter called `name`, or UINT32_MAX when there is none. */
td_node td_graph_find_named(const td_graph *g, const char *name);

#endif
