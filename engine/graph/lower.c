/* Lowering: per-device shapes, memory slots, and the kernel calls of every
 * node, asked of each node's op (td_op.h).
 *
 * Memory: parameters live in their own buffer, and gradients go straight
 * into a bucket laid out like it, so the trainer all-reduces one buffer.
 * Everything else lives in one arena buffer, placed by liveness: a node's
 * slot (its output plus the op's extra memory) is taken when the node runs
 * and given back after its last reader ran, so a deep network needs about
 * its widest point in memory, not the sum of all its layers. Inputs are
 * placed before anything else (they are uploaded before the first kernel),
 * and outputs are never given back (they are read after the run). A slot
 * is taken before its node's inputs are given back, so no kernel writes
 * memory it also reads -- except an elementwise node, which takes over the
 * output of a same-sized input it reads last (in_place_donor; the input's
 * extra memory may live on for a reader of that alone): a bias add over
 * the product, a ReLU over its input, ReLU's gradient over the activation,
 * each in lines the previous call has just written, and one tensor less
 * to hold. */
#include <string.h>

#include "td_op.h"

#define ALIGN_ELEMS 16 /* 64 bytes */
#define LIVE_FOREVER UINT32_MAX

static uint64_t align_up(uint64_t v)
{
    return (v + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
}

static uint32_t flags_of(const td_graph *g, td_node id)
{
    return td_op_def_of(g->nodes[id].op)->flags;
}

void td_plan_free(td_context *ctx, td_plan *plan)
{
    td_free(ctx, plan->shapes);
    td_free(ctx, plan->slots);
    td_free(ctx, plan->needed);
    td_free(ctx, plan->step_nodes);
    td_free(ctx, plan->steps);
    td_free(ctx, plan->grad_copy_src);
    td_free(ctx, plan->grad_copy_dst);
    memset(plan, 0, sizeof *plan);
}

/* ---- the arena: first fit over a sorted list of free ranges ---- */

typedef struct arena {
    uint64_t *start, *size; /* free ranges, sorted by start, never adjacent */
    uint32_t n;
    uint64_t top; /* the arena's size so far */
} arena;

static uint64_t arena_take(arena *a, uint64_t size)
{
    if (size == 0)
        return a->top;
    for (uint32_t i = 0; i < a->n; i++) {
        if (a->size[i] < size)
            continue;
        uint64_t at = a->start[i];
        a->start[i] += size;
        a->size[i] -= size;
        if (a->size[i] == 0) {
            memmove(a->start + i, a->start + i + 1, sizeof *a->start * (a->n - i - 1));
            memmove(a->size + i, a->size + i + 1, sizeof *a->size * (a->n - i - 1));
            a->n--;
        }
        return at;
    }
    /* Grow, reusing a free range that ends at the top. */
    uint64_t at = a->top;
    if (a->n && a->start[a->n - 1] + a->size[a->n - 1] == a->top) {
        at = a->start[a->n - 1];
        a->n--;
    }
    a->top = at + size;
    return at;
}

static void arena_give(arena *a, uint64_t start, uint64_t size)
{
    if (size == 0)
        return;
    uint32_t i = 0;
    while (i < a->n && a->start[i] < start)
        i++;
    bool join_prev = i > 0 && a->start[i - 1] + a->size[i - 1] == start;
    bool join_next = i < a->n && start + size == a->start[i];
    if (join_prev && join_next) {
        a->size[i - 1] += size + a->size[i];
        memmove(a->start + i, a->start + i + 1, sizeof *a->start * (a->n - i - 1));
        memmove(a->size + i, a->size + i + 1, sizeof *a->size * (a->n - i - 1));
        a->n--;
    } else if (join_prev) {
        a->size[i - 1] += size;
    } else if (join_next) {
        a->start[i] = start;
        a->size[i] += size;
    } else {
        memmove(a->start + i + 1, a->start + i, sizeof *a->start * (a->n - i));
        memmove(a->size + i + 1, a->size + i, sizeof *a->size * (a->n - i));
        a->start[i] = start;
        a->size[i] = size;
        a->n++;
    }
}

/* The node whose memory `id` uses (through reshapes, and through a
 * by-mode choice to the side the plan's mode runs). */
static td_node memory_root(const td_graph *g, const td_plan *plan, td_node id)
{
    while (flags_of(g, id) & TD_OPF_ALIAS)
        id = g->nodes[id].in[(flags_of(g, id) & TD_OPF_BY_MODE) && !plan->training ? 1 : 0];
    return id;
}

uint64_t td_plan_node_elems(const td_graph *g, const td_plan *plan, td_node id)
{
    uint64_t count = (uint64_t)td_shape_count(&plan->shapes[id]);
    return g->nodes[id].dtype == TD_U8 ? (count + 3) / 4 : count; /* u8: packed 4 per element */
}

static uint64_t slot_elems(const td_graph *g, const td_plan *plan, td_node id)
{
    const td_op_def *op = td_op_def_of(g->nodes[id].op);
    uint64_t own = align_up(td_plan_node_elems(g, plan, id));
    return own + (op->extra ? align_up(op->extra(g, plan, id)) : 0);
}

static uint32_t calls_of(const td_graph *g, const td_plan *plan, td_node id)
{
    const td_op_def *op = td_op_def_of(g->nodes[id].op);
    if (op->flags & (TD_OPF_SOURCE | TD_OPF_ALIAS | TD_OPF_COLLECTIVE))
        return 0;
    return op->n_calls ? op->n_calls(g, plan, id) : 1;
}

/* What place_arena knows of a node's slot. */
enum { SLOT_NONE, SLOT_HELD, SLOT_GONE, SLOT_EXTRA_HELD /* its output's range went to another node */ };

static uint64_t own_elems(const td_graph *g, const td_plan *plan, td_node id)
{
    return align_up(td_plan_node_elems(g, plan, id));
}

/* An input whose output range node `id` may take over, writing its output
 * in place, or `id` itself when there is none: the op allows it
 * (TD_OPF_IN_PLACE) and has no extra memory; the input's memory is an
 * arena slot of a computed node (not an input, whose memory is uploaded
 * before the run) of the output's element count; `id` is the last reader
 * of its output (its extra memory, a convolution's patches, may live on
 * for a reader of that alone: TD_OPF_READS_FIRST_EXTRA). Every input of
 * `id` on that memory (the donor, or a reshape of it) then has the
 * output's element count, so none is broadcast: the kernel call's output
 * aliases it exactly, which the ELEMENTWISE contract allows (td_kernel.h):
 * each element is read before it is written. */
static td_node in_place_donor(const td_graph *g, const td_plan *plan, td_node id, const uint32_t *last_output_use,
                              const uint8_t *placed)
{
    if (!(flags_of(g, id) & TD_OPF_IN_PLACE) || g->nodes[id].dtype != TD_F32 ||
        slot_elems(g, plan, id) != own_elems(g, plan, id))
        return id;
    const uint64_t elems = td_plan_node_elems(g, plan, id);
    for (uint32_t k = 0; k < g->nodes[id].n_in; k++) {
        td_node r = memory_root(g, plan, g->nodes[id].in[k]);
        if (placed[r] != SLOT_HELD || last_output_use[r] != id || g->nodes[r].op == TD_OP_INPUT ||
            g->nodes[r].dtype != TD_F32 || td_plan_node_elems(g, plan, r) != elems)
            continue;
        return r;
    }
    return id;
}

/* Arena slots by liveness (see the top of the file). */
static td_status place_arena(const td_graph *g, td_plan *plan, const uint8_t *in_bucket, uint32_t n_outputs,
                             const td_node *outputs, bool in_place)
{
    td_context *ctx = g->ctx;
    uint32_t n = plan->n_nodes;
    /* The last reader of a node's slot, and of its output alone. */
    uint32_t *last_use = td_alloc(ctx, sizeof *last_use * (n + 1));
    uint32_t *last_output_use = td_alloc(ctx, sizeof *last_output_use * (n + 1));
    uint8_t *placed = td_alloc_zeroed(ctx, n + 1);
    arena a = {td_alloc(ctx, sizeof(uint64_t) * (n + 1)), td_alloc(ctx, sizeof(uint64_t) * (n + 1)), 0, 0};
    if (!last_use || !last_output_use || !placed || !a.start || !a.size) {
        td_free(ctx, last_use);
        td_free(ctx, last_output_use);
        td_free(ctx, placed);
        td_free(ctx, a.start);
        td_free(ctx, a.size);
        return TD_OOM(ctx, "plan liveness", sizeof *last_use * n);
    }
    for (uint32_t id = 0; id < n; id++)
        last_use[id] = last_output_use[id] = id;
    for (uint32_t id = 0; id < n; id++) {
        if (!plan->needed[id])
            continue;
        for (uint32_t k = 0; k < g->nodes[id].n_in; k++) {
            td_node r = memory_root(g, plan, g->nodes[id].in[k]);
            if (last_use[r] != LIVE_FOREVER && last_use[r] < id)
                last_use[r] = id;
            const bool extra_only = k == 0 && (flags_of(g, id) & TD_OPF_READS_FIRST_EXTRA);
            if (!extra_only && last_output_use[r] != LIVE_FOREVER && last_output_use[r] < id)
                last_output_use[r] = id;
        }
    }
    for (uint32_t i = 0; i < n_outputs; i++) {
        td_node r = memory_root(g, plan, outputs[i]);
        last_use[r] = last_output_use[r] = LIVE_FOREVER;
    }
    for (uint32_t i = 0; i < plan->n_grad_copies; i++) {
        td_node r = memory_root(g, plan, plan->grad_copy_src[i]);
        last_use[r] = last_output_use[r] = LIVE_FOREVER;
    }

    /* Inputs first: they are written before any kernel runs. */
    for (uint32_t pass = 0; pass < 2; pass++) {
        for (uint32_t id = 0; id < n; id++) {
            bool is_input = g->nodes[id].op == TD_OP_INPUT;
            if (!plan->needed[id] || is_input != (pass == 0))
                continue;
            uint32_t flags = flags_of(g, id);
            bool own_slot = !in_bucket[id] && !(flags & TD_OPF_ALIAS) && (is_input || !(flags & TD_OPF_SOURCE));
            if (own_slot) {
                td_slot *sl = &plan->slots[id];
                const td_node donor =
                    in_place && pass == 1 ? in_place_donor(g, plan, id, last_output_use, placed) : id;
                sl->buffer = TD_BUF_ARENA;
                if (donor != id) {
                    /* The donor's output range is id's now; its extra
                     * memory, if any, stays the donor's. */
                    sl->offset = plan->slots[donor].offset;
                    placed[donor] =
                        slot_elems(g, plan, donor) > own_elems(g, plan, donor) ? SLOT_EXTRA_HELD : SLOT_GONE;
                } else {
                    sl->offset = arena_take(&a, slot_elems(g, plan, id));
                }
                sl->extra = sl->offset + own_elems(g, plan, id);
                placed[id] = SLOT_HELD;
            }
            for (uint32_t k = 0; pass == 1 && k < g->nodes[id].n_in; k++) {
                td_node r = memory_root(g, plan, g->nodes[id].in[k]);
                if (last_use[r] != id)
                    continue;
                if (placed[r] == SLOT_HELD)
                    arena_give(&a, plan->slots[r].offset, slot_elems(g, plan, r));
                else if (placed[r] == SLOT_EXTRA_HELD)
                    arena_give(&a, plan->slots[r].extra, slot_elems(g, plan, r) - own_elems(g, plan, r));
                else
                    continue;
                placed[r] = SLOT_GONE;
            }
        }
    }
    plan->size[TD_BUF_ARENA] = a.top;
    td_free(ctx, last_use);
    td_free(ctx, last_output_use);
    td_free(ctx, placed);
    td_free(ctx, a.start);
    td_free(ctx, a.size);
    return TD_OK;
}

/* Counts one node's calls, opening a new segment when the last step was a
 * collective (or there was none). */
static void count_calls(td_plan *plan, td_step **cur, uint32_t *calls, uint32_t count)
{
    if (count == 0)
        return;
    if (!*cur) {
        *cur = &plan->steps[plan->n_steps++];
        (*cur)->kind = TD_STEP_SEGMENT;
        (*cur)->first_call = *calls;
    }
    (*cur)->n_calls += count;
    *calls += count;
}

td_status td_plan_build(const td_graph *g, uint32_t devices, const td_plan_split *split, uint32_t n_outputs,
                        const td_node *outputs, uint32_t n_grads, const td_node *param_nodes,
                        const td_node *grad_nodes, bool training, td_plan *plan)
{
    td_context *ctx = g->ctx;
    memset(plan, 0, sizeof *plan);
    plan->training = training;
    plan->shard_weight = 1.0f;
    if (split && split->total && split->rows * devices != split->total)
        plan->shard_weight = (float)((double)devices * (double)split->rows / (double)split->total);
    uint32_t n = g->count;
    plan->n_nodes = n;
    plan->shapes = td_alloc_zeroed(ctx, sizeof *plan->shapes * (n + 1));
    plan->slots = td_alloc_zeroed(ctx, sizeof *plan->slots * (n + 1));
    plan->needed = td_alloc_zeroed(ctx, n + 1);
    plan->steps = td_alloc_zeroed(ctx, sizeof *plan->steps * (2 * (size_t)n + 2));
    plan->grad_copy_src = td_alloc_zeroed(ctx, sizeof *plan->grad_copy_src * (n_grads + 1));
    plan->grad_copy_dst = td_alloc_zeroed(ctx, sizeof *plan->grad_copy_dst * (n_grads + 1));
    uint8_t *in_bucket = td_alloc_zeroed(ctx, n + 1);
    if (!plan->shapes || !plan->slots || !plan->needed || !plan->steps || !plan->grad_copy_src ||
        !plan->grad_copy_dst || !in_bucket) {
        td_free(ctx, in_bucket);
        td_plan_free(ctx, plan);
        return TD_OOM(ctx, "a plan", sizeof *plan->slots * n);
    }
    td_status s = TD_OK;
    for (uint32_t id = 0; id < n && s == TD_OK; id++) {
        const td_node_def *nd = &g->nodes[id];
        if (!split || nd->op != TD_OP_INPUT || nd->placement != TD_SHARDED || nd->attr.dims.rank == 0) {
            s = td_graph_infer(g, id, plan->shapes, devices);
            continue;
        }
        /* The device's rows of the split, in place of an even share. */
        plan->shapes[id] = nd->attr.dims;
        if ((uint64_t)nd->attr.dims.dims[0] != split->total)
            s = td_error_set(ctx, TD_ERR_SHAPE_MISMATCH,
                             "input '%s': batch size %lld (axis 0) differs from the split's global batch of %llu "
                             "(every sharded input must hold the same examples)",
                             nd->name, (long long)nd->attr.dims.dims[0], (unsigned long long)split->total);
        plan->shapes[id].dims[0] = (int64_t)split->rows;
    }
    for (uint32_t id = 0; id < n && s == TD_OK; id++)
        if (g->nodes[id].op == TD_OP_BROADCAST && g->nodes[id].attr.broadcast.root >= devices)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "broadcast node %u: root %u is not a device of a %u-device mesh",
                             id, g->nodes[id].attr.broadcast.root, devices);
    if (s != TD_OK) {
        td_free(ctx, in_bucket);
        td_plan_free(ctx, plan);
        return s;
    }

    for (uint32_t i = 0; i < n_outputs; i++)
        plan->needed[outputs[i]] = 1;
    for (uint32_t i = 0; i < n_grads; i++)
        plan->needed[grad_nodes[i]] = 1;
    for (int64_t id = (int64_t)n - 1; id >= 0; id--) {
        if (!plan->needed[id])
            continue;
        if (flags_of(g, (td_node)id) & TD_OPF_BY_MODE) {
            plan->needed[g->nodes[id].in[training ? 0 : 1]] = 1;
            continue;
        }
        for (uint32_t k = 0; k < g->nodes[id].n_in; k++)
            plan->needed[g->nodes[id].in[k]] = 1;
    }
    for (uint32_t id = 0; id < n; id++)
        plan->n_step_nodes += plan->needed[id] && (flags_of(g, id) & TD_OPF_STEP_WORDS);
    plan->step_nodes = td_alloc(ctx, sizeof *plan->step_nodes * (plan->n_step_nodes + 1));
    if (!plan->step_nodes) {
        td_free(ctx, in_bucket);
        td_plan_free(ctx, plan);
        return TD_OOM(ctx, "a plan", sizeof *plan->step_nodes * plan->n_step_nodes);
    }
    plan->n_step_nodes = 0;
    for (uint32_t id = 0; id < n; id++)
        if (plan->needed[id] && (flags_of(g, id) & TD_OPF_STEP_WORDS)) {
            plan->slots[id].words = 2 * (uint64_t)plan->n_step_nodes;
            plan->step_nodes[plan->n_step_nodes++] = id;
        }
    plan->size[TD_BUF_STEP] = 2 * (uint64_t)plan->n_step_nodes;

    /* Parameters: every parameter of the graph, in node order. */
    for (uint32_t id = 0; id < n; id++) {
        plan->slots[id].buffer = -1;
        if (g->nodes[id].op == TD_OP_PARAM) {
            plan->slots[id].buffer = TD_BUF_PARAMS;
            plan->slots[id].offset = plan->size[TD_BUF_PARAMS];
            plan->size[TD_BUF_PARAMS] = align_up(plan->size[TD_BUF_PARAMS] + (uint64_t)td_shape_count(&plan->shapes[id]));
        }
    }
    /* Gradients computed straight into the bucket, at their parameter's
     * offset, when their node writes its own memory; the others are copied
     * there by the plan's last calls. */
    if (n_grads)
        plan->size[TD_BUF_GRADS] = plan->size[TD_BUF_PARAMS];
    for (uint32_t i = 0; i < n_grads; i++) {
        td_node gn = grad_nodes[i];
        if (!(flags_of(g, gn) & (TD_OPF_SOURCE | TD_OPF_ALIAS | TD_OPF_COLLECTIVE)) && !in_bucket[gn] &&
            !td_op_def_of(g->nodes[gn].op)->extra) {
            plan->slots[gn].buffer = TD_BUF_GRADS;
            plan->slots[gn].offset = plan->slots[param_nodes[i]].offset;
            in_bucket[gn] = 1;
        }
    }
    for (uint32_t i = 0; i < n_grads; i++) {
        if (plan->slots[grad_nodes[i]].buffer == TD_BUF_GRADS &&
            plan->slots[grad_nodes[i]].offset == plan->slots[param_nodes[i]].offset)
            continue;
        plan->grad_copy_src[plan->n_grad_copies] = grad_nodes[i];
        plan->grad_copy_dst[plan->n_grad_copies++] = plan->slots[param_nodes[i]].offset;
    }
    /* In place and not: writing over inputs never adds to what is live at
     * once, but first fit may then leave holes that raise the arena's top
     * (a GPT's activations by about 5 %), so the plan keeps whichever
     * arena is smaller, in place when they tie. */
    td_slot *apart = td_alloc(ctx, sizeof *apart * n);
    if (!apart)
        s = TD_OOM(ctx, "plan slots", sizeof *apart * n);
    if (s == TD_OK)
        s = place_arena(g, plan, in_bucket, n_outputs, outputs, false);
    if (s == TD_OK) {
        const uint64_t apart_size = plan->size[TD_BUF_ARENA];
        memcpy(apart, plan->slots, sizeof *apart * n);
        s = place_arena(g, plan, in_bucket, n_outputs, outputs, true);
        if (s == TD_OK && plan->size[TD_BUF_ARENA] > apart_size) {
            memcpy(plan->slots, apart, sizeof *apart * n);
            plan->size[TD_BUF_ARENA] = apart_size;
        }
    }
    td_free(ctx, apart);
    td_free(ctx, in_bucket);
    if (s != TD_OK) {
        td_plan_free(ctx, plan);
        return s;
    }
    for (uint32_t id = 0; id < n; id++)
        if ((flags_of(g, id) & TD_OPF_ALIAS) && plan->needed[id])
            plan->slots[id] = plan->slots[memory_root(g, plan, id)];

    /* Steps: segments of kernel calls, cut at every collective. */
    td_step *cur = NULL;
    uint32_t calls = 0;
    for (uint32_t id = 0; id < n; id++) {
        if (!plan->needed[id])
            continue;
        if (flags_of(g, id) & TD_OPF_COLLECTIVE) {
            td_step *st = &plan->steps[plan->n_steps++];
            td_op op = g->nodes[id].op;
            st->kind = op == TD_OP_ALL_GATHER ? TD_STEP_ALL_GATHER
                       : op == TD_OP_BROADCAST ? TD_STEP_BROADCAST
                                               : TD_STEP_ALLREDUCE;
            st->node = id;
            st->mean = op == TD_OP_PMEAN;
            cur = NULL;
            continue;
        }
        count_calls(plan, &cur, &calls, calls_of(g, plan, id));
    }
    for (uint32_t i = 0; i < plan->n_grad_copies; i++)
        count_calls(plan, &cur, &calls, 1);
    plan->n_calls = calls;
    return TD_OK;
}

/* ---- emitting kernel calls ---- */

td_arg td_emit_arg(const td_emit_ctx *e, td_node id)
{
    const td_slot *sl = &e->plan->slots[id];
    td_arg a = {sl->buffer >= 0 ? e->buffers[sl->buffer] : NULL, sl->offset};
    return a;
}

td_rows_params td_rows_of(const td_shape *s, int32_t mode, float epsilon)
{
    td_rows_params p = {0, s->rank ? s->dims[s->rank - 1] : 1, mode, epsilon};
    p.rows = p.cols ? td_shape_count(s) / p.cols : 0;
    return p;
}

void td_dense_strides(const td_shape *s, int64_t *strides)
{
    int64_t st = 1;
    for (int i = (int)s->rank - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->dims[i];
    }
}

void td_pad4(uint32_t rank, const int64_t *dims, const int64_t *strides, int64_t *d4, int64_t *s4)
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
    td_dense_strides(in, dense);
    uint32_t lead = out->rank - in->rank;
    for (uint32_t i = 0; i < out->rank; i++) {
        if (i < lead)
            strides[i] = 0;
        else
            strides[i] = in->dims[i - lead] == 1 && out->dims[i] != 1 ? 0 : dense[i - lead];
    }
}

void td_emit_elementwise(const td_emit_ctx *e, td_kernel_call *c, int32_t ew_op, float alpha, td_node out, td_node a,
                         td_node b)
{
    const td_shape *so = &e->plan->shapes[out];
    bool has_b = td_ew_arity(ew_op) == 2;
    int64_t sa[TD_MAX_RANK], sb[TD_MAX_RANK] = {0}, dummy[TD_KERNEL_RANK];
    broadcast_strides(&e->plan->shapes[a], so, sa);
    if (has_b)
        broadcast_strides(&e->plan->shapes[b], so, sb);
    c->kernel = TD_KERNEL_ELEMENTWISE;
    c->out = td_emit_arg(e, out);
    c->a = td_emit_arg(e, a);
    if (has_b)
        c->b = td_emit_arg(e, b);
    c->p.ew.op = ew_op;
    c->p.ew.alpha = alpha;
    td_pad4(so->rank, so->dims, sa, c->p.ew.dims, c->p.ew.a_strides);
    td_pad4(so->rank, so->dims, sb, dummy, c->p.ew.b_strides);
}

void td_emit_reduce(td_kernel_call *c, uint32_t rank, const int64_t *dims, const int64_t *strides, uint32_t reduced,
                    float alpha, bool mean)
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
    td_pad4(no, od, os, c->p.reduce.out_dims, c->p.reduce.out_strides);
    td_pad4(nr, rd, rs, c->p.reduce.red_dims, c->p.reduce.red_strides);
    c->p.reduce.alpha = mean ? (count ? alpha / (float)count : alpha) : alpha;
}

void td_plan_call_names(const td_graph *g, const td_plan *plan, const char **names)
{
    uint32_t k = 0;
    for (uint32_t id = 0; id < plan->n_nodes; id++) {
        if (!plan->needed[id])
            continue;
        uint32_t count = calls_of(g, plan, id);
        for (uint32_t c = 0; c < count; c++)
            names[k++] = td_op_def_of(g->nodes[id].op)->name;
    }
    for (uint32_t i = 0; i < plan->n_grad_copies; i++)
        names[k++] = "gradient_copy";
}

td_status td_plan_emit(const td_graph *g, const td_plan *plan, td_buffer *const buffers[TD_BUF_COUNT],
                       uint32_t position, td_kernel_call *calls)
{
    td_emit_ctx e = {g, plan, buffers, position};
    uint32_t k = 0;
    for (uint32_t id = 0; id < plan->n_nodes; id++) {
        if (!plan->needed[id])
            continue;
        uint32_t count = calls_of(g, plan, id);
        if (count == 0)
            continue;
        memset(calls + k, 0, sizeof *calls * count);
        td_op_def_of(g->nodes[id].op)->emit(&e, id, calls + k);
        k += count;
    }
    for (uint32_t i = 0; i < plan->n_grad_copies; i++) {
        td_kernel_call *c = &calls[k++];
        memset(c, 0, sizeof *c);
        c->kernel = TD_KERNEL_COPY;
        c->n = td_shape_count(&plan->shapes[plan->grad_copy_src[i]]);
        c->a = td_emit_arg(&e, plan->grad_copy_src[i]);
        c->out.buffer = buffers[TD_BUF_GRADS];
        c->out.offset = plan->grad_copy_dst[i];
    }
    return TD_OK;
}
