/* Lowering: per-device shapes, memory slots, and the kernel calls of every
 * node. Nodes are laid out in one arena buffer (64-byte aligned slots),
 * parameters in their own buffer so the trainer can all-reduce gradients laid
 * out the same way. There is no liveness-based reuse yet: every node keeps
 * its slot, which is also what lets outputs be read after a run. */
#include <string.h>

#include "td_plan.h"

#define ALIGN_ELEMS 16

static uint64_t align_up(uint64_t v)
{
    return (v + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
}

static int is_collective(td_op op)
{
    return op == TD_OP_PSUM || op == TD_OP_PMEAN || op == TD_OP_ALL_GATHER || op == TD_OP_BROADCAST;
}

/* Ops whose kernel writes the node's own slot (so it may be placed anywhere). */
static int writes_own_slot(td_op op)
{
    return op != TD_OP_INPUT && op != TD_OP_PARAM && op != TD_OP_RESHAPE && !is_collective(op);
}

void td_plan_free(td_context *ctx, td_plan *plan)
{
    td_free(ctx, plan->shapes);
    td_free(ctx, plan->slots);
    td_free(ctx, plan->needed);
    td_free(ctx, plan->steps);
    td_free(ctx, plan->grad_copy_src);
    td_free(ctx, plan->grad_copy_dst);
    memset(plan, 0, sizeof *plan);
}

/* Counts one more kernel call, opening a new segment when the last step was
 * a collective (or there was none). */
static void count_call(td_plan *plan, td_step **cur, uint32_t *calls)
{
    if (!*cur) {
        *cur = &plan->steps[plan->n_steps++];
        (*cur)->kind = TD_STEP_SEGMENT;
        (*cur)->first_call = *calls;
    }
    (*cur)->n_calls++;
    (*calls)++;
}

td_status td_plan_build(const td_graph *g, uint32_t devices, uint32_t n_outputs, const td_node *outputs,
                        uint32_t n_grads, const td_node *param_nodes, const td_node *grad_nodes, td_plan *plan)
{
    td_context *ctx = g->ctx;
    memset(plan, 0, sizeof *plan);
    uint32_t n = g->count;
    plan->n_nodes = n;
    plan->shapes = td_alloc_zeroed(ctx, sizeof *plan->shapes * n);
    plan->slots = td_alloc_zeroed(ctx, sizeof *plan->slots * n);
    plan->needed = td_alloc_zeroed(ctx, n);
    plan->steps = td_alloc_zeroed(ctx, sizeof *plan->steps * (2 * (size_t)n + 2));
    plan->grad_copy_src = td_alloc_zeroed(ctx, sizeof *plan->grad_copy_src * (n_grads + 1));
    plan->grad_copy_dst = td_alloc_zeroed(ctx, sizeof *plan->grad_copy_dst * (n_grads + 1));
    if (!plan->shapes || !plan->slots || !plan->needed || !plan->steps || !plan->grad_copy_src ||
        !plan->grad_copy_dst) {
        td_plan_free(ctx, plan);
        return TD_OOM(ctx, "a plan", sizeof *plan->slots * n);
    }
    td_status s = TD_OK;
    for (uint32_t id = 0; id < n && s == TD_OK; id++)
        s = td_graph_infer(g, id, plan->shapes, devices);
    for (uint32_t id = 0; id < n && s == TD_OK; id++)
        if (g->nodes[id].op == TD_OP_BROADCAST && g->nodes[id].root >= devices)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "broadcast node %u: root %u is not a device of a %u-device mesh",
                             id, g->nodes[id].root, devices);
    if (s != TD_OK) {
        td_plan_free(ctx, plan);
        return s;
    }

    for (uint32_t i = 0; i < n_outputs; i++)
        plan->needed[outputs[i]] = 1;
    for (uint32_t i = 0; i < n_grads; i++)
        plan->needed[grad_nodes[i]] = 1;
    for (int64_t id = (int64_t)n - 1; id >= 0; id--)
        if (plan->needed[id])
            for (uint32_t k = 0; k < g->nodes[id].n_in; k++)
                plan->needed[g->nodes[id].in[k]] = 1;

    /* Parameters: every parameter of the graph, in node order. */
    for (uint32_t id = 0; id < n; id++) {
        plan->slots[id].buffer = -1;
        if (g->nodes[id].op == TD_OP_PARAM) {
            plan->slots[id].buffer = TD_BUF_PARAMS;
            plan->slots[id].offset = plan->size[TD_BUF_PARAMS];
            plan->size[TD_BUF_PARAMS] = align_up(plan->size[TD_BUF_PARAMS] + (uint64_t)td_shape_count(&plan->shapes[id]));
        }
    }
    if (n_grads)
        plan->size[TD_BUF_GRADS] = plan->size[TD_BUF_PARAMS];
    uint8_t *placed = plan->needed; /* bit 1: placed in the gradient bucket */
    for (uint32_t i = 0; i < n_grads; i++) {
        td_node gn = grad_nodes[i];
        if (writes_own_slot(g->nodes[gn].op) && !(placed[gn] & 2)) {
            plan->slots[gn].buffer = TD_BUF_GRADS;
            plan->slots[gn].offset = plan->slots[param_nodes[i]].offset;
            placed[gn] |= 2;
        }
    }
    for (uint32_t id = 0; id < n; id++) {
        td_slot *sl = &plan->slots[id];
        if (!plan->needed[id] || sl->buffer >= 0)
            continue;
        if (g->nodes[id].op == TD_OP_RESHAPE) {
            *sl = plan->slots[g->nodes[id].in[0]];
            continue;
        }
        sl->buffer = TD_BUF_ARENA;
        sl->offset = plan->size[TD_BUF_ARENA];
        plan->size[TD_BUF_ARENA] = align_up(sl->offset + (uint64_t)td_shape_count(&plan->shapes[id]));
        if (g->nodes[id].op == TD_OP_XENT) {
            const td_shape *logits = &plan->shapes[g->nodes[id].in[0]];
            sl->aux = plan->size[TD_BUF_ARENA];
            plan->size[TD_BUF_ARENA] = align_up(sl->aux + (uint64_t)td_shape_count(logits));
        }
    }

    /* Steps: segments of kernel calls, cut at every collective. A gradient
     * that could not be placed is copied into the bucket at the end. */
    td_step *cur = NULL;
    uint32_t calls = 0;
    for (uint32_t id = 0; id < n; id++) {
        if (!plan->needed[id] || g->nodes[id].op == TD_OP_INPUT || g->nodes[id].op == TD_OP_PARAM ||
            g->nodes[id].op == TD_OP_RESHAPE)
            continue;
        if (is_collective(g->nodes[id].op)) {
            td_step *st = &plan->steps[plan->n_steps++];
            st->kind = g->nodes[id].op == TD_OP_ALL_GATHER  ? TD_STEP_ALL_GATHER
                       : g->nodes[id].op == TD_OP_BROADCAST ? TD_STEP_BROADCAST
                                                            : TD_STEP_ALLREDUCE;
            st->node = id;
            st->mean = g->nodes[id].op == TD_OP_PMEAN;
            cur = NULL;
            continue;
        }
        count_call(plan, &cur, &calls);
    }
    for (uint32_t i = 0; i < n_grads; i++) {
        if (plan->slots[grad_nodes[i]].buffer == TD_BUF_GRADS &&
            plan->slots[grad_nodes[i]].offset == plan->slots[param_nodes[i]].offset)
            continue;
        plan->grad_copy_src[plan->n_grad_copies] = grad_nodes[i];
        plan->grad_copy_dst[plan->n_grad_copies++] = plan->slots[param_nodes[i]].offset;
        count_call(plan, &cur, &calls);
    }
    plan->n_calls = calls;
    return TD_OK;
}

/* ---- emitting kernel calls ---- */

typedef struct emit_ctx {
    const td_graph *g;
    const td_plan *plan;
    td_buffer *const *buffers;
} emit_ctx;

static td_arg arg_of(const emit_ctx *e, td_node id)
{
    const td_slot *sl = &e->plan->slots[id];
    td_arg a = {sl->buffer >= 0 ? e->buffers[sl->buffer] : NULL, sl->offset};
    return a;
}

/* Dense row-major strides of a shape. */
static void dense_strides(const td_shape *s, int64_t *strides)
{
    int64_t st = 1;
    for (int i = (int)s->rank - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->dims[i];
    }
}

/* Pads a rank-r view to the kernels' rank 4 (leading 1s, stride 0). */
static void pad4(uint32_t rank, const int64_t *dims, const int64_t *strides, int64_t *d4, int64_t *s4)
{
    uint32_t lead = TD_KERNEL_RANK - rank;
    for (uint32_t i = 0; i < TD_KERNEL_RANK; i++) {
        d4[i] = i < lead ? 1 : dims[i - lead];
        s4[i] = i < lead ? 0 : strides[i - lead];
    }
}

/* Strides to read `in` broadcast to `out` (right-aligned). */
static void broadcast_strides(const td_shape *in, const td_shape *out, int64_t *strides)
{
    int64_t dense[TD_MAX_RANK];
    dense_strides(in, dense);
    uint32_t lead = out->rank - in->rank;
    for (uint32_t i = 0; i < out->rank; i++) {
        if (i < lead)
            strides[i] = 0;
        else
            strides[i] = in->dims[i - lead] == 1 && out->dims[i] != 1 ? 0 : dense[i - lead];
    }
}

static void emit_elementwise(const emit_ctx *e, td_kernel_call *c, td_ew_op op, float alpha, td_node out, td_node a,
                             int has_b, td_node b)
{
    const td_shape *so = &e->plan->shapes[out];
    int64_t sa[TD_MAX_RANK], sb[TD_MAX_RANK] = {0}, dummy[TD_KERNEL_RANK];
    broadcast_strides(&e->plan->shapes[a], so, sa);
    if (has_b)
        broadcast_strides(&e->plan->shapes[b], so, sb);
    c->kernel = TD_KERNEL_ELEMENTWISE;
    c->out = arg_of(e, out);
    c->a = arg_of(e, a);
    if (has_b)
        c->b = arg_of(e, b);
    c->p.ew.op = op;
    c->p.ew.alpha = alpha;
    pad4(so->rank, so->dims, sa, c->p.ew.dims, c->p.ew.a_strides);
    pad4(so->rank, so->dims, sb, dummy, c->p.ew.b_strides);
}

/* REDUCE of `in` (dims/strides) keeping the axes not in `reduced`. */
static void emit_reduce(td_kernel_call *c, uint32_t rank, const int64_t *dims, const int64_t *strides,
                        uint32_t reduced, float alpha, int mean)
{
    int64_t od[TD_MAX_RANK], os[TD_MAX_RANK], rd[TD_MAX_RANK], rs[TD_MAX_RANK];
    uint32_t no = 0, nr = 0;
    int64_t count = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (reduced & (1u << i)) {
            rd[nr] = dims[i];
            rs[nr++] = strides[i];
            count *= dims[i];
        } else {
            od[no] = dims[i];
            os[no++] = strides[i];
        }
    }
    c->kernel = TD_KERNEL_REDUCE;
    pad4(no, od, os, c->p.reduce.out_dims, c->p.reduce.out_strides);
    pad4(nr, rd, rs, c->p.reduce.red_dims, c->p.reduce.red_strides);
    c->p.reduce.alpha = mean ? (count ? alpha / (float)count : alpha) : alpha;
}

static void emit_node(const emit_ctx *e, td_node id, uint32_t position, td_kernel_call *c)
{
    const td_node_def *nd = &e->g->nodes[id];
    const td_shape *so = &e->plan->shapes[id];
    memset(c, 0, sizeof *c);
    switch (nd->op) {
    case TD_OP_CONSTANT:
    case TD_OP_AXIS_INDEX:
        c->kernel = TD_KERNEL_FILL;
        c->out = arg_of(e, id);
        c->n = td_shape_count(so);
        c->alpha = nd->op == TD_OP_CONSTANT ? nd->alpha : (float)position;
        break;
    case TD_OP_MATMUL: {
        const td_shape *a = &e->plan->shapes[nd->in[0]], *b = &e->plan->shapes[nd->in[1]];
        td_gemm_params *p = &c->p.gemm;
        c->kernel = TD_KERNEL_GEMM;
        c->out = arg_of(e, id);
        c->a = arg_of(e, nd->in[0]);
        c->b = arg_of(e, nd->in[1]);
        p->alpha = 1.0f;
        p->beta = 0.0f;
        p->trans_a = nd->trans_a;
        p->trans_b = nd->trans_b;
        if (!nd->trans_a) {
            p->k = a->dims[a->rank - 1];
            p->m = p->k ? td_shape_count(a) / p->k : td_shape_count(so) / (so->dims[so->rank - 1] ? so->dims[so->rank - 1] : 1);
            p->n = so->dims[so->rank - 1];
            p->lda = p->k;
            p->ldb = nd->trans_b ? p->k : p->n;
        } else {
            p->m = a->dims[a->rank - 1];
            p->n = b->dims[b->rank - 1];
            p->k = p->m ? td_shape_count(a) / p->m : 0;
            p->lda = p->m;
            p->ldb = p->n;
        }
        p->ldc = p->n;
        if (p->lda == 0) p->lda = 1;
        if (p->ldb == 0) p->ldb = 1;
        if (p->ldc == 0) p->ldc = 1;
        break;
    }
    case TD_OP_ADD: emit_elementwise(e, c, TD_EW_ADD, 1.0f, id, nd->in[0], 1, nd->in[1]); break;
    case TD_OP_SUB: emit_elementwise(e, c, TD_EW_SUB, 1.0f, id, nd->in[0], 1, nd->in[1]); break;
    case TD_OP_MUL: emit_elementwise(e, c, TD_EW_MUL, 1.0f, id, nd->in[0], 1, nd->in[1]); break;
    case TD_OP_SCALE: emit_elementwise(e, c, TD_EW_SCALE, nd->alpha, id, nd->in[0], 0, 0); break;
    case TD_OP_RELU: emit_elementwise(e, c, TD_EW_RELU, 0.0f, id, nd->in[0], 0, 0); break;
    case TD_OP_RELU_GRAD: emit_elementwise(e, c, TD_EW_RELU_GRAD, 0.0f, id, nd->in[0], 1, nd->in[1]); break;
    case TD_OP_SUM: {
        const td_shape *a = &e->plan->shapes[nd->in[0]];
        int64_t st[TD_MAX_RANK];
        dense_strides(a, st);
        emit_reduce(c, a->rank, a->dims, st, nd->axes_mask, 1.0f, nd->mean);
        c->out = arg_of(e, id);
        c->a = arg_of(e, nd->in[0]);
        break;
    }
    case TD_OP_SUM_TO: {
        /* g (shape G) summed down to like's shape L: reduce the axes that L
         * broadcasts (missing leading axes, or 1 where G is larger). */
        const td_shape *gs = &e->plan->shapes[nd->in[0]], *ls = so;
        int64_t st[TD_MAX_RANK];
        dense_strides(gs, st);
        uint32_t lead = gs->rank - ls->rank, mask = 0;
        for (uint32_t i = 0; i < gs->rank; i++)
            if (i < lead || (ls->dims[i - lead] == 1 && gs->dims[i] != 1))
                mask |= 1u << i;
        emit_reduce(c, gs->rank, gs->dims, st, mask, 1.0f, 0);
        c->out = arg_of(e, id);
        c->a = arg_of(e, nd->in[0]);
        break;
    }
    case TD_OP_BROADCAST_TO: {
        /* g holds like's non-reduced axes densely; stretch over the reduced. */
        const td_shape *ls = so;
        int64_t st[TD_MAX_RANK], s = 1, count = 1;
        for (int i = (int)ls->rank - 1; i >= 0; i--) {
            if (nd->axes_mask & (1u << i)) {
                st[i] = 0;
                count *= ls->dims[i];
            } else {
                st[i] = s;
                s *= ls->dims[i];
            }
        }
        c->kernel = TD_KERNEL_ELEMENTWISE;
        c->out = arg_of(e, id);
        c->a = arg_of(e, nd->in[0]);
        c->p.ew.op = TD_EW_SCALE;
        c->p.ew.alpha = nd->mean ? (count ? 1.0f / (float)count : 1.0f) : 1.0f;
        int64_t zero[TD_KERNEL_RANK] = {0}, dummy[TD_KERNEL_RANK];
        pad4(ls->rank, ls->dims, st, c->p.ew.dims, c->p.ew.a_strides);
        pad4(ls->rank, ls->dims, zero, dummy, c->p.ew.b_strides);
        break;
    }
    case TD_OP_XENT: {
        const td_shape *l = &e->plan->shapes[nd->in[0]];
        c->kernel = TD_KERNEL_XENT_FORWARD;
        c->out = arg_of(e, id);
        c->out2 = c->out;
        c->out2.offset = e->plan->slots[id].aux;
        c->a = arg_of(e, nd->in[0]);
        c->b = arg_of(e, nd->in[1]);
        c->p.xent.rows = l->dims[0];
        c->p.xent.cols = l->dims[1];
        break;
    }
    case TD_OP_XENT_GRAD: {
        td_node x = nd->in[0];
        const td_shape *l = &e->plan->shapes[e->g->nodes[x].in[0]];
        c->kernel = TD_KERNEL_XENT_BACKWARD;
        c->out = arg_of(e, id);
        c->a = arg_of(e, x);
        c->a.offset = e->plan->slots[x].aux;
        c->b = arg_of(e, nd->in[1]);
        c->c = arg_of(e, nd->in[2]);
        c->p.xent.rows = l->dims[0];
        c->p.xent.cols = l->dims[1];
        break;
    }
    default: break; /* inputs, params, reshapes, collectives emit no call */
    }
}

td_status td_plan_emit(const td_graph *g, const td_plan *plan, td_buffer *const buffers[TD_BUF_COUNT],
                       uint32_t position, td_kernel_call *calls)
{
    emit_ctx e = {g, plan, buffers};
    uint32_t k = 0;
    for (uint32_t id = 0; id < plan->n_nodes; id++) {
        td_op op = g->nodes[id].op;
        if (!plan->needed[id] || op == TD_OP_INPUT || op == TD_OP_PARAM || op == TD_OP_RESHAPE || is_collective(op))
            continue;
        emit_node(&e, id, position, &calls[k++]);
    }
    for (uint32_t i = 0; i < plan->n_grad_copies; i++) {
        td_kernel_call *c = &calls[k++];
        memset(c, 0, sizeof *c);
        c->kernel = TD_KERNEL_COPY;
        c->n = td_shape_count(&plan->shapes[plan->grad_copy_src[i]]);
        c->a = arg_of(&e, plan->grad_copy_src[i]);
        c->out.buffer = buffers[TD_BUF_GRADS];
        c->out.offset = plan->grad_copy_dst[i];
    }
    return TD_OK;
}
