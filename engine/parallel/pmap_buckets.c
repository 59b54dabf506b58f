/* pmap, the bucketed schedule: the all-reduce of a bucket of the gradient
 * buffer starts as soon as the step's last kernel call touching that
 * bucket has run, while the rest of backward is still to come.
 *
 * A bucket is ready after the last call that reads or writes its elements
 * in the parameter or the gradient buffer: its gradients are then
 * complete, and no later call reads its parameters, so the update may
 * write them. Calls name their operands by their first element only, so an
 * operand counts as touching the bucket it starts in; FILL and COPY, which
 * may span several parameters (zeroing the bucket, the plan's closing
 * gradient copies), carry their element count and touch every bucket they
 * span. Later than ready is always safe, so the buckets' points are made
 * non-decreasing in the one order every device uses (device 0's).
 *
 * The plan's segments are cut at those points into pieces, made on the
 * first run after a compile (a steady-state step allocates nothing). On
 * CPU devices a segment runs on the device's worker itself, so a bucket's
 * reduction runs between backward's kernels rather than beside them: what
 * it gains is the bucket's gradients and parameters still in cache, and
 * the owners' updates spread over backward instead of after it. Devices
 * with queues of their own (GPUs) lag by one piece (the `begin` of
 * td_program_set_buckets, run_pieces in pmap_run.c): the bucket's copy
 * to the host is enqueued when it is ready, its reduction runs once the
 * next piece is on the queue, beside it. */
#include <string.h>

#include "td_platform.h"
#include "td_program_state.h"
#include "td_trace.h"

td_status td_program_set_buckets(td_program *p, uint32_t n_buckets, const size_t *bounds, td_program_bucket_fn begin,
                                 td_program_bucket_fn fn, void *user)
{
    for (uint32_t pos = 0; p->devs && pos < p->n_dev; pos++)
        td_program_free_pieces(p, pos);
    td_free(p->ctx, p->bucket_bounds);
    p->bucket_bounds = NULL;
    p->n_buckets = 0;
    if (n_buckets == 0)
        return TD_OK;
    if (!bounds || !fn)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "td_program_set_buckets: bounds or fn is NULL");
    for (uint32_t b = 0; b < n_buckets; b++)
        if (bounds[b] > bounds[b + 1])
            return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_program_set_buckets: bucket %u is [%zu, %zu), expected ascending bounds", b,
                                bounds[b], bounds[b + 1]);
    p->bucket_bounds = td_alloc(p->ctx, sizeof *bounds * (n_buckets + 1));
    if (!p->bucket_bounds)
        return TD_OOM(p->ctx, "the all-reduce's buckets", sizeof *bounds * (n_buckets + 1));
    memcpy(p->bucket_bounds, bounds, sizeof *bounds * (n_buckets + 1));
    p->n_buckets = n_buckets;
    p->bucket_begin_fn = begin;
    p->bucket_fn = fn;
    p->bucket_user = user;
    return TD_OK;
}

uint32_t td_program_buckets_done(const td_program *p, uint32_t position)
{
    return p->devs ? p->devs[position].buckets_done : 0;
}

double td_program_bucket_seconds(const td_program *p, uint32_t position)
{
    return p->devs ? p->devs[position].bucket_seconds : 0.0;
}

void td_program_free_pieces(td_program *p, uint32_t pos)
{
    td_program_device *pd = &p->devs[pos];
    td_mesh_device *md = &p->mesh->devices[pos];
    for (uint32_t i = 0; pd->piece_segments && i < pd->n_pieces; i++)
        if (pd->piece_segments[i])
            md->ops->segment_destroy(md->dev, pd->piece_segments[i]);
    td_free(p->ctx, pd->piece_segments);
    td_free(p->ctx, pd->piece_first);
    pd->piece_segments = NULL;
    pd->piece_first = pd->piece_calls = pd->piece_buckets = pd->piece_step = pd->bucket_order = NULL;
    pd->n_pieces = 0;
    pd->pieces_tried = false;
}

/* The first bucket whose end is past element `at`. */
static uint32_t bucket_of(const td_program *p, uint64_t at)
{
    uint32_t a = 0, b = p->n_buckets;
    while (a < b) {
        uint32_t m = a + (b - a) / 2;
        if (p->bucket_bounds[m + 1] <= at)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* last[b] = 1 + the index of device pos's last call touching bucket b
 * (0: none does). */
static void last_touches(const td_program *p, uint32_t pos, uint32_t *last)
{
    const td_program_device *pd = &p->devs[pos];
    const td_plan *plan = td_program_device_plan(p, pos);
    td_buffer *params = pd->buffers[TD_BUF_PARAMS], *grads = pd->buffers[TD_BUF_GRADS];
    memset(last, 0, sizeof *last * p->n_buckets);
    for (uint32_t c = 0; pd->calls && c < plan->n_calls; c++) {
        const td_kernel_call *k = &pd->calls[c];
        const td_arg args[] = {k->out, k->out2, k->a, k->b, k->c};
        const bool spans = k->kernel == TD_KERNEL_FILL || k->kernel == TD_KERNEL_COPY;
        for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
            if (!args[i].buffer || (args[i].buffer != params && args[i].buffer != grads))
                continue;
            const uint64_t lo = args[i].offset, hi = lo + (spans && k->n > 1 ? (uint64_t)k->n : 1);
            for (uint32_t b = bucket_of(p, lo); b < p->n_buckets && p->bucket_bounds[b] < hi; b++)
                last[b] = c + 1;
        }
    }
}

td_status td_program_make_pieces(td_program *p, uint32_t pos)
{
    td_program_device *pd = &p->devs[pos];
    td_mesh_device *md = &p->mesh->devices[pos];
    const td_plan *plan = td_program_device_plan(p, pos);
    pd->pieces_tried = true;
    const uint32_t nb = p->n_buckets;
    uint32_t *scratch = td_alloc(p->ctx, sizeof *scratch * 3 * nb);
    if (!scratch)
        return TD_OOM(p->ctx, "the buckets' schedule", sizeof *scratch * 3 * nb);
    uint32_t *order = scratch, *last0 = scratch + nb, *mine = scratch + 2 * nb;
    last_touches(p, 0, last0);
    for (uint32_t b = 0; b < nb; b++) { /* by device 0's points, then index: insertion sort */
        uint32_t j = b;
        for (; j > 0 && last0[order[j - 1]] > last0[b]; j--)
            order[j] = order[j - 1];
        order[j] = b;
    }
    /* Each bucket's point: the latest over the devices (their plans emit
     * the same calls, but a device may differ in what it touches), so
     * every device runs the buckets at the same places among the plan's
     * in-graph collectives -- collectives must come in one order -- and
     * non-decreasing in the buckets' order. */
    for (uint32_t d = 1; d < p->n_dev; d++) {
        last_touches(p, d, mine);
        for (uint32_t b = 0; b < nb; b++)
            if (mine[b] > last0[b])
                last0[b] = mine[b];
    }
    uint32_t point = 0;
    for (uint32_t i = 0; i < nb; i++) {
        if (last0[order[i]] > point)
            point = last0[order[i]];
        mine[i] = point; /* the i-th bucket's point */
    }
    memcpy(last0, mine, sizeof *mine * nb);
    const uint32_t most = plan->n_steps + nb + 1;
    pd->piece_first = td_alloc_zeroed(p->ctx, sizeof(uint32_t) * (4 * most + nb));
    pd->piece_segments = td_alloc_zeroed(p->ctx, sizeof *pd->piece_segments * most);
    if (!pd->piece_first || !pd->piece_segments) {
        td_free(p->ctx, scratch);
        td_program_free_pieces(p, pos);
        pd->pieces_tried = true;
        return TD_OOM(p->ctx, "the buckets' schedule", sizeof(uint32_t) * 3 * most);
    }
    pd->piece_calls = pd->piece_first + most;
    pd->piece_buckets = pd->piece_first + 2 * most;
    pd->piece_step = pd->piece_first + 3 * most;
    pd->bucket_order = pd->piece_first + 4 * most;
    memcpy(pd->bucket_order, order, sizeof *order * nb);
    uint32_t n = 0, next = 0;
    td_status s = TD_OK;
    for (uint32_t i = 0; i < plan->n_steps && s == TD_OK; i++) {
        const td_step *st = &plan->steps[i];
        if (st->kind != TD_STEP_SEGMENT) {
            pd->piece_step[n] = i;
            pd->piece_buckets[n] = next;
            n++;
            continue;
        }
        uint32_t from = st->first_call;
        const uint32_t end = st->first_call + st->n_calls;
        while (from < end && s == TD_OK) {
            uint32_t to = end;
            /* Cut after the next bucket point inside this step. */
            for (uint32_t k = next; k < nb; k++)
                if (last0[k] > from && last0[k] < end) {
                    to = last0[k];
                    break;
                }
            while (next < nb && last0[next] <= to)
                next++;
            pd->piece_step[n] = TD_NO_PIECE_STEP;
            pd->piece_first[n] = from;
            pd->piece_calls[n] = to - from;
            pd->piece_buckets[n] = next;
            s = md->ops->segment_create(md->dev, pd->calls + from, to - from, &pd->piece_segments[n]);
            n++;
            from = to;
        }
    }
    pd->n_pieces = n;
    if (s == TD_OK && n > 0)
        pd->piece_buckets[n - 1] = nb; /* untouched buckets, if any, after the last call */
    td_free(p->ctx, scratch);
    if (s != TD_OK || n == 0) {
        td_program_free_pieces(p, pos);
        pd->pieces_tried = true;
    }
    return s;
}
