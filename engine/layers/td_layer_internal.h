/* What every layer checks before it adds a node: its name (room for the
 * parameter suffixes), its input, and that its parameter names are free. */
#ifndef TD_LAYER_INTERNAL_H
#define TD_LAYER_INTERNAL_H

#include "tandem/layers.h"
#include "td_graph_internal.h"

/* "<name>/kernel" must fit the 63 bytes a node name holds. */
#define TD_LAYER_MAX_NAME (63 - (sizeof "/kernel" - 1))

/* Checks g and out (not NULL), name and the f32 input x (rank at least min_rank), fills
 * kernel_name and bias_name ("<name>/kernel", "<name>/bias") and refuses
 * names already in the graph (bias only when use_bias). *rank and dims get
 * x's shape. Sets the context error. */
td_status td_layer_check(td_graph *g, const char *fn, const char *name, td_node x, const td_node *out,
                         uint32_t min_rank, bool use_bias,
                         char kernel_name[64], char bias_name[64], uint32_t *rank, int64_t *dims);

#endif
