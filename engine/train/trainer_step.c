/* The trainer's step: one global batch through the step program, whose
 * hook runs the fused all-reduce + optimizer update (trainer_update.c).
 *
 * A step is all or nothing. New values -- parameters and optimizer state --
 * go to second host copies, which become current only when every device
 * finished the step; if any device fails, every device's parameters are
 * rewritten from the master, so a failed step leaves no replica
 * half-updated and the state as it was. With on_device_loss = continue, a
 * step that failed because a device was lost drops the lost devices,
 * re-plans for the survivors (survivors.c, trainer_plan.c) and runs the
 * same batch again. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tandem/train.h"
#include "td_survivors.h"
#include "td_trace.h"
#include "td_trainer_state.h"

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
        .split = t->balance.rows ? t->balance.rows + t->first_position : NULL,
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

static td_status step_once(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss)
{
    /* The split the last call found, planned now rather than then: what
     * that call left (outputs, metrics, timing) stays readable until this
     * call. */
    if (t->rebalanced) {
        t->rebalanced = false;
        td_trainer_apply_split(t);
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
    /* Every process's outcome, loss and metrics, before anything is made
     * current: all processes succeed or fail the step together. */
    s = td_trainer_agree_step(t, s);
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
        /* Every process records the same times, so all find the same split. */
        if (td_trainer_gather_busy(t) == TD_OK)
            t->rebalanced = td_balancer_record(&t->balance, t->micro_steps - 1, t->busy_all);
    }
    if (t->on_step)
        report_step(t, mean_loss, (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9);
    return TD_OK;
}

static td_status replan_trainer(void *trainer)
{
    return td_trainer_refresh(trainer);
}

/* Across processes, the batch a step runs again on after the job lost
 * devices: the survivors' split gives every process other rows, which
 * other processes may hold. So every sharded input's whole batch is
 * gathered between processes -- only on a loss -- and each process binds
 * its new rows; the caller's tensors are left alone. */
typedef struct rebound {
    td_binding *bindings;
    td_tensor **tensors; /* the new rows' tensors, NULL where the caller's binding stands */
    uint32_t n;
} rebound;

static void free_rebound(td_trainer *t, rebound *r)
{
    for (uint32_t i = 0; r->tensors && i < r->n; i++)
        td_tensor_destroy(r->tensors[i]);
    td_free(t->ctx, r->tensors);
    td_free(t->ctx, r->bindings);
    *r = (rebound){0};
}

/* offsets[q] = process q's first row of the batch under the split in
 * force, offsets[P] = the batch. */
static td_status process_row_offsets(td_trainer *t, uint64_t *offsets)
{
    if (!t->balance.batch)
        return td_error_set(t->ctx, TD_ERR_UNSUPPORTED,
                            "td_trainer_step: the sharded inputs share no batch size, so the batch cannot be split "
                            "again over the processes after a loss");
    for (uint32_t q = 0; q < t->processes; q++) {
        uint32_t first = 0;
        td_ring_process_devices(t->ring, q, &first);
        offsets[q] = 0;
        for (uint32_t d = 0; d < first; d++)
            offsets[q] += t->balance.rows[d];
    }
    offsets[t->processes] = t->balance.batch;
    return TD_OK;
}

static td_status rebind_rows(td_trainer *t, uint32_t n, const td_binding *bindings, const uint64_t *old_rows,
                             rebound *out)
{
    td_context *ctx = t->ctx;
    const uint32_t me = td_procs_rank(td_procs_of(ctx)), P = t->processes;
    uint64_t first = 0, count = 0;
    td_status s = td_trainer_process_rows(t, &first, &count);
    rebound next = {td_alloc_zeroed(ctx, sizeof *next.bindings * (n + 1)),
                    td_alloc_zeroed(ctx, sizeof *next.tensors * (n + 1)), n};
    size_t *offsets = td_alloc(ctx, sizeof *offsets * (P + 1));
    if (s == TD_OK && (!next.bindings || !next.tensors || !offsets))
        s = TD_OOM(ctx, "the batch bound again after a loss", sizeof *next.bindings * n);
    for (uint32_t i = 0; i < n && s == TD_OK; i++) {
        next.bindings[i] = bindings[i];
        const td_node_def *nd = td_program_node(t->program, bindings[i].node);
        if (!nd || nd->placement != TD_SHARDED)
            continue;
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        size_t elems, unit;
        td_dtype dtype;
        void *mine, *fresh;
        td_tensor_shape(bindings[i].value, &rank, dims);
        td_tensor_count(bindings[i].value, &elems);
        td_tensor_dtype(bindings[i].value, &dtype);
        td_dtype_size(dtype, &unit);
        td_tensor_data(bindings[i].value, &mine);
        const uint64_t held = old_rows[me + 1] - old_rows[me];
        if (rank == 0 || (uint64_t)dims[0] != held) {
            s = td_error_set(ctx, TD_ERR_SHAPE_MISMATCH,
                             "td_trainer_step: input '%s' has %lld rows, expected this process's %llu", nd->name,
                             (long long)(rank ? dims[0] : 0), (unsigned long long)held);
            break;
        }
        const size_t row_bytes = held ? elems * unit / held : 0;
        char *whole = td_alloc(ctx, (size_t)old_rows[P] * row_bytes + 1);
        if (!whole) {
            s = TD_OOM(ctx, "a batch gathered after a loss", (size_t)old_rows[P] * row_bytes);
            break;
        }
        memcpy(whole + old_rows[me] * row_bytes, mine, held * row_bytes);
        for (uint32_t q = 0; q <= P; q++)
            offsets[q] = (size_t)old_rows[q] * row_bytes;
        s = td_procs_allgather_bytes(td_procs_of(ctx), whole, offsets);
        dims[0] = (int64_t)count;
        if (s == TD_OK && (s = td_tensor_create(ctx, dtype, rank, dims, &next.tensors[i])) == TD_OK) {
            td_tensor_data(next.tensors[i], &fresh);
            memcpy(fresh, whole + first * row_bytes, count * row_bytes);
            next.bindings[i].value = next.tensors[i];
        }
        td_free(ctx, whole);
    }
    td_free(ctx, offsets);
    free_rebound(t, out); /* the previous re-run's, if this is the second loss of the step */
    if (s != TD_OK) {
        free_rebound(t, &next);
        return s;
    }
    *out = next;
    return TD_OK;
}

td_status td_trainer_step(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss)
{
    td_status s = td_trainer_check(t, "td_trainer_step");
    if (s == TD_OK)
        s = td_trainer_check_planned(t, "td_trainer_step"); /* the mesh may have dropped devices since */
    if (s != TD_OK)
        return s;
    t->lost_this_step = 0;
    rebound rebound = {0};
    uint64_t *old_rows = NULL; /* across processes, on a loss: each process's first row, then the batch */
    for (;;) {
        s = step_once(t, n_bindings, bindings, loss);
        if (s == TD_OK) {
            free_rebound(t, &rebound);
            td_free(t->ctx, old_rows);
            return s;
        }
        if (t->processes > 1) {
            /* Where each process's rows of this batch are, before the split
             * changes (made only on a failure: a step allocates nothing). */
            if (!old_rows && !(old_rows = td_alloc(t->ctx, sizeof *old_rows * (t->processes + 1)))) {
                free_rebound(t, &rebound);
                return TD_OOM(t->ctx, "the processes' rows", sizeof *old_rows * (t->processes + 1));
            }
            td_status r = process_row_offsets(t, old_rows);
            const uint32_t before = t->devices_lost;
            if (r != TD_OK || (s = td_trainer_continue_across(t, s)) != TD_OK ||
                (s = rebind_rows(t, n_bindings, bindings, old_rows, &rebound)) != TD_OK) {
                free_rebound(t, &rebound);
                td_free(t->ctx, old_rows);
                return r != TD_OK ? r : s;
            }
            bindings = rebound.bindings;
            t->lost_this_step += t->devices_lost - before;
            continue;
        }
        /* Continue on the survivors: drop the lost devices, plan for the
         * rest and run the same global batch again from the master
         * parameters (the failed attempt changed nothing). */
        char what[32];
        snprintf(what, sizeof what, "step %llu", (unsigned long long)t->micro_steps + 1);
        uint32_t dropped;
        s = td_continue_on_survivors(t->mesh, t->options.on_device_loss, s, what, replan_trainer, t, &dropped);
        if (s != TD_OK)
            return s;
        t->lost_this_step += dropped;
    }
}
