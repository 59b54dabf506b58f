/* Shapes: counting, formatting, broadcasting, and the inference driver.
 * Each op's own shape rule is in its op table entry; inference runs once
 * per node at build time on global shapes, and again at compile time with
 * sharded inputs divided over the devices. */
#include <stdio.h>
#include <string.h>

#include "td_op.h"

/* No single tensor may need more bytes than this: far beyond any device,
 * and small enough that sums of a few such sizes cannot overflow. */
#define TD_MAX_TENSOR_BYTES ((uint64_t)1 << 60)

int64_t td_shape_count(const td_shape *s)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(n, s->dims[i], &n))
            return INT64_MAX;
    return n;
}

uint64_t td_shape_bytes(const td_shape *s, bool *ok)
{
    uint64_t n = 1;
    *ok = true;
    for (uint32_t i = 0; i < s->rank; i++) {
        if (s->dims[i] < 0 || __builtin_mul_overflow(n, (uint64_t)s->dims[i], &n)) {
            *ok = false;
            return 0;
        }
    }
    if (n > TD_MAX_TENSOR_BYTES / 4) {
        *ok = false;
        return 0;
    }
    return n * 4;
}

void td_shape_format(const td_shape *s, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < s->rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)s->dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

td_status td_shape_mismatch(const td_graph *g, td_node id, const char *what, const td_shape *a, const td_shape *b)
{
    char sa[128], sb[128];
    td_shape_format(a, sa, sizeof sa);
    td_shape_format(b, sb, sizeof sb);
    return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH, "node %u: %s: shapes %s and %s", id, what, sa, sb);
}

bool td_shape_broadcast(const td_shape *a, const td_shape *b, td_shape *out)
{
    uint32_t rank = a->rank > b->rank ? a->rank : b->rank;
    out->rank = rank;
    for (uint32_t i = 0; i < rank; i++) {
        int64_t da = i < rank - a->rank ? 1 : a->dims[i - (rank - a->rank)];
        int64_t db = i < rank - b->rank ? 1 : b->dims[i - (rank - b->rank)];
        if (da != db && da != 1 && db != 1)
            return false;
        out->dims[i] = da == 1 ? db : da;
    }
    return true;
}

bool td_shape_equal(const td_shape *a, const td_shape *b)
{
    return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * a->rank) == 0;
}

td_status td_graph_infer_node(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                              uint32_t devices)
{
    const td_node_def *n = &g->nodes[id];
    if ((unsigned)n->op >= TD_OP_COUNT)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "node %u has unknown op %d", id, (int)n->op);
    memset(out, 0, sizeof *out);
    td_status s = td_op_def_of(n->op)->infer(g, id, in, out, devices);
    if (s != TD_OK)
        return s;
    bool ok;
    td_shape_bytes(out, &ok);
    if (!ok) {
        char buf[128];
        td_shape_format(out, buf, sizeof buf);
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                            "node %u (%s): shape %s has more elements than a tensor may hold (at most 2^58)", id,
                            td_op_def_of(n->op)->name, buf);
    }
    return TD_OK;
}

td_status td_graph_infer(const td_graph *g, td_node id, td_shape *shapes, uint32_t devices)
{
    const td_node_def *n = &g->nodes[id];
    const td_shape *in[3] = {NULL, NULL, NULL};
    for (uint32_t k = 0; k < n->n_in; k++)
        in[k] = &shapes[n->in[k]];
    return td_graph_infer_node(g, id, in, &shapes[id], devices);
}
