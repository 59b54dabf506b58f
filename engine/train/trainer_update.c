/* The trainer's update: pmap(value_and_grad) with the gradient all-reduce
 * fused with the optimizer. After the ring's reduce-scatter, the owner of
 * each chunk computes that chunk's new parameters once, from the host
 * master copy, and the all-gather hands the new values to every device.
 * Every parameter is thus computed exactly once, in host code, and copied:
 * the replicas are bitwise identical on any mix of devices by construction.
 * The optimizer's state (momentum, moments) lives with the same owner, for
 * its chunk only, so it is split over the ranks rather than replicated.
 * New values go to the staged copies (pending, next_state); the step makes
 * them current only when every device finished (trainer_step.c).
 *
 * Clipping by the global norm needs the whole reduced gradient before any
 * owner may update. Rather than a second collective, the ring's
 * reduce-scatter hands each owner its chunk slice by slice (still in
 * cache) to take the mean and its sum of squares; the ranks then exchange
 * one double each -- a barrier bounded by the context timeout -- and sum
 * them in rank order, so every owner scales by bitwise the same norm. The
 * exchange only happens when clipping is on; without it the schedule is the
 * one-pass fused update it always was.
 *
 * Gradient accumulation (optax.MultiSteps): with accumulate_steps K > 1,
 * each call's hook reads the device's gradient bucket back and adds it to a
 * host accumulator of that device, skipping the ring; the K-th call writes
 * the mean of its K gradients into the bucket and only then runs the fused
 * all-reduce + update, so there is one all-reduce per K micro-batches. A
 * failed call empties the accumulators: the next call starts a new round of
 * K, and no gradient of a round that saw a failure ever reaches the
 * parameters. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "td_host_pool.h"
#include "td_platform.h"
#include "td_trace.h"
#include "td_trainer_state.h"

/* The first range that ends after `offset`. */
static size_t first_range(const td_trainer *t, size_t offset)
{
    size_t a = 0, b = t->n_ranges;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (t->ranges[m].hi <= offset)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* Mean gradient of a reduced slice and its trainable elements' sum of
 * squares. Gaps (padding, parameters not being trained) are skipped: the
 * consumed gradient bucket holds stale values there. */
static double clip_partial(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    td_trainer *t = user;
    (void)rank;
    td_ring_divide(data, count, t->global_n);
    const size_t end = offset + count;
    double sum = 0.0;
    for (size_t i = first_range(t, offset); i < t->n_ranges && t->ranges[i].lo < end; i++) {
        if (t->ranges[i].state)
            continue; /* not a gradient */
        size_t a = t->ranges[i].lo > offset ? t->ranges[i].lo : offset;
        size_t b = t->ranges[i].hi < end ? t->ranges[i].hi : end;
        for (size_t j = a; j < b; j++)
            sum += (double)data[j - offset] * data[j - offset];
    }
    return sum;
}

static void clip_total(void *user, uint32_t rank, double total)
{
    td_trainer *t = user;
    t->owners[rank].g_norm = (float)sqrt(total);
}

/* The owner's update of one reduced slice: data holds the gradient summed
 * over devices (already the mean when clipping) -- and, at an updated
 * state's offset, the sum of its update's values --, and leaves holding the
 * new parameters, which the all-gather distributes. */
static void update_slice(td_trainer *t, uint32_t rank, float *data, size_t offset, size_t count)
{
    trainer_owner *ow = &t->owners[rank];
    const float max_norm = t->options.max_norm;
    if (max_norm == 0.0f)
        td_ring_divide(data, count, t->global_n); /* the mean gradient */
    const bool clip = max_norm > 0.0f && !(ow->g_norm < max_norm);
    const size_t end = offset + count, chunk = ow->hi - ow->lo;
    size_t at = offset;
    for (size_t i = first_range(t, offset); i < t->n_ranges && t->ranges[i].lo < end; i++) {
        size_t a = t->ranges[i].lo > offset ? t->ranges[i].lo : offset;
        size_t b = t->ranges[i].hi < end ? t->ranges[i].hi : end;
        if (a > at)
            memcpy(t->pending + at, t->master + at, (a - at) * sizeof(float));
        at = b;
        if (t->ranges[i].state) {
            memcpy(t->pending + a, data + (a - offset), (b - a) * sizeof(float));
            continue;
        }
        if (clip) {
            /* optax.clip_by_global_norm: g / norm * max_norm, in that order. */
            const float norm = ow->g_norm;
            for (size_t j = a; j < b; j++)
                data[j - offset] = data[j - offset] / norm * max_norm;
        }
        td_optimizer_args args = {
            .options = &t->options,
            .count = b - a,
            .grad = data + (a - offset),
            .param = t->master + a,
            .next = t->pending + a,
            .state = ow->state + (a - ow->lo),
            .next_state = ow->next_state + (a - ow->lo),
            .state_stride = chunk,
            .learning_rate = t->step_lr,
            .count_inc = t->count_inc,
        };
        t->optimizer->update(&args);
    }
    if (end > at)
        memcpy(t->pending + at, t->master + at, (end - at) * sizeof(float));
    memcpy(data, t->pending + offset, count * sizeof(float));
}

static double seconds_now(void)
{
    return (double)td_platform_now_ns() * 1e-9;
}

/* A slice's update in parts for the host pool's spare threads: every
 * element's update reads and writes that element alone (the clipping norm
 * and the bias corrections are computed before), so the parts give the
 * bits of one pass. Parts start at multiples of 64 elements, keeping the
 * vector loops' alignment. */
enum { UPDATE_GRANULE = 64, UPDATE_MIN_PART = 16384 };

typedef struct update_parts {
    td_trainer *t;
    uint32_t rank;
    float *data;
    size_t offset, count;
    int64_t parts;
} update_parts;

static void update_part(void *arg, int64_t part)
{
    const update_parts *u = arg;
    const size_t units = (u->count + UPDATE_GRANULE - 1) / UPDATE_GRANULE;
    const size_t begin = UPDATE_GRANULE * ((size_t)part * units / (size_t)u->parts);
    const size_t end = part + 1 == u->parts ? u->count : UPDATE_GRANULE * ((size_t)(part + 1) * units / (size_t)u->parts);
    update_slice(u->t, u->rank, u->data + begin, u->offset + begin, end - begin);
}

/* The direct all-reduce may finalize slices of one chunk on several
 * threads at once (td_ring.h). */
static void add_seconds(_Atomic double *total, double seconds)
{
    double seen = atomic_load_explicit(total, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(total, &seen, seen + seconds, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* Times the owner's update, so td_trainer_timing can tell it from the
 * ring's own work around it. */
static void update_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    td_trainer *t = user;
    td_trace *tr = td_trace_of(t->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    const double start = seconds_now();
    td_host_pool *pool = td_context_host_pool_in_use(t->ctx);
    int64_t parts = pool ? td_host_pool_team(pool) : 1;
    if (parts > (int64_t)(count / UPDATE_MIN_PART))
        parts = (int64_t)(count / UPDATE_MIN_PART);
    if (parts > 1) {
        update_parts u = {t, rank, data, offset, count, parts};
        td_host_pool_run(pool, parts, update_part, &u);
    } else {
        update_slice(t, rank, data, offset, count);
    }
    add_seconds(&t->owners[rank].update_seconds, seconds_now() - start);
    if (tr)
        td_trace_span(tr, td_trace_device_track(tr, &t->mesh->devices[rank]), "optimizer", "optimizer", NULL,
                      begin, td_trace_now(), count * sizeof(float));
}

/* Adds this call's gradients to device pos's accumulator; on the round's
 * last call leaves the round's mean gradient in the bucket instead, for the
 * ring. Summed in call order, then divided once, as exactly as the ring's
 * own mean. */
static td_status accumulate(td_trainer *t, uint32_t pos, td_buffer *grads, bool last)
{
    td_mesh_device *md = &t->mesh->devices[pos];
    trainer_accum *ac = &t->accum[pos];
    const uint32_t timeout = td_context_timeout_ms(t->ctx);
    const size_t n = t->param_elems;
    td_status s = td_mesh_device_submit_wait(md, timeout); /* the backward pass has written the bucket */
    if (s != TD_OK)
        return s;
    float *g = ac->scratch;
    if (!g)
        g = td_mesh_device_host_view(md, grads);
    else if ((s = td_mesh_device_read_wait(md, grads, 0, g, n * sizeof(float), timeout)) != TD_OK)
        return s;
    if (t->micro == 0) {
        memcpy(ac->sum, g, n * sizeof(float));
        return TD_OK;
    }
    if (!last) {
        for (size_t i = 0; i < n; i++)
            ac->sum[i] += g[i];
        return TD_OK;
    }
    for (size_t i = 0; i < n; i++)
        g[i] += ac->sum[i];
    td_ring_divide(g, n, t->options.accumulate_steps);
    if (!ac->scratch)
        return TD_OK; /* written in place */
    return td_mesh_device_write_wait(md, grads, 0, g, n * sizeof(float), timeout);
}

/* Across processes an owner stages only its own part of the new
 * parameters; the rest arrives from the other processes in the device's
 * parameter buffer. Each local device copies its share of the whole array
 * into the staged copy, so the master that becomes current is complete. */
static td_status take_gathered(td_trainer *t, uint32_t pos, td_buffer *params)
{
    td_mesh_device *md = &t->mesh->devices[pos];
    const size_t n = t->param_elems, lo = n * pos / t->mesh->count, hi = n * (pos + 1) / t->mesh->count;
    if (hi == lo)
        return TD_OK;
    const float *host = td_mesh_device_host_view(md, params);
    if (host) {
        memcpy(t->pending + lo, host + lo, (hi - lo) * sizeof(float));
        return TD_OK;
    }
    return td_mesh_device_read_wait(md, params, lo * sizeof(float), t->pending + lo, (hi - lo) * sizeof(float),
                                    td_context_timeout_ms(t->ctx));
}

/* The overlapped all-reduce: bucket b's part of the one fused all-reduce
 * + update, run by the program as soon as backward is done with it
 * (td_program_set_buckets) -- on devices with queues of their own one
 * piece of backward later, its gradients copied to the host at once
 * (begin_bucket), so the device runs that piece meanwhile. The window
 * keeps each element's chunk, order and owner, so the buckets together
 * give the one all-reduce's bits. */
static td_status update_bucket(void *user, uint32_t pos, uint32_t bucket)
{
    td_trainer *t = user;
    td_buffer *grads = td_program_buffer(t->program, pos, TD_BUF_GRADS);
    td_buffer *params = td_program_buffer(t->program, pos, TD_BUF_PARAMS);
    /* The latest copy's ticket covers this bucket's (one in-order queue). */
    const uint64_t prefetched = t->bucket_tickets ? t->bucket_tickets[pos] : 0;
    return td_ring_allreduce_consume_window(t->ring, pos, grads, 0, params, 0, t->param_elems,
                                            t->bucket_bounds[bucket], t->bucket_bounds[bucket + 1], prefetched,
                                            update_finalize, t, (td_ring_wire)t->options.wire);
}

static td_status begin_bucket(void *user, uint32_t pos, uint32_t bucket)
{
    td_trainer *t = user;
    td_buffer *grads = td_program_buffer(t->program, pos, TD_BUF_GRADS);
    uint64_t ticket = 0;
    td_status s = td_ring_window_prefetch(t->ring, pos, grads, 0, t->param_elems, t->bucket_bounds[bucket],
                                          t->bucket_bounds[bucket + 1], &ticket);
    /* 0: nothing to copy (host memory; an empty bucket) -- an earlier
     * bucket's ticket, still to be finished, must stay. */
    if (s == TD_OK && ticket != 0)
        t->bucket_tickets[pos] = ticket;
    return s;
}

td_status td_trainer_plan_buckets(td_trainer *t)
{
    td_free(t->ctx, t->bucket_bounds);
    td_free(t->ctx, t->bucket_tickets);
    t->bucket_bounds = NULL;
    t->bucket_tickets = NULL;
    t->n_buckets = 0;
    /* Clipping needs the whole gradient's norm before any update, and an
     * accumulation round's gradients are summed on the host after the
     * step's kernels: both keep the one all-reduce after backward. */
    const uint64_t bytes = t->options.overlap_bucket_bytes;
    if (bytes == 0 || t->n_ranges == 0 || t->options.max_norm > 0.0f || t->options.accumulate_steps > 1 ||
        !td_ring_can_window(t->ring))
        return td_program_set_buckets(t->program, 0, NULL, NULL, NULL, NULL);
    const size_t want = bytes / sizeof(float) > 0 ? (size_t)(bytes / sizeof(float)) : 1;
    /* The ring proper (GPUs, mixed meshes): the buckets lag a piece, each
     * device keeping its latest copy's ticket. */
    const bool lag = !td_ring_direct(t->ring);
    t->bucket_bounds = td_alloc(t->ctx, sizeof *t->bucket_bounds * (t->n_ranges + 2));
    if (lag)
        t->bucket_tickets = td_alloc_zeroed(t->ctx, sizeof *t->bucket_tickets * t->mesh->count);
    if (!t->bucket_bounds || (lag && !t->bucket_tickets)) {
        td_free(t->ctx, t->bucket_bounds);
        td_free(t->ctx, t->bucket_tickets);
        t->bucket_bounds = NULL;
        t->bucket_tickets = NULL;
        (void)td_program_set_buckets(t->program, 0, NULL, NULL, NULL, NULL); /* none of the old ones stay */
        return TD_OOM(t->ctx, "the all-reduce's buckets",
                      sizeof *t->bucket_bounds * (t->n_ranges + 2) + sizeof(uint64_t) * t->mesh->count);
    }
    /* Whole ranges each (the gaps between them go with the range after),
     * the first from 0 and the last to the end: the buckets tile the
     * buffer, as the one all-reduce covers it. */
    uint32_t n = 0;
    t->bucket_bounds[0] = 0;
    for (uint32_t i = 1; i < t->n_ranges; i++)
        if (t->ranges[i].lo - t->bucket_bounds[n] >= want)
            t->bucket_bounds[++n] = t->ranges[i].lo;
    t->bucket_bounds[++n] = t->param_elems;
    t->n_buckets = n;
    return td_program_set_buckets(t->program, n, t->bucket_bounds, t->bucket_tickets ? begin_bucket : NULL,
                                  update_bucket, t);
}

td_status td_trainer_update_hook(void *user, uint32_t pos)
{
    td_trainer *t = user;
    if (t->n_ranges == 0)
        return TD_OK; /* nothing to train or update: the step computes the loss only */
    td_buffer *grads = td_program_buffer(t->program, pos, TD_BUF_GRADS);
    td_buffer *params = td_program_buffer(t->program, pos, TD_BUF_PARAMS);
    td_status s;
    if (t->n_buckets && td_program_buckets_done(t->program, pos) == t->n_buckets) {
        /* Every bucket reduced and updated during backward; across
         * processes the others' new values are in the parameter buffer. */
        s = td_ring_settle(t->ring, pos, false); /* the last bucket's exchange between processes */
        /* Prefetched windows left their copies back in the queue: the
         * step ends when the device has run them, as after one all-reduce. */
        if (s == TD_OK && t->bucket_tickets)
            s = td_mesh_device_submit_wait(&t->mesh->devices[pos], td_context_timeout_ms(t->ctx));
        if (s == TD_OK && t->processes > 1)
            s = take_gathered(t, pos, params);
        if (s == TD_OK && pos == 0)
            t->allreduces++;
        return s;
    }
    if (t->accum) {
        const bool last = t->micro + 1 == t->options.accumulate_steps;
        if ((s = accumulate(t, pos, grads, last)) != TD_OK || !last)
            return s;
    }
    if (t->options.max_norm > 0.0f)
        s = td_ring_allreduce_consume_total(t->ring, pos, grads, 0, params, 0, t->param_elems, clip_partial,
                                            clip_total, update_finalize, t, (td_ring_wire)t->options.wire);
    else
        s = td_ring_allreduce_consume(t->ring, pos, grads, 0, params, 0, t->param_elems, update_finalize, t,
                                      (td_ring_wire)t->options.wire);
    if (s == TD_OK && t->processes > 1)
        s = take_gathered(t, pos, params);
    if (s == TD_OK && pos == 0)
        t->allreduces++;
    return s;
}
