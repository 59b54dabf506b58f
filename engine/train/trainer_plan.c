/* How the trainer's work is laid over the mesh, and laid again when the
 * mesh changes: each ring rank's chunk of the parameter buffer with its
 * optimizer state (the owners), the per-device gradient accumulators, the
 * re-plan after the mesh dropped lost devices (the state leaves the old
 * ranks' chunks as one flat copy and is split over the survivors), and the
 * re-plan for a faster batch split the balancer found. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_across.h"
#include "td_trainer_state.h"

static int compare_ranges(const void *x, const void *y)
{
    const trainable_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
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

/* The sorted trainable ranges, and each rank's chunk with its state. */
td_status td_trainer_plan_owners(td_trainer *t, const td_node *listed)
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

void td_trainer_free_owners(td_trainer *t)
{
    for (uint32_t r = 0; t->owners && r < t->n_owners; r++)
        td_free(t->ctx, t->owners[r].block);
    td_free(t->ctx, t->owners);
    t->owners = NULL;
}

void td_trainer_free_accumulators(td_trainer *t)
{
    for (uint32_t d = 0; t->accum && d < t->n_owners; d++) {
        td_free(t->ctx, t->accum[d].sum);
        td_free(t->ctx, t->accum[d].scratch);
    }
    td_free(t->ctx, t->accum);
    t->accum = NULL;
}

/* td_owned.before_shrink: the mesh is about to drop lost devices, found
 * by this trainer's step or by another object on the mesh (an evaluator).
 * The lost devices are counted and their shares of the split go; the
 * optimizer state leaves the ranks' chunks for one flat copy, the
 * accumulated gradients are dropped (a failed step drops them anyway) and
 * the program lets go of the devices; td_trainer_refresh plans it all
 * again. A trainer already waiting to plan (a second drop before its next
 * use: two losses in one evaluation) has its state flat already: only the
 * count and the split follow. */
void td_trainer_before_shrink(td_owned *self)
{
    td_trainer *t = (td_trainer *)self;
    if (t->processes < 2) { /* across processes the agreement knows the whole job's losses */
        for (uint32_t d = 0; d < t->mesh->count; d++) {
            t->keep[d] = !td_mesh_device_lost(t->mesh, d);
            t->devices_lost += !t->keep[d];
        }
        td_balancer_shrink(&t->balance, t->keep);
    }
    t->rebalanced = false; /* a split found for the devices before */
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
    td_trainer_free_owners(t);
    td_trainer_free_accumulators(t);
    t->micro = 0;
    t->has_outputs = false;
    td_program_before_shrink(t->program);
    t->stale = true;
}

/* Across processes: the job's re-plans this trainer has not planned for
 * yet (its own step's, or an evaluation's on the same mesh), applied in
 * order: the split loses each one's lost devices. */
static void catch_up_with_job(td_trainer *t)
{
    const td_mesh *mesh = t->mesh;
    for (; t->job_generation < mesh->job_generation; t->job_generation++) {
        const bool *kept = mesh->job_kept[t->job_generation];
        const uint32_t count = mesh->job_kept_count[t->job_generation];
        if (count != t->balance.n)
            continue; /* not this trainer's job as it planned it: nothing to map (never across one mesh) */
        uint32_t lost = 0;
        for (uint32_t g = 0; g < count; g++)
            lost += !kept[g];
        td_balancer_shrink(&t->balance, kept);
        t->devices_lost += lost;
        t->global_n = count - lost;
    }
}

/* After the mesh dropped devices: the program planned for the survivors,
 * the chunks and state split over them, the master parameters on every
 * device. */
td_status td_trainer_refresh(td_trainer *t)
{
    if (!t->stale)
        return TD_OK;
    /* One process: its survivors; across processes td_trainer_continue_across
     * set the job's survivors' count. */
    if (t->processes > 1)
        catch_up_with_job(t);
    const uint32_t global = t->processes > 1 ? t->global_n : t->mesh->count;
    td_status s = td_program_set_split(t->program, global, td_balancer_rows(&t->balance));
    if (s == TD_OK)
        s = td_program_refresh(t->program);
    if (s != TD_OK)
        return s;
    t->ring = td_program_ring(t->program);
    t->global_n = td_ring_global_count(t->ring);
    t->first_position = td_ring_global_position(t->ring, 0);
    t->n_owners = t->mesh->count;
    if ((s = split_owners(t, t->flat_state)) == TD_OK && t->options.accumulate_steps > 1)
        s = td_trainer_plan_accumulators(t);
    if (s == TD_OK)
        s = td_trainer_plan_buckets(t); /* the ring may have changed */
    if (s == TD_OK)
        s = td_program_write_all_params(t->program, t->master);
    if (s != TD_OK) {
        td_trainer_free_owners(t);
        td_trainer_free_accumulators(t);
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
td_status td_trainer_plan_accumulators(td_trainer *t)
{
    const uint32_t n = t->mesh->count;
    const size_t bytes = (t->param_elems + 1) * sizeof(float);
    t->accum = td_alloc_zeroed(t->ctx, sizeof *t->accum * n);
    if (!t->accum)
        return TD_OOM(t->ctx, "gradient accumulators", sizeof *t->accum * n);
    for (uint32_t d = 0; d < n; d++) {
        td_mesh_device *md = &t->mesh->devices[d];
        td_buffer *grads = td_program_buffer(t->program, d, TD_BUF_GRADS);
        const bool in_place = td_mesh_device_host_view(md, grads) != NULL;
        t->accum[d].sum = td_alloc_zeroed(t->ctx, bytes);
        t->accum[d].scratch = in_place ? NULL : td_alloc_zeroed(t->ctx, bytes);
        if (!t->accum[d].sum || (!in_place && !t->accum[d].scratch))
            return TD_OOM(t->ctx, "a gradient accumulator", bytes);
    }
    return TD_OK;
}

/* The balancer found a faster split: the program plans for it, with the
 * master parameters (what every device holds between steps). Accumulated
 * gradients stay valid -- each micro-batch's are weighted by its own
 * split. A failed re-plan is logged and retried at the next step. */
void td_trainer_apply_split(td_trainer *t)
{
    td_balancer_apply(&t->balance);
    char split[256];
    size_t used = 0;
    for (uint32_t d = 0; d < t->global_n && used < sizeof split; d++)
        used += (size_t)snprintf(split + used, sizeof split - used, "%s%u", d ? " " : "", t->balance.rows[d]);
    td_status s = td_program_set_split(t->program, t->global_n, td_balancer_rows(&t->balance));
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

td_status td_trainer_continue_across(td_trainer *t, td_status failure)
{
    if (t->options.on_device_loss != TD_ON_DEVICE_LOSS_CONTINUE || !t->agreed_loss)
        return failure;
    td_context *ctx = t->ctx;
    char cause[1024];
    td_error_copy(ctx, cause, sizeof cause);
    td_status s = td_across_continue(ctx, t->mesh, t->ring, t->keep, failure);
    if (s == TD_OK)
        s = td_trainer_refresh(t);
    if (s != TD_OK && s != failure) {
        char why[1024];
        td_error_copy(ctx, why, sizeof why);
        return td_error_set(ctx, s, "%s; continuing on the surviving devices of the job failed: %s", cause, why);
    }
    return s;
}

