/* Collectives over the mesh's device axis. They are not kernels: the plan
 * cuts its kernel segments at each one and the ring runs it (pmap.c). */
#include "td_op.h"

static td_status infer_same(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                            uint32_t devices)
{
    (void)g, (void)id, (void)devices;
    *out = *in[0];
    return TD_OK;
}

static td_status infer_all_gather(const td_graph *g, td_node id, const td_shape *const *in, td_shape *out,
                                  uint32_t devices)
{
    if (in[0]->rank == 0)
        return td_error_set(g->ctx, TD_ERR_SHAPE_MISMATCH,
                            "node %u: all_gather needs rank >= 1 (gathers along axis 0)", id);
    *out = *in[0];
    if (__builtin_mul_overflow(out->dims[0], (int64_t)devices, &out->dims[0]))
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "node %u: all_gather's axis 0 overflows", id);
    return TD_OK;
}

/* psum and pmean are linear and self-adjoint over the device axis: the
 * gradient of each device's input is the same collective of the output
 * gradients. */
static td_status grad_reduce(td_grad_ctx *c, td_node id, td_node gy)
{
    td_graph *g = td_grad_graph(c);
    td_node_def d = td_node_make(g->nodes[id].op, 1, gy, 0, 0);
    td_node a = g->nodes[id].in[0], t;
    td_status s = td_graph_append(g, &d, &t);
    return s == TD_OK ? td_grad_add(c, a, t) : s;
}

const td_op_def td_op_psum = {"psum", TD_OPF_COLLECTIVE, infer_same, grad_reduce, NULL, NULL, NULL};
const td_op_def td_op_pmean = {"pmean", TD_OPF_COLLECTIVE, infer_same, grad_reduce, NULL, NULL, NULL};
/* Gradients through all_gather and broadcast are not built in. */
const td_op_def td_op_all_gather = {"all_gather", TD_OPF_COLLECTIVE, infer_all_gather, NULL, NULL, NULL, NULL};
const td_op_def td_op_broadcast = {"broadcast", TD_OPF_COLLECTIVE, infer_same, NULL, NULL, NULL, NULL};

/* ---- builders ---- */

static td_status collective(td_graph *g, td_op op, td_node a, uint32_t root, td_node *out, const char *fn)
{
    td_status s = td_graph_check_out(g, out, fn);
    if (s != TD_OK || (s = td_graph_check_node(g, a, fn, TD_F32)) != TD_OK)
        return s;
    td_node_def d = td_node_make(op, 1, a, 0, 0);
    d.attr.broadcast.root = root; /* checked against the mesh size at compile time */
    return td_graph_append(g, &d, out);
}

td_status td_graph_psum(td_graph *g, td_node a, td_node *out)
{
    return collective(g, TD_OP_PSUM, a, 0, out, "td_graph_psum");
}

td_status td_graph_pmean(td_graph *g, td_node a, td_node *out)
{
    return collective(g, TD_OP_PMEAN, a, 0, out, "td_graph_pmean");
}

td_status td_graph_all_gather(td_graph *g, td_node a, td_node *out)
{
    return collective(g, TD_OP_ALL_GATHER, a, 0, out, "td_graph_all_gather");
}

td_status td_graph_broadcast(td_graph *g, td_node a, uint32_t root, td_node *out)
{
    return collective(g, TD_OP_BROADCAST, a, root, out, "td_graph_broadcast");
}
