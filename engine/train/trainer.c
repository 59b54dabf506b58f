/* The data-parallel trainer: pmap(value_and_grad) with the gradient
 * all-reduce fused with the optimizer. After the ring's reduce-scatter, the
 * owner of each chunk computes that chunk's new parameters once, from a host
 * master copy, and the all-gather hands the new values to every device.
 * Every parameter is thus computed exactly once, in host code, and copied:
 * the replicas are bitwise identical on any mix of devices by construction.
 * The optimizer's state (momentum, moments) lives with the same owner, for
 * its chunk only, so it is split over the ranks rather than replicated.
 *
 * A step is all or nothing. New values -- parameters and optimizer state --
 * go to second host copies, which become current only when every device
 * finished the step; if any device fails, every device's parameters are
 * rewritten from the master, so a failed step leaves no replica
 * half-updated and the state as it was.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tandem/train.h"
#include "td_trace.h"
#include "td_trainer_state.h"


td_status td_trainer_options_init(td_trainer_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->optimizer = TD_OPTIMIZER_SGD;
    o->learning_rate = 0.01f;
    o->schedule.kind = TD_SCHEDULE_CONSTANT;
    o->b1 = 0.9f;
    o->b2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = 1e-4f;
    o->decay = 0.9f;
    o->accumulate_steps = 1;
    return TD_OK;
}

static td_status check_unit_interval(td_context *ctx, const char *field, float v)
{
    if (!(v >= 0.0f && v < 1.0f))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: %s %g is outside [0, 1)", field,
                            (double)v);
    return TD_OK;
}

/* Every float of the options must be finite, whichever optimizer reads
 * it: a NaN left in a field the optimizer ignores today is read the day the
 * caller switches optimizers. */
static td_status check_finite_fields(td_context *ctx, const td_trainer_options *o)
{
    const struct {
        const char *name;
        float value;
    } fields[] = {
        {"learning_rate", o->learning_rate}, {"momentum", o->momentum},         {"b1", o->b1},
        {"b2", o->b2},                       {"eps", o->eps},                   {"weight_decay", o->weight_decay},
        {"decay", o->decay},                 {"max_norm", o->max_norm},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!isfinite(fields[i].value))
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: %s is %g, expected a finite value",
                                fields[i].name, (double)fields[i].value);
    return TD_OK;
}

static td_status check_options(td_context *ctx, const td_trainer_options *o)
{
    td_status s = check_finite_fields(ctx, o);
    if (s != TD_OK)
        return s;
    if (o->schedule.kind == TD_SCHEDULE_CONSTANT && (!isfinite(o->learning_rate) || !(o->learning_rate > 0.0f)))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: learning_rate %g must be finite and > 0",
                            (double)o->learning_rate);
    if (o->schedule.kind != TD_SCHEDULE_CONSTANT && (s = td_schedule_check(ctx, &o->schedule, "td_trainer_create")) != TD_OK)
        return s;
    if (!isfinite(o->max_norm) || o->max_norm < 0.0f)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: max_norm %g must be finite and >= 0 (0 = off)",
                            (double)o->max_norm);
    if (o->optimizer == TD_OPTIMIZER_ADAMW && (!isfinite(o->weight_decay) || o->weight_decay < 0.0f))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: weight_decay %g must be finite and >= 0",
                            (double)o->weight_decay);
    if (o->on_device_loss != TD_ON_DEVICE_LOSS_FAIL && o->on_device_loss != TD_ON_DEVICE_LOSS_CONTINUE)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: on_device_loss %d, expected TD_ON_DEVICE_LOSS_FAIL (0) or _CONTINUE (1)",
                            (int)o->on_device_loss);
    if (o->accumulate_steps < 1)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: accumulate_steps %u must be >= 1",
                            o->accumulate_steps);
    if (o->n_metrics && !o->metrics)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: metrics is NULL for n_metrics %u",
                            o->n_metrics);
    switch (o->optimizer) {
    case TD_OPTIMIZER_SGD:
        return check_unit_interval(ctx, "momentum", o->momentum);
    case TD_OPTIMIZER_ADAMW:
    case TD_OPTIMIZER_ADAM:
        if ((s = check_unit_interval(ctx, "b1", o->b1)) != TD_OK || (s = check_unit_interval(ctx, "b2", o->b2)) != TD_OK)
            return s;
        break;
    case TD_OPTIMIZER_RMSPROP:
        if ((s = check_unit_interval(ctx, "decay", o->decay)) != TD_OK ||
            (s = check_unit_interval(ctx, "momentum", o->momentum)) != TD_OK)
            return s;
        break;
    default:
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: optimizer %d is not a td_optimizer_kind",
                            (int)o->optimizer);
    }
    /* A zero eps divides 0 by 0 wherever a gradient is exactly zero. */
    if (!isfinite(o->eps) || !(o->eps > 0.0f))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: eps %g must be finite and > 0",
                            (double)o->eps);
    return TD_OK;
}

static const td_optimizer *optimizer_of(td_optimizer_kind kind)
{
    switch (kind) {
    case TD_OPTIMIZER_ADAM:
        return &td_optimizer_adam;
    case TD_OPTIMIZER_ADAMW:
        return &td_optimizer_adamw;
    case TD_OPTIMIZER_RMSPROP:
        return &td_optimizer_rmsprop;
    case TD_OPTIMIZER_SGD:
    default:
        return &td_optimizer_sgd;
    }
}

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
    td_ring_divide(data, count, t->mesh->count);
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
static void update_slice(td_trainer *t, uint32_t rank, float *data, size_t offset, size_t count);

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Times the owner's update, so td_trainer_timing can tell it from the
 * ring's own work around it. */
static void update_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    td_trainer *t = user;
    td_trace *tr = td_trace_of(t->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    const double start = seconds_now();
    update_slice(t, rank, data, offset, count);
    t->owners[rank].update_seconds += seconds_now() - start;
    if (tr)
        td_trace_span(tr, td_trace_device_track(tr, &t->mesh->devices[rank]), "optimizer", "optimizer", NULL,
                      begin, td_trace_now(), count * sizeof(float));
}

static void update_slice(td_trainer *t, uint32_t rank, float *data, size_t offset, size_t count)
{
    trainer_owner *ow = &t->owners[rank];
    const float max_norm = t->options.max_norm;
    if (max_norm == 0.0f)
        td_ring_divide(data, count, t->mesh->count); /* the mean gradient */
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

static td_status device_sync(td_mesh_device *md, uint32_t timeout_ms)
{
    uint64_t ticket;
    td_status s = md->ops->submit(md->dev, &ticket);
    return s == TD_OK ? md->ops->wait(md->dev, ticket, timeout_ms) : s;
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
    td_status s = device_sync(md, timeout); /* the backward pass has written the bucket */
    if (s != TD_OK)
        return s;
    float *g = ac->scratch;
    if (!g)
        g = md->ops->buffer_host_pointer(md->dev, grads);
    else if ((s = md->ops->read(md->dev, grads, 0, g, n * sizeof(float))) != TD_OK ||
             (s = device_sync(md, timeout)) != TD_OK)
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
    if ((s = md->ops->write(md->dev, grads, 0, g, n * sizeof(float))) != TD_OK)
        return s;
    return device_sync(md, timeout);
}

static td_status update_hook(void *user, uint32_t pos)
{
    td_trainer *t = user;
    if (t->n_ranges == 0)
        return TD_OK; /* nothing to train or update: the step computes the loss only */
    td_buffer *grads = td_program_buffer(t->program, pos, TD_BUF_GRADS);
    td_buffer *params = td_program_buffer(t->program, pos, TD_BUF_PARAMS);
    td_status s;
    if (t->accum) {
        const bool last = t->micro + 1 == t->options.accumulate_steps;
        if ((s = accumulate(t, pos, grads, last)) != TD_OK || !last)
            return s;
    }
    if (t->options.max_norm > 0.0f)
        s = td_ring_allreduce_consume_total(t->ring, pos, grads, 0, params, 0, t->param_elems, clip_partial,
                                            clip_total, update_finalize, t);
    else
        s = td_ring_allreduce_consume(t->ring, pos, grads, 0, params, 0, t->param_elems, update_finalize, t);
    if (s == TD_OK && pos == 0)
        t->allreduces++;
    return s;
}

_Static_assert(offsetof(td_trainer, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

static void free_owners(td_trainer *t);
static void free_accumulators(td_trainer *t);
static td_status plan_accumulators(td_trainer *t);
static void trainer_before_shrink(td_owned *self);

/* Runs while the mesh is still open (its destroy releases its trainers
 * first), so the program can release its device memory. */
static void trainer_release(td_owned *self)
{
    td_trainer *t = (td_trainer *)self;
    if (!td_mesh_quiesce(t->mesh)) {
        /* Its update hook may still be running on a stuck worker. */
        td_owned_abandon(self);
        return;
    }
    td_program_destroy(t->program);
    t->program = NULL;
    if (td_mesh_any_wedged(t->mesh)) {
        /* A device still runs work past the timeout (its program was left
         * to it): its copies into the accumulators may still be pending. */
        td_owned_abandon(self);
        return;
    }
    free_owners(t);
    free_accumulators(t);
    td_free(t->ctx, t->flat_state);
    td_free(t->ctx, t->report_metrics);
    td_free(t->ctx, t->report_timing);
    td_free(t->ctx, t->busy);
    td_free(t->ctx, t->keep);
    td_balancer_free(&t->balance);
    td_free(t->ctx, t->metrics);
    td_free(t->ctx, t->ranges);
    td_free(t->ctx, t->params);
    td_free(t->ctx, t->master);
    td_free(t->ctx, t->pending);
}

void td_trainer_destroy(td_trainer *t)
{
    if (t)
        td_owned_destroy(&t->owned);
}

void td_trainer_fill_timing(const td_trainer *t, uint32_t device, td_step_timing *timing)
{
    double phase[TD_PHASE_COUNT];
    td_program_phase_seconds(t->program, device, phase);
    const double update = t->owners[device].update_seconds;
    timing->upload = phase[TD_PHASE_UPLOAD];
    timing->compute = phase[TD_PHASE_COMPUTE];
    timing->update = update;
    timing->allreduce = phase[TD_PHASE_HOOK] > update ? phase[TD_PHASE_HOOK] - update : 0.0;
    timing->download = phase[TD_PHASE_DOWNLOAD];
}

/* Output `index` (0 the loss, then the metrics) over the devices: each
 * device's value is a mean over its rows, so the global batch's is their
 * mean weighted by the devices' shares, sum_d w_d * v_d / N
 * (td_graph_shard_weight; every w_d is exactly 1 on an even split, which
 * leaves the plain mean). Fixed order, device 0 first. */
float td_trainer_combine_devices(const td_trainer *t, uint32_t index)
{
    float sum = 0.0f;
    for (uint32_t d = 0; d < t->mesh->count; d++)
        sum += td_program_shard_weight(t->program, d) * td_program_output_host(t->program, index, d)[0];
    return sum / (float)t->mesh->count;
}

void td_trainer_fill_metrics(const td_trainer *t, float *values)
{
    for (uint32_t i = 0; i < t->n_metrics; i++)
        values[i] = td_trainer_combine_devices(t, i + 1);
}

/* The step callback's report, from what the step left behind. */
static void report_step(td_trainer *t, float loss, double seconds)
{
    td_trainer_fill_metrics(t, t->report_metrics);
    for (uint32_t d = 0; d < t->mesh->count; d++)
        td_trainer_fill_timing(t, d, &t->report_timing[d]);
    const td_step_report r = {
        .micro_step = t->micro_steps,
        .updates = t->steps,
        .updated = t->updated,
        .loss = loss,
        .learning_rate = t->step_lr,
        .seconds = seconds,
        .n_metrics = t->n_metrics,
        .metrics = t->report_metrics,
        .n_devices = t->mesh->count,
        .timing = t->report_timing,
        .devices_lost = t->lost_this_step,
        .split = t->balance.rows,
        .rebalanced = t->rebalanced,
    };
    t->on_step(t->on_step_user, &r);
}

void td_trainer_swap_in_staged(td_trainer *t)
{
    float *swap = t->master;
    t->master = t->pending;
    t->pending = swap;
    for (uint32_t r = 0; r < t->mesh->count; r++) {
        float *st = t->owners[r].state;
        t->owners[r].state = t->owners[r].next_state;
        t->owners[r].next_state = st;
    }
}

/* Calls that read the owners' chunks need them: after the mesh dropped
 * devices, the trainer plans them again in its next step. */
td_status td_trainer_check_planned(const td_trainer *t, const char *fn)
{
    if (!t->stale)
        return TD_OK;
    return td_error_set(t->ctx, TD_ERR_STATE,
                        "%s: the mesh dropped lost devices and the trainer has not planned for the %u left yet (its "
                        "last td_trainer_step failed to); step again first",
                        fn, t->mesh->count);
}

/* The first check of every call on a trainer: not NULL, not released. */
td_status td_trainer_check(const td_trainer *t, const char *fn)
{
    return t ? td_owned_check_live(&t->owned, fn) : TD_ERR_INVALID_ARGUMENT;
}

static int compare_ranges(const void *x, const void *y)
{
    const trainable_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Every entry a parameter node of g, none twice. */
static td_status check_params(td_graph *g, uint32_t n_params, const td_node *params)
{
    td_context *ctx = g->ctx;
    uint8_t *seen = td_alloc_zeroed(ctx, g->count + 1);
    if (!seen)
        return TD_OOM(ctx, "parameter bookkeeping", g->count + 1);
    td_status s = TD_OK;
    for (uint32_t i = 0; i < n_params && s == TD_OK; i++) {
        td_node p = params[i];
        if (p >= g->count)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is node %u, which does not exist (the graph has %u nodes)",
                             i, p, g->count);
        else if (g->nodes[p].op != TD_OP_PARAM)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is node %u, which is not a parameter (td_graph_param)", i,
                             p);
        else if (g->nodes[p].is_state)
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is state '%s' (node %u), which its td_graph_state_update "
                             "changes; only trained parameters may be listed",
                             i, g->nodes[p].name, p);
        else if (seen[p])
            s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                             "td_trainer_create: params[%u] is node %u, which is listed twice", i, p);
        else
            seen[p] = 1;
    }
    td_free(ctx, seen);
    return s;
}

static td_status split_owners(td_trainer *t, const float *flat);

/* The sorted trainable ranges, and each rank's chunk with its state. */
static td_status plan_owners(td_trainer *t, const td_node *listed)
{
    td_context *ctx = t->ctx;
    const td_plan *plan = td_program_plan(t->program);
    t->ranges = td_alloc(ctx, sizeof *t->ranges * (t->n_ranges + 1));
    if (!t->ranges)
        return TD_OOM(ctx, "the trainer's ranges", sizeof *t->ranges * t->n_ranges);
    for (uint32_t i = 0; i < t->n_ranges; i++) {
        td_node p = listed[i];
        t->ranges[i].lo = plan->slots[p].offset;
        t->ranges[i].hi = t->ranges[i].lo + (size_t)td_shape_count(&plan->shapes[p]);
        t->ranges[i].state = i >= t->n_params;
    }
    qsort(t->ranges, t->n_ranges, sizeof *t->ranges, compare_ranges);
    return split_owners(t, NULL);
}

/* Each rank's chunk of the parameter buffer and the optimizer state for
 * it: zeros (optax's initial state for every optimizer here), or the
 * slices of `flat` (state_floats arrays of param_elems floats) when the
 * mesh changed under a trained state. */
static td_status split_owners(td_trainer *t, const float *flat)
{
    td_context *ctx = t->ctx;
    const uint32_t n = t->mesh->count;
    t->owners = td_alloc_zeroed(ctx, sizeof *t->owners * n);
    if (!t->owners)
        return TD_OOM(ctx, "the trainer's owners", sizeof *t->owners * n);
    for (uint32_t r = 0; r < n; r++) {
        trainer_owner *ow = &t->owners[r];
        td_ring_owned_range(t->ring, r, t->n_ranges ? t->param_elems : 0, &ow->lo, &ow->hi);
        size_t floats = (size_t)t->state_floats * (ow->hi - ow->lo);
        if (floats == 0)
            continue;
        /* Zero is optax's initial state for every optimizer here. */
        ow->block = td_alloc_zeroed(ctx, 2 * floats * sizeof(float));
        if (!ow->block)
            return TD_OOM(ctx, "optimizer state", 2 * floats * sizeof(float));
        ow->state = ow->block;
        ow->next_state = ow->block + floats;
        const size_t chunk = ow->hi - ow->lo;
        for (uint32_t k = 0; flat && k < t->state_floats; k++)
            memcpy(ow->state + (size_t)k * chunk, flat + (size_t)k * t->param_elems + ow->lo, chunk * sizeof(float));
    }
    return TD_OK;
}

static void free_owners(td_trainer *t)
{
    for (uint32_t r = 0; t->owners && r < t->n_owners; r++)
        td_free(t->ctx, t->owners[r].block);
    td_free(t->ctx, t->owners);
    t->owners = NULL;
}

static void free_accumulators(td_trainer *t)
{
    for (uint32_t d = 0; t->accum && d < t->n_owners; d++) {
        td_free(t->ctx, t->accum[d].sum);
        td_free(t->ctx, t->accum[d].scratch);
    }
    td_free(t->ctx, t->accum);
    t->accum = NULL;
}

/* td_owned.before_shrink: the mesh is about to drop lost devices. The
 * optimizer state leaves the ranks' chunks for one flat copy, the
 * accumulated gradients are dropped (a failed step drops them anyway) and
 * the program lets go of the devices; trainer_refresh plans it all again. */
static void trainer_before_shrink(td_owned *self)
{
    td_trainer *t = (td_trainer *)self;
    if (t->stale)
        return;
    const size_t floats = (size_t)t->state_floats * t->param_elems;
    td_free(t->ctx, t->flat_state);
    t->flat_state = floats ? td_alloc_zeroed(t->ctx, floats * sizeof(float)) : NULL;
    for (uint32_t r = 0; t->flat_state && r < t->n_owners; r++) {
        const trainer_owner *ow = &t->owners[r];
        const size_t chunk = ow->hi - ow->lo;
        for (uint32_t k = 0; chunk && k < t->state_floats; k++)
            memcpy(t->flat_state + (size_t)k * t->param_elems + ow->lo, ow->state + (size_t)k * chunk,
                   chunk * sizeof(float));
    }
    if (floats && !t->flat_state)
        td_log(t->ctx, TD_LOG_ERROR, "no memory to keep the optimizer state across the mesh change: it restarts at zero");
    free_owners(t);
    free_accumulators(t);
    t->micro = 0;
    t->has_outputs = false;
    /* The split loses the lost devices' shares. */
    for (uint32_t d = 0; d < t->n_owners; d++)
        t->keep[d] = !td_mesh_device_lost(t->mesh, d);
    td_balancer_shrink(&t->balance, t->keep);
    t->rebalanced = false; /* a split found for the devices before */
    td_program_before_shrink(t->program);
    t->stale = true;
}

/* After the mesh dropped devices: the program planned for the survivors,
 * the chunks and state split over them, the master parameters on every
 * device. */
static td_status trainer_refresh(td_trainer *t)
{
    if (!t->stale)
        return TD_OK;
    td_status s = td_program_set_split(t->program, t->mesh->count, td_balancer_rows(&t->balance));
    if (s == TD_OK)
        s = td_program_refresh(t->program);
    if (s != TD_OK)
        return s;
    t->ring = td_program_ring(t->program);
    t->n_owners = t->mesh->count;
    if ((s = split_owners(t, t->flat_state)) == TD_OK && t->options.accumulate_steps > 1)
        s = plan_accumulators(t);
    if (s == TD_OK)
        s = td_program_write_all_params(t->program, t->master);
    if (s != TD_OK) {
        free_owners(t);
        free_accumulators(t);
        return s;
    }
    td_free(t->ctx, t->flat_state);
    t->flat_state = NULL;
    t->stale = false;
    td_balancer_request(&t->balance, t->micro_steps + 1); /* the survivors' speeds, past the re-plan's first run */
    return TD_OK;
}

/* Allocated here, once: a step never allocates. Devices working in host
 * memory are read in place; the others need a copy to add from. */
static td_status plan_accumulators(td_trainer *t)
{
    const uint32_t n = t->mesh->count;
    const size_t bytes = (t->param_elems + 1) * sizeof(float);
    t->accum = td_alloc_zeroed(t->ctx, sizeof *t->accum * n);
    if (!t->accum)
        return TD_OOM(t->ctx, "gradient accumulators", sizeof *t->accum * n);
    for (uint32_t d = 0; d < n; d++) {
        td_mesh_device *md = &t->mesh->devices[d];
        td_buffer *grads = td_program_buffer(t->program, d, TD_BUF_GRADS);
        const bool in_place = md->ops->buffer_host_pointer && md->ops->buffer_host_pointer(md->dev, grads);
        t->accum[d].sum = td_alloc_zeroed(t->ctx, bytes);
        t->accum[d].scratch = in_place ? NULL : td_alloc_zeroed(t->ctx, bytes);
        if (!t->accum[d].sum || (!in_place && !t->accum[d].scratch))
            return TD_OOM(t->ctx, "a gradient accumulator", bytes);
    }
    return TD_OK;
}

/* Metrics are read per device and averaged like the loss: scalars only. */
static td_status check_metrics(td_graph *g, uint32_t n, const td_node *metrics)
{
    for (uint32_t i = 0; i < n; i++) {
        td_node m = metrics[i];
        if (m >= g->count)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_trainer_create: metrics[%u] is node %u, which does not exist (the graph has %u nodes)",
                                i, m, g->count);
        if (g->nodes[m].dtype != TD_F32) {
            char what[48];
            snprintf(what, sizeof what, "metrics[%u] (node %u)", i, m);
            return td_dtype_error(g->ctx, "td_trainer_create", what, g->nodes[m].dtype, "an f32 scalar");
        }
        if (td_shape_count(&g->nodes[m].shape) != 1)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_trainer_create: metrics[%u] is node %u with %lld elements, expected an f32 scalar", i,
                                m, (long long)td_shape_count(&g->nodes[m].shape));
    }
    return TD_OK;
}

td_status td_trainer_create(td_graph *g, td_mesh *mesh, td_node loss, uint32_t n_params, const td_node *params,
                            const td_trainer_options *options, td_trainer **out)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    if (!mesh || !out || (n_params && !params))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: mesh, out or params is NULL");
    *out = NULL;
    td_status live = td_owned_check_live(&g->owned, "td_trainer_create");
    if (live == TD_OK)
        live = td_owned_check_live(&mesh->owned, "td_trainer_create");
    if (live != TD_OK)
        return live;
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    if (options) {
        size_t n = options->struct_size ? options->struct_size : sizeof opts;
        memcpy(&opts, options, n < sizeof opts ? n : sizeof opts);
        opts.struct_size = sizeof opts;
    }
    td_status s = check_options(ctx, &opts);
    if (s == TD_OK)
        s = check_params(g, n_params, params);
    if (s == TD_OK)
        s = check_metrics(g, opts.n_metrics, opts.metrics);
    if (s != TD_OK)
        return s;

    /* The program computes the gradients of the listed parameters, then the
     * states' update values, each at its node's offset in the bucket. */
    const uint32_t n_ranges = n_params + g->n_updates;
    td_trainer *t = td_alloc_zeroed(ctx, sizeof *t);
    td_node *grads = td_alloc(ctx, sizeof *grads * (2 * (size_t)n_ranges + 1));
    td_node *outputs = td_alloc(ctx, sizeof *outputs * ((size_t)opts.n_metrics + 1));
    if (!t || !grads || !outputs) {
        td_free(ctx, t);
        td_free(ctx, grads);
        td_free(ctx, outputs);
        return TD_OOM(ctx, "a trainer", sizeof *t);
    }
    outputs[0] = loss;
    if (opts.n_metrics)
        memcpy(outputs + 1, opts.metrics, sizeof *outputs * opts.n_metrics);
    t->ctx = ctx;
    t->mesh = mesh;
    t->options = opts;
    t->optimizer = optimizer_of(opts.optimizer);
    t->state_floats = t->optimizer->state_floats(&opts);
    t->schedule = opts.schedule;
    if (t->schedule.kind == TD_SCHEDULE_CONSTANT)
        t->schedule.init_value = opts.learning_rate;
    t->n_params = n_params;
    t->n_ranges = n_ranges;
    t->n_metrics = opts.n_metrics;
    t->metrics = outputs; /* [loss, metrics...]; options.metrics may be the caller's memory */
    t->options.metrics = outputs + 1;
    td_context_own(ctx, &t->owned, "trainer", mesh, trainer_release);
    t->owned.before_shrink = trainer_before_shrink;
    t->n_owners = mesh->count;
    t->params = td_alloc(ctx, sizeof *t->params * (n_params + 1));
    t->report_metrics = td_alloc_zeroed(ctx, sizeof *t->report_metrics * ((size_t)opts.n_metrics + 1));
    t->report_timing = td_alloc_zeroed(ctx, sizeof *t->report_timing * mesh->count);
    t->busy = td_alloc_zeroed(ctx, sizeof *t->busy * mesh->count);
    t->keep = td_alloc_zeroed(ctx, sizeof *t->keep * mesh->count);
    s = t->params && t->report_metrics && t->report_timing && t->busy && t->keep
            ? TD_OK
            : TD_OOM(ctx, "trainer parameters and reports", sizeof *t->params * n_params);
    if (s == TD_OK)
        s = td_balancer_init(&t->balance, ctx, &opts, g, mesh->count);
    /* The gradients are those of loss x the device's shard weight, and a
     * state's update value enters the all-reduce times it too, so the
     * ring's mean over the devices is the mean over the global batch on
     * any split (on an even one the weight is exactly 1: the same bits). */
    td_node weight = TD_NO_NODE, weighted_loss = loss; /* a loss that is no f32 scalar: value_and_grad names it */
    if (s == TD_OK && (s = td_graph_shard_weight(g, &weight)) == TD_OK && loss < g->count &&
        g->nodes[loss].dtype == TD_F32 && td_shape_count(&g->nodes[loss].shape) == 1)
        s = td_graph_mul(g, loss, weight, &weighted_loss);
    if (s == TD_OK) {
        if (n_params)
            memcpy(t->params, params, sizeof *params * n_params);
        s = td_graph_value_and_grad(g, weighted_loss, n_params, params, grads);
    }
    td_node *listed = grads + n_ranges;
    if (s == TD_OK) {
        if (n_params)
            memcpy(listed, params, sizeof *params * n_params);
        for (uint32_t i = 0; i < g->n_updates && s == TD_OK; i++) {
            listed[n_params + i] = g->updates[i].state;
            s = td_graph_mul(g, g->updates[i].value, weight, &grads[n_params + i]);
        }
    }
    if (s == TD_OK)
        s = td_program_compile(g, mesh, td_balancer_rows(&t->balance), opts.n_metrics + 1, outputs, n_ranges, listed,
                               grads, true, &t->program);
    if (s == TD_OK) {
        td_program_disown(t->program); /* the trainer destroys it */
        t->ring = td_program_ring(t->program);
    }
    if (s == TD_OK) {
        t->param_elems = td_program_plan(t->program)->size[TD_BUF_PARAMS];
        t->master = td_alloc_zeroed(ctx, (t->param_elems + 1) * sizeof(float));
        t->pending = td_alloc_zeroed(ctx, (t->param_elems + 1) * sizeof(float));
        if (!t->master || !t->pending)
            s = TD_OOM(ctx, "the master parameters", 2 * t->param_elems * sizeof(float));
        else /* the master starts where the devices start */
            memcpy(t->master, td_program_initial_params(t->program), t->param_elems * sizeof(float));
    }
    if (s == TD_OK)
        s = plan_owners(t, listed);
    td_free(ctx, grads);
    if (s == TD_OK && opts.accumulate_steps > 1)
        s = plan_accumulators(t);
    if (s != TD_OK) {
        td_trainer_destroy(t);
        return s;
    }
    td_program_set_hook(t->program, update_hook, t);
    td_program_set_phase_waits(t->program, opts.timing_waits);
    td_program_set_trace_name(t->program, "step");
    *out = t;
    return TD_OK;
}

td_status td_trainer_set_param(td_trainer *t, td_node param, const td_tensor *value)
{
    td_status s = td_trainer_check(t, "td_trainer_set_param");
    if (s != TD_OK)
        return s;
    s = td_program_set_param_for(t->program, param, value, "td_trainer_set_param");
    if (s != TD_OK)
        return s;
    const td_plan *plan = td_program_plan(t->program);
    void *data;
    td_tensor_data(value, &data);
    memcpy(t->master + plan->slots[param].offset, data, (size_t)td_shape_count(&plan->shapes[param]) * sizeof(float));
    return TD_OK;
}

td_status td_trainer_read_param(td_trainer *t, td_node param, uint32_t device, td_tensor *out)
{
    td_status s = td_trainer_check(t, "td_trainer_read_param");
    if (s != TD_OK)
        return s;
    return td_program_read_param_for(t->program, param, device, out, "td_trainer_read_param");
}

static td_status step_once(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss);

/* The balancer found a faster split: the program plans for it, with the
 * master parameters (what every device holds between steps). Accumulated
 * gradients stay valid -- each micro-batch's are weighted by its own
 * split. A failed re-plan is logged and retried at the next step. */
static void rebalance(td_trainer *t)
{
    td_balancer_apply(&t->balance);
    char split[256];
    size_t used = 0;
    for (uint32_t d = 0; d < t->mesh->count && used < sizeof split; d++)
        used += (size_t)snprintf(split + used, sizeof split - used, "%s%u", d ? " " : "", t->balance.rows[d]);
    td_status s = td_program_set_split(t->program, t->mesh->count, td_balancer_rows(&t->balance));
    if (s == TD_OK)
        s = td_program_replan(t->program, t->master);
    if (s != TD_OK) {
        char why[512];
        td_error_copy(t->ctx, why, sizeof why);
        td_log(t->ctx, TD_LOG_WARN, "re-planning for the split %s failed (tried again at the next step): %s", split, why);
        return;
    }
    td_log(t->ctx, TD_LOG_INFO, "step %llu: the batch split is now %s examples per device (measured speeds)",
           (unsigned long long)t->micro_steps, split);
}

static bool any_device_lost(td_trainer *t)
{
    for (uint32_t d = 0; d < t->mesh->count; d++)
        if (td_mesh_device_lost(t->mesh, d))
            return true;
    return false;
}

td_status td_trainer_step(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss)
{
    td_status live = td_trainer_check(t, "td_trainer_step");
    if (live != TD_OK)
        return live;
    td_context *ctx = t->ctx;
    if (t->stale && (live = trainer_refresh(t)) != TD_OK) {
        char why[1024];
        td_error_copy(ctx, why, sizeof why);
        return td_error_set(ctx, live, "td_trainer_step: the mesh lost devices and the trainer cannot plan for the %u "
                                       "left: %s", t->mesh->count, why);
    }
    t->lost_this_step = 0;
    for (;;) {
        td_status s = step_once(t, n_bindings, bindings, loss);
        if (s == TD_OK || t->options.on_device_loss != TD_ON_DEVICE_LOSS_CONTINUE || !any_device_lost(t))
            return s;
        /* Continue on the survivors: drop the lost devices, plan for the
         * rest and run the same global batch again from the master
         * parameters (the failed attempt changed nothing). */
        char cause[1024];
        td_error_copy(ctx, cause, sizeof cause);
        const uint32_t before = t->mesh->count;
        uint32_t dropped = 0;
        td_status d = td_mesh_drop_lost(t->mesh, &dropped);
        if (d == TD_OK && dropped == 0)
            return s;
        if (d == TD_OK)
            d = trainer_refresh(t);
        if (d != TD_OK) {
            char why[1024];
            td_error_copy(ctx, why, sizeof why);
            return td_error_set(ctx, d, "%s; continuing on the surviving devices failed: %s", cause, why);
        }
        t->devices_lost += dropped;
        t->lost_this_step += dropped;
        td_log(ctx, TD_LOG_WARN, "step %llu: %s; running it again on the %u devices left of %u",
               (unsigned long long)t->micro_steps + 1, cause, t->mesh->count, before);
    }
}

static td_status step_once(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss)
{
    /* The split the last call found, planned now rather than then: what
     * that call left (outputs, metrics, timing) stays readable until this
     * call. */
    if (t->rebalanced) {
        t->rebalanced = false;
        rebalance(t);
    }
    const bool last = t->micro + 1 >= t->options.accumulate_steps;
    t->has_outputs = false;
    t->updated = false;
    t->step_lr = td_schedule_eval(&t->schedule, t->steps);
    if (!isfinite(t->step_lr))
        /* Only an exponential decay with decay_rate > 1 and no end_value
         * grows; optax lets it, but a rate of inf would write NaN into
         * every parameter. */
        return td_error_set(t->ctx, TD_ERR_STATE,
                            "td_trainer_step: the schedule's learning rate at update %llu is %g, expected a finite rate "
                            "(cap a growing exponential decay with has_end_value)",
                            (unsigned long long)t->steps, (double)t->step_lr);
    t->count_inc = t->steps + 1;
    for (uint32_t r = 0; r < t->mesh->count; r++)
        t->owners[r].update_seconds = 0.0;
    struct timespec a, b;
    td_trace *tr = td_trace_of(t->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    td_program_set_step(t->program, t->micro_steps);
    /* A measured step waits for each device at the phase ends, so its
     * busy time is its own (free on CPU devices). */
    const bool measured = td_balancer_measures(&t->balance, t->micro_steps);
    if (measured)
        td_program_set_phase_waits(t->program, true);
    td_status s = td_program_run_for(t->program, n_bindings, bindings, "td_trainer_step");
    if (measured)
        td_program_set_phase_waits(t->program, t->options.timing_waits);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (tr)
        td_trace_span(tr, TD_TRACE_HOST, "host", "step", NULL, begin, td_trace_now(), 0);
    t->seconds += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    if (s != TD_OK) {
        /* Some owners may have finalized and some devices received new
         * values: put every replica back to the master. The step's own
         * error is what the caller gets; a device that cannot be restored
         * (lost) fails again on the next call. */
        char cause[512];
        td_error_copy(t->ctx, cause, sizeof cause);
        td_status r = td_program_write_all_params(t->program, t->master);
        const bool dropped = t->micro > 0;
        t->micro = 0;
        td_error_set(t->ctx, s, "%s%s%s", cause,
                     r == TD_OK ? " (parameters restored to their values before the step)"
                                : " (and restoring the parameters failed too)",
                     dropped ? "; the accumulated gradients were dropped and accumulation restarts" : "");
        return s;
    }
    t->micro_steps++;
    t->has_outputs = true;
    if (!last) {
        t->micro++;
    } else if (t->n_ranges) {
        td_trainer_swap_in_staged(t);
    }
    if (last) {
        t->micro = 0;
        t->updated = true;
        t->steps++;
    }
    const float mean_loss = td_trainer_combine_devices(t, 0);
    if (loss)
        *loss = mean_loss;
    if (measured) {
        for (uint32_t d = 0; d < t->mesh->count; d++)
            t->busy[d] = td_program_busy_seconds(t->program, d);
        t->rebalanced = td_balancer_record(&t->balance, t->micro_steps - 1, t->busy);
    }
    if (t->on_step)
        report_step(t, mean_loss, (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9);
    return TD_OK;
}

