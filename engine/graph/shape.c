/* Shape inference. Run once per node at build time on global shapes, and
 * again at compile time with sharded inputs divided over the devices. */
#include <stdio.h>
#include <string.h>

#include "td_graph_internal.h"

int64_t td_shape_count(const td_shape *s)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

static void shape_str(const td_shape *s, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < s->rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)s->dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

static td_status mismatch(const td_graph *g, td_node id, const char *what, const td_shape *a, const td_shape *b)
{
    char sa[96], sb[96];
    shape_str(a, sa, sizeof sa);
    shape_str(b, sb, sizeof sb);
    return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "node %u: %s: shapes %s and %s", id, what, sa, sb);
}

/* NumPy broadcasting of a and b into out; 0 when they do not fit. */
static int broadcast_shapes(const td_shape *a, const td_shape *b, td_shape *out)
{
    uint32_t rank = a->rank > b->rank ? a->rank : b->rank;
    out->rank = rank;
    for (uint32_t i = 0; i < rank; i++) {
        int64_t da = i < rank - a->rank ? 1 : a->dims[i - (rank - a->rank)];
        int64_t db = i < rank - b->rank ? 1 : b->dims[i - (rank - b->rank)];
        if (da != db && da != 1 && db != 1)
            return 0;
        out->dims[i] = da == 1 ? db : da;
    }
    return 1;
}

static td_status infer_matmul(const td_graph *g, td_node id, const td_node_def *n, const td_shape *a,
                              const td_shape *b, td_shape *out)
{
    if (a->rank < 1 || b->rank < 1)
        return mismatch(g, id, "matmul needs operands of rank >= 1", a, b);
    if (!n->trans_a) {
        if (a->rank < 2 || b->rank != 2)
            return mismatch(g, id, "matmul expects a [..., M, K] and b [K, N]", a, b);
        int64_t k = a->dims[a->rank - 1];
        int64_t kb = n->trans_b ? b->dims[1] : b->dims[0];
        int64_t nn = n->trans_b ? b->dims[0] : b->dims[1];
        if (k != kb)
            return mismatch(g, id, "matmul inner dimensions differ", a, b);
        *out = *a;
        out->dims[out->rank - 1] = nn;
        return TD_OK;
    }
    /* trans_a: a and b are flattened to 2-D over their leading dims; the
     * result is a^T b, [M, N]. Used for weight gradients. */
    int64_t ra = td_shape_count(a) / (a->dims[a->rank - 1] ? a->dims[a->rank - 1] : 1);
    int64_t rb = td_shape_count(b) / (b->dims[b->rank - 1] ? b->dims[b->rank - 1] : 1);
    if (ra != rb || n->trans_b)
        return mismatch(g, id, "transposed matmul rows differ", a, b);
    out->rank = 2;
    out->dims[0] = a->dims[a->rank - 1];
    out->dims[1] = b->dims[b->rank - 1];
    return TD_OK;
}

td_status td_graph_infer(const td_graph *g, td_node id, td_shape *shapes, uint32_t devices)
{
    const td_node_def *n = &g->nodes[id];
    td_shape *out = &shapes[id];
    const td_shape *a = n->n_in > 0 ? &shapes[n->in[0]] : NULL;
    const td_shape *b = n->n_in > 1 ? &shapes[n->in[1]] : NULL;
    switch (n->op) {
    case TD_OP_INPUT:
        *out = n->requested;
        if (n->placement == TD_SHARDED) {
            if (out->rank == 0)
                return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "input '%s' is sharded but is a scalar (needs axis 0)",
                                    n->name);
            if (out->dims[0] % devices != 0)
                return td_error_set(g->ctx, TD_ERR_NOT_DIVISIBLE,
                                    "input '%s': batch size %lld (axis 0) does not split evenly over %u devices",
                                    n->name, (long long)out->dims[0], devices);
            out->dims[0] /= devices;
        }
        return TD_OK;
    case TD_OP_PARAM:
    case TD_OP_CONSTANT:
        *out = n->requested;
        return TD_OK;
    case TD_OP_MATMUL:
        return infer_matmul(g, id, n, a, b, out);
    case TD_OP_ADD:
    case TD_OP_SUB:
    case TD_OP_MUL:
        if (!broadcast_shapes(a, b, out))
            return mismatch(g, id, "elementwise operands do not broadcast", a, b);
        return TD_OK;
    case TD_OP_RELU_GRAD:
        if (a->rank != b->rank || td_shape_count(a) != td_shape_count(b))
            return mismatch(g, id, "relu gradient operands differ", a, b);
        *out = *a;
        return TD_OK;
    case TD_OP_SCALE:
    case TD_OP_RELU:
    case TD_OP_PSUM:
    case TD_OP_PMEAN:
    case TD_OP_BROADCAST:
        *out = *a;
        return TD_OK;
    case TD_OP_SUM: {
        uint32_t r = 0;
        for (uint32_t i = 0; i < a->rank; i++) {
            if (n->axes_mask & (1u << i)) {
                if (n->keepdims)
                    out->dims[r++] = 1;
            } else {
                out->dims[r++] = a->dims[i];
            }
        }
        out->rank = r;
        return TD_OK;
    }
    case TD_OP_SUM_TO:
    case TD_OP_BROADCAST_TO:
        *out = *b;
        return TD_OK;
    case TD_OP_RESHAPE: {
        if (n->n_in == 2) { /* reshape like another node (gradients) */
            *out = *b;
            if (td_shape_count(out) != td_shape_count(a))
                return mismatch(g, id, "reshape changes the element count", a, b);
            return TD_OK;
        }
        int64_t known = 1, total = td_shape_count(a);
        int infer_at = -1;
        *out = n->requested;
        for (uint32_t i = 0; i < out->rank; i++) {
            if (out->dims[i] == -1 && infer_at >= 0)
                return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                                    "node %u: reshape may infer one dimension (-1), not several", id);
            if (out->dims[i] == -1)
                infer_at = (int)i;
            else
                known *= out->dims[i];
        }
        if (infer_at >= 0 && known > 0 && total % known == 0)
            out->dims[infer_at] = total / known;
        if (td_shape_count(out) != total || (infer_at >= 0 && known == 0))
            return mismatch(g, id, "reshape changes the element count", a, &n->requested);
        return TD_OK;
    }
    case TD_OP_XENT:
        if (a->rank != 2 || b->rank != 1 || a->dims[0] != b->dims[0])
            return mismatch(g, id, "softmax cross-entropy expects logits [B, C] and labels [B]", a, b);
        out->rank = 1;
        out->dims[0] = a->dims[0];
        return TD_OK;
    case TD_OP_XENT_GRAD:
        *out = shapes[g->nodes[n->in[0]].in[0]];
        return TD_OK;
    case TD_OP_ALL_GATHER:
        if (a->rank == 0)
            return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "node %u: all_gather needs rank >= 1 (gathers along axis 0)",
                                id);
        *out = *a;
        out->dims[0] *= devices;
        return TD_OK;
    case TD_OP_AXIS_INDEX:
        out->rank = 0;
        return TD_OK;
    }
    return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "node %u has unknown op %d", id, (int)n->op);
}
