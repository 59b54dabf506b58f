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

#include "tandem/train.h"
#include "td_across.h"
#include "td_platform.h"
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
        .struct_size = sizeof r,
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
    uint64_t a, b;
    td_trace *tr = td_trace_of(t->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    a = td_platform_now_ns();
    td_program_set_step(t->program, t->micro_steps);
    /* A measured step waits for each device at the phase ends, so its
     * busy time is its own (free on CPU devices). */
    const bool measured = td_balancer_measures(&t->balance, t->micro_steps);
    if (measured)
        td_program_set_phase_waits(t->program, true);
    td_status s = td_program_run_for(t->program, n_bindings, bindings, "td_trainer_step");
    if (measured)
        td_program_set_phase_waits(t->program, t->options.timing_waits);
    b = td_platform_now_ns();
    /* Every process's outcome, loss and metrics, before anything is made
     * current: all processes succeed or fail the step together. */
    s = td_trainer_agree_step(t, s);
    if (tr)
        td_trace_span(tr, TD_TRACE_HOST, "host", "step", NULL, begin, td_trace_now(), 0);
    t->seconds += (double)(b - a) * 1e-9;
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
    /* The report's seconds are the step's wall time as its caller sees
     * it, loss in hand (what a peer's timed step with its loss ready
     * costs); t->seconds keeps the program's run alone. */
    const uint64_t c = td_platform_now_ns();
    if (measured) {
        /* Every process records the same times, so all find the same split. */
        if (td_trainer_gather_busy(t) == TD_OK)
            t->rebalanced = td_balancer_record(&t->balance, t->micro_steps - 1, t->busy);
    }
    if (t->on_step)
        report_step(t, mean_loss, (double)(c - a) * 1e-9);
    return TD_OK;
}

static td_status replan_trainer(void *trainer)
{
    return td_trainer_refresh(trainer);
}

/* Across processes, the batch a step runs again on after the job lost
 * devices: the survivors' split gives every process other rows, which
 * other processes may hold (td_across_rebind). */
static td_status rebind_rows(td_trainer *t, uint32_t n, const td_binding *bindings, const uint64_t *old_rows,
                             td_rebound *out)
{
    uint64_t first = 0, count = 0;
    td_status s = td_trainer_process_rows(t, &first, &count);
    return s == TD_OK ? td_across_rebind(t->ctx, t->program, t->processes, n, bindings, old_rows, first, count, out)
                      : s;
}

td_status td_trainer_step(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss)
{
    td_status s = td_trainer_check(t, "td_trainer_step");
    if (s == TD_OK)
        s = td_trainer_check_planned(t, "td_trainer_step"); /* the mesh may have dropped devices since */
    if (s != TD_OK)
        return s;
    t->lost_this_step = 0;
    td_rebound rebound = {0};
    uint64_t *old_rows = NULL; /* across processes, on a loss: each process's first row, then the batch */
    for (;;) {
        s = step_once(t, n_bindings, bindings, loss);
        if (s == TD_OK) {
            td_rebound_free(t->ctx, &rebound);
            td_free(t->ctx, old_rows);
            return s;
        }
        if (t->processes > 1) {
            /* Where each process's rows of this batch are, before the split
             * changes (made only on a failure: a step allocates nothing). */
            if (!old_rows && !(old_rows = td_alloc(t->ctx, sizeof *old_rows * (t->processes + 1)))) {
                td_rebound_free(t->ctx, &rebound);
                return TD_OOM(t->ctx, "the processes' rows", sizeof *old_rows * (t->processes + 1));
            }
            td_status r = TD_OK;
            if (!t->balance.batch)
                r = td_error_set(t->ctx, TD_ERR_UNSUPPORTED,
                                 "td_trainer_step: the sharded inputs share no batch size, so the batch cannot be "
                                 "split again over the processes after a loss");
            else
                td_across_row_offsets(t->ring, t->balance.rows, t->balance.batch, old_rows);
            const uint32_t before = t->devices_lost;
            if (r != TD_OK || (s = td_trainer_continue_across(t, s)) != TD_OK ||
                (s = rebind_rows(t, n_bindings, bindings, old_rows, &rebound)) != TD_OK) {
                td_rebound_free(t->ctx, &rebound);
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
