/* What callers and checkpoints read of a trainer -- replicas, memory,
 * timing, metrics, progress, the batch split and the devices' measured
 * speeds -- and the restore path that writes a checkpoint's values back;
 * with the checks every call on a trainer starts with. All of it reads or
 * swaps what a step left; none of it runs a step. */
#include <stddef.h>
#include <string.h>

#include "tandem/train.h"
#include "td_across.h"
#include "td_trainer_state.h"

/* Calls that need the owners' chunks or the devices' parameters need the
 * trainer planned for the mesh as it is. After the mesh dropped devices --
 * in a step of this trainer, or in a run of another object on it, such as
 * an evaluator -- the first such call plans again. That re-plan moves the
 * parameters and the optimizer state onto the survivors without changing
 * a value a caller can read, so calls on a const trainer may make it (no
 * trainer is ever a const object: every one is allocated by create). */
td_status td_trainer_check_planned(const td_trainer *t, const char *fn)
{
    if (!t->stale)
        return TD_OK;
    td_trainer *planned = (td_trainer *)t;
    td_status s = td_trainer_refresh(planned);
    if (s == TD_OK)
        return TD_OK;
    char why[1024];
    td_error_copy(t->ctx, why, sizeof why);
    return td_error_set(t->ctx, TD_ERR_STATE,
                        "%s: the mesh dropped lost devices and the trainer has not planned for the %u left: %s", fn,
                        t->mesh->count, why);
}

/* The first check of every call on a trainer: not NULL, not released. */
td_status td_trainer_check(const td_trainer *t, const char *fn)
{
    return t ? td_owned_check_live(&t->owned, fn) : TD_ERR_INVALID_ARGUMENT;
}

void td_trainer_fill_timing(const td_trainer *t, uint32_t device, td_step_timing *timing)
{
    double phase[TD_PHASE_COUNT];
    td_program_phase_seconds(t->program, device, phase);
    const double update = t->owners[device].update_seconds;
    /* Buckets reduced during backward (td_trainer_options.
     * overlap_bucket_bytes) ran inside the compute phase: theirs is
     * all-reduce and update time, as the hook's is. */
    const double buckets = td_program_bucket_seconds(t->program, device);
    const double compute = phase[TD_PHASE_COMPUTE] - buckets, reduce = phase[TD_PHASE_HOOK] + buckets;
    timing->upload = phase[TD_PHASE_UPLOAD];
    timing->compute = compute > 0.0 ? compute : 0.0;
    timing->update = update;
    timing->allreduce = reduce > update ? reduce - update : 0.0;
    timing->download = phase[TD_PHASE_DOWNLOAD];
}

/* Output `index` (0 the loss, then the metrics) over the devices: each
 * device's value is a mean over its rows, so the global batch's is their
 * mean weighted by the devices' shares, sum_d w_d * v_d / N
 * (td_graph_shard_weight; every w_d is exactly 1 on an even split, which
 * leaves the plain mean). Fixed order, device 0 first. */
float td_trainer_combine_devices(const td_trainer *t, uint32_t index)
{
    return t->combined[index];
}

/* The combination of every device's row of the last step, in global
 * device order: sum_d w_d v_d / N. */
static void combine_rows(td_trainer *t, uint32_t per_device)
{
    const uint32_t values = 1 + t->n_metrics, n = t->global_n;
    for (uint32_t i = 0; i < values; i++) {
        float sum = 0.0f;
        for (uint32_t d = 0; d < n; d++)
            sum += t->device_values[(size_t)d * per_device + 2 + i];
        t->combined[i] = sum / (float)n;
    }
}

td_status td_trainer_agree_step(td_trainer *t, td_status local)
{
    const uint32_t values = 1 + t->n_metrics, per = values + 2;
    for (uint32_t d = 0; d < t->mesh->count; d++) {
        float *row = t->device_values + (size_t)(t->first_position + d) * per;
        const float w = local == TD_OK ? td_program_shard_weight(t->program, d) : 0.0f;
        for (uint32_t i = 0; i < values; i++)
            row[2 + i] = local == TD_OK ? w * td_program_output_host(t->program, i, d)[0] : 0.0f;
    }
    if (t->processes < 2) {
        if (local == TD_OK)
            combine_rows(t, per);
        return local;
    }
    bool any_lost = false;
    td_status s = td_across_agree(t->ctx, t->mesh, t->ring, local, t->device_values, per, t->process_offsets, t->keep,
                                  &any_lost);
    t->agreed_loss = s != TD_OK && any_lost;
    if (s == TD_OK)
        combine_rows(t, per);
    return s;
}

td_status td_trainer_gather_busy(td_trainer *t)
{
    for (uint32_t d = 0; d < t->mesh->count; d++)
        t->busy[t->first_position + d] = td_program_busy_seconds(t->program, d);
    if (t->processes < 2)
        return TD_OK;
    for (uint32_t q = 0; q <= t->processes; q++) {
        uint32_t first = t->global_n;
        if (q < t->processes)
            td_ring_process_devices(t->ring, q, &first);
        t->process_offsets[q] = (size_t)first * sizeof *t->busy;
    }
    return td_procs_allgather_bytes(td_procs_of(t->ctx), t->busy, t->process_offsets);
}

void td_trainer_fill_metrics(const td_trainer *t, float *values)
{
    for (uint32_t i = 0; i < t->n_metrics; i++)
        values[i] = td_trainer_combine_devices(t, i + 1);
}

/* The checks of a call that fills one value per device of the trainer. */
static td_status check_per_device(const td_trainer *t, const char *fn, uint32_t capacity, const void *values,
                                  const uint32_t *n)
{
    td_status s = td_trainer_check(t, fn);
    if (s != TD_OK)
        return s;
    if (!values || !n)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "%s: the values or n is NULL", fn);
    if (capacity < t->mesh->count)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "%s: capacity %u is less than the trainer's %u devices", fn,
                            capacity, t->mesh->count);
    return TD_OK;
}

td_status td_trainer_split(const td_trainer *t, uint32_t capacity, uint32_t *rows, uint32_t *n)
{
    td_status s = check_per_device(t, "td_trainer_split", capacity, rows, n);
    if (s != TD_OK)
        return s;
    *n = t->mesh->count;
    for (uint32_t d = 0; d < t->mesh->count; d++)
        rows[d] = t->balance.batch ? t->balance.rows[t->first_position + d] : 0;
    return TD_OK;
}

td_status td_trainer_process_rows(const td_trainer *t, uint64_t *first, uint64_t *count)
{
    td_status s = td_trainer_check(t, "td_trainer_process_rows");
    if (s != TD_OK)
        return s;
    if (!first || !count)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_process_rows: first or count is NULL");
    /* After an evaluation on the mesh went on without lost devices, the
     * trainer plans for the job's survivors first: its rows follow. */
    if ((s = td_trainer_check_planned(t, "td_trainer_process_rows")) != TD_OK)
        return s;
    /* A split the last step found is the next step's. */
    const uint32_t *rows = t->rebalanced ? t->balance.candidate : t->balance.rows;
    return td_rows_of_process(t->ctx, "td_trainer_process_rows", t->balance.batch, rows, t->first_position,
                              t->mesh->count, t->processes, first, count);
}

td_status td_trainer_device_speeds(const td_trainer *t, uint32_t capacity, double *speeds, uint32_t *n)
{
    td_status s = check_per_device(t, "td_trainer_device_speeds", capacity, speeds, n);
    if (s != TD_OK)
        return s;
    const bool measured = t->balance.mode == TD_BALANCE_AUTO && t->balance.measured_once;
    *n = t->mesh->count;
    for (uint32_t d = 0; d < t->mesh->count; d++)
        speeds[d] = measured ? t->balance.speed[t->first_position + d] : 0.0;
    return TD_OK;
}

td_status td_trainer_rebalance(td_trainer *t)
{
    td_status s = td_trainer_check(t, "td_trainer_rebalance");
    if (s != TD_OK)
        return s;
    if (t->balance.mode != TD_BALANCE_AUTO)
        return td_error_set(t->ctx, TD_ERR_STATE, "td_trainer_rebalance: the trainer's balance is %s, not auto",
                            t->balance.mode == TD_BALANCE_EVEN ? "even" : "explicit");
    td_balancer_request(&t->balance, t->micro_steps);
    return TD_OK;
}

static uint64_t hash_bytes(uint64_t h, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

td_status td_trainer_replicas_identical(td_trainer *t, bool *identical)
{
    td_status live = td_trainer_check(t, "td_trainer_replicas_identical");
    if (live == TD_OK)
        live = td_trainer_check_planned(t, "td_trainer_replicas_identical");
    if (live != TD_OK)
        return live;
    if (!identical)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_replicas_identical: identical is NULL");
    *identical = true;
    uint64_t hash = 1469598103934665603ull; /* FNV-1a of device 0's parameters */
    const td_plan *plan = td_program_plan(t->program);
    td_status s = TD_OK;
    for (uint32_t i = 0; i < t->n_params && s == TD_OK; i++) {
        const td_shape *sh = &plan->shapes[t->params[i]];
        td_tensor *ref = NULL, *other = NULL;
        s = td_tensor_create(t->ctx, TD_F32, sh->rank, sh->dims, &ref);
        if (s == TD_OK)
            s = td_tensor_create(t->ctx, TD_F32, sh->rank, sh->dims, &other);
        if (s == TD_OK)
            s = td_program_read_param(t->program, t->params[i], 0, ref);
        for (uint32_t d = 1; d < t->mesh->count && s == TD_OK && *identical; d++) {
            s = td_program_read_param(t->program, t->params[i], d, other);
            void *x, *y;
            td_tensor_data(ref, &x);
            td_tensor_data(other, &y);
            if (s == TD_OK && memcmp(x, y, (size_t)td_shape_count(sh) * sizeof(float)) != 0)
                *identical = false;
        }
        if (s == TD_OK) {
            void *x;
            td_tensor_data(ref, &x);
            hash = hash_bytes(hash, x, (size_t)td_shape_count(sh) * sizeof(float));
        }
        td_tensor_destroy(ref);
        td_tensor_destroy(other);
    }
    /* Across processes: device 0's parameters hashed, the hashes compared. */
    td_procs *procs = td_procs_of(t->ctx);
    if (s == TD_OK && t->processes > 1) {
        const uint32_t P = td_procs_count(procs);
        uint64_t *all = td_alloc(t->ctx, sizeof *all * P);
        if (!all)
            return TD_OOM(t->ctx, "the processes' parameter hashes", sizeof *all * P);
        const uint64_t mine = *identical ? hash : 0; /* a process whose own devices differ votes no */
        s = td_procs_allgather(procs, &mine, all, sizeof mine, NULL, NULL);
        for (uint32_t q = 0; q < P && s == TD_OK; q++)
            if (all[q] != all[0] || all[q] == 0)
                *identical = false;
        td_free(t->ctx, all);
    }
    return s;
}

td_status td_trainer_memory(const td_trainer *t, uint32_t device, size_t *state_bytes)
{
    td_status live = td_trainer_check(t, "td_trainer_memory");
    if (live != TD_OK)
        return live;
    if (!state_bytes)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_memory: state_bytes is NULL");
    if ((live = td_trainer_check_planned(t, "td_trainer_memory")) != TD_OK)
        return live;
    if (device >= t->mesh->count)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_memory: device %u is not in the mesh (%u devices)",
                            device, t->mesh->count);
    const trainer_owner *ow = &t->owners[device];
    *state_bytes = 2 * (size_t)t->state_floats * (ow->hi - ow->lo) * sizeof(float);
    return TD_OK;
}

td_status td_trainer_memory_report(const td_trainer *t, uint32_t device, td_memory_report *report)
{
    const char *fn = "td_trainer_memory_report";
    td_status live = td_trainer_check(t, fn);
    if (live != TD_OK)
        return live;
    if (!report)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "%s: report is NULL", fn);
    /* Checked before the trainer's state: a bad size is the caller's whatever the state. */
    const size_t first_layout = offsetof(td_memory_report, parameters) + sizeof(uint64_t);
    size_t size;
    if ((live = td_options_bytes(t->ctx, fn, "td_memory_report", report->struct_size, first_layout, sizeof *report,
                                 &size)) != TD_OK)
        return live;
    if ((live = td_trainer_check_planned(t, fn)) != TD_OK)
        return live;
    if (device >= t->mesh->count)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "%s: device %u is not in the mesh (%u devices)", fn, device,
                            t->mesh->count);
    const td_plan *plan = td_program_plan_of(t->program, device);
    const trainer_owner *ow = &t->owners[device];
    td_memory_report r = {0};
    r.struct_size = sizeof r;
    r.parameters = plan->size[TD_BUF_PARAMS] * sizeof(float);
    r.gradients = plan->size[TD_BUF_GRADS] * sizeof(float);
    r.activations = plan->size[TD_BUF_ARENA] * sizeof(float);
    r.step_words = plan->size[TD_BUF_STEP] * sizeof(uint32_t);
    r.optimizer_state = 2 * (uint64_t)t->state_floats * (ow->hi - ow->lo) * sizeof(float);
    if (t->accum)
        r.accumulators = (uint64_t)t->param_elems * sizeof(float) * (t->accum[device].scratch ? 2 : 1);
    return td_struct_write(t->ctx, fn, "td_memory_report", report, &r, first_layout, sizeof r);
}

td_status td_memory_report_init(td_memory_report *report)
{
    if (!report)
        return TD_ERR_INVALID_ARGUMENT;
    memset(report, 0, sizeof *report);
    report->struct_size = sizeof *report;
    return TD_OK;
}

td_status td_trainer_timing(const td_trainer *t, uint32_t device, td_step_timing *timing)
{
    td_status live = td_trainer_check(t, "td_trainer_timing");
    if (live != TD_OK)
        return live;
    if (!timing)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_timing: timing is NULL");
    if (device >= t->mesh->count)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_timing: device %u is not in the mesh (%u devices)",
                            device, t->mesh->count);
    if (!t->has_outputs)
        return td_error_set(t->ctx, TD_ERR_STATE, "td_trainer_timing: no successful td_trainer_step since the last failure "
                                                  "or restore");
    td_trainer_fill_timing(t, device, timing);
    return TD_OK;
}

td_status td_trainer_on_step(td_trainer *t, td_step_fn fn, void *user)
{
    td_status live = td_trainer_check(t, "td_trainer_on_step");
    if (live != TD_OK)
        return live;
    t->on_step = fn;
    t->on_step_user = user;
    return TD_OK;
}

td_status td_trainer_stats(const td_trainer *t, double *step_seconds, uint64_t *steps)
{
    td_status live = td_trainer_check(t, "td_trainer_stats");
    if (live != TD_OK)
        return live;
    if (step_seconds)
        *step_seconds = t->seconds;
    if (steps)
        *steps = t->steps;
    return TD_OK;
}

td_status td_trainer_metrics(const td_trainer *t, uint32_t capacity, float *values)
{
    td_status live = td_trainer_check(t, "td_trainer_metrics");
    if (live != TD_OK)
        return live;
    if (capacity < t->n_metrics || (t->n_metrics && !values))
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_metrics: capacity %u (values %s), expected room for the trainer's %u metrics",
                            capacity, values ? "given" : "NULL", t->n_metrics);
    if (!t->has_outputs)
        return td_error_set(t->ctx, TD_ERR_STATE,
                            "td_trainer_metrics: the last td_trainer_step did not succeed (or none ran), expected one that did");
    td_trainer_fill_metrics(t, values);
    return TD_OK;
}

td_status td_trainer_progress(const td_trainer *t, td_train_progress *out)
{
    td_status live = td_trainer_check(t, "td_trainer_progress");
    if (live != TD_OK)
        return live;
    if (!out)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_progress: out is NULL");
    const td_train_progress full = {
        .struct_size = sizeof full,
        .micro_steps = t->micro_steps,
        .updates = t->steps,
        .allreduces = t->allreduces,
        .accumulated = t->micro,
        .updated = t->updated,
        .devices = t->mesh->count,
        .devices_lost = t->devices_lost,
    };
    return TD_STRUCT_WRITE(t->ctx, "td_trainer_progress", td_train_progress, out, &full);
}

td_status td_train_progress_init(td_train_progress *progress)
{
    if (!progress)
        return TD_ERR_INVALID_ARGUMENT;
    memset(progress, 0, sizeof *progress);
    progress->struct_size = sizeof *progress;
    return TD_OK;
}

const float *td_trainer_master(const td_trainer *t)
{
    return t->master;
}

const td_program *td_trainer_program(const td_trainer *t)
{
    return t->program;
}

td_status td_trainer_check_live(const td_trainer *t, const char *fn)
{
    td_status s = td_owned_check_live(&t->owned, fn);
    return s == TD_OK ? td_trainer_check_planned(t, fn) : s;
}

void td_trainer_view_get(const td_trainer *t, td_trainer_view *out)
{
    out->ctx = t->ctx;
    out->program = t->program;
    out->optimizer = t->optimizer;
    out->state_floats = t->n_params ? t->state_floats : 0;
    out->n_params = t->n_params;
    out->params = t->params;
    out->n_devices = t->global_n;
    out->updates = t->steps;
    out->micro_steps = t->micro_steps;
    out->allreduces = t->allreduces;
    out->accumulated = t->micro;
    out->processes = t->processes;
    out->process = out->processes > 1 ? td_procs_rank(td_procs_of(t->ctx)) : 0;
}

td_status td_trainer_gather_opt_state(td_trainer *t)
{
    const uint32_t P = t->processes;
    const size_t floats = (size_t)t->state_floats * t->param_elems;
    if (P < 2 || floats == 0 || !t->n_params)
        return TD_OK;
    if (!t->gathered_state && !(t->gathered_state = td_alloc(t->ctx, floats * sizeof(float))))
        return TD_OOM(t->ctx, "the optimizer state gathered from every process", floats * sizeof(float));
    /* The local owners' parts tile this process's block in rank order, so
     * each slot's block is one contiguous run; one gather per slot. */
    for (uint32_t k = 0; k < t->state_floats; k++) {
        float *slot = t->gathered_state + (size_t)k * t->param_elems;
        for (uint32_t r = 0; r < t->mesh->count; r++) {
            const trainer_owner *ow = &t->owners[r];
            const size_t chunk = ow->hi - ow->lo;
            if (chunk)
                memcpy(slot + ow->lo, ow->state + (size_t)k * chunk, chunk * sizeof(float));
        }
        for (uint32_t q = 0; q <= P; q++)
            t->process_offsets[q] = (size_t)(((unsigned __int128)t->param_elems * q) / P);
        td_status s = td_procs_allgather_blocks(td_procs_of(t->ctx), slot, t->process_offsets, NULL, NULL);
        if (s != TD_OK)
            return s;
    }
    return TD_OK;
}

float *td_trainer_opt_state_run(td_trainer *t, uint32_t slot, size_t at, bool staged, size_t *run)
{
    if (t->processes > 1) {
        if (!staged && t->gathered_state) { /* a save: the whole state, gathered */
            *run = t->param_elems - at;
            return t->gathered_state + (size_t)slot * t->param_elems + at;
        }
        /* A restore fills this process's owners only: the rest is skipped. */
        size_t next = t->param_elems;
        for (uint32_t r = 0; r < t->mesh->count; r++) {
            const trainer_owner *ow = &t->owners[r];
            if (at >= ow->lo && at < ow->hi) {
                *run = ow->hi - at;
                return (staged ? ow->next_state : ow->state) + (size_t)slot * (ow->hi - ow->lo) + (at - ow->lo);
            }
            if (ow->lo > at && ow->lo < next)
                next = ow->lo;
        }
        *run = next - at;
        return NULL;
    }
    /* The chunks partition the buffer; a linear walk over the ranks is
     * nothing next to the copying a caller does with each run. */
    for (uint32_t r = 0; r < t->mesh->count; r++) {
        const trainer_owner *ow = &t->owners[r];
        if (at < ow->lo || at >= ow->hi)
            continue;
        const size_t chunk = ow->hi - ow->lo;
        *run = ow->hi - at;
        return (staged ? ow->next_state : ow->state) + (size_t)slot * chunk + (at - ow->lo);
    }
    *run = 0;
    return NULL;
}

float *td_trainer_stage_params(td_trainer *t)
{
    memcpy(t->pending, t->master, t->param_elems * sizeof(float));
    return t->pending;
}

td_status td_trainer_commit_restore(td_trainer *t, uint64_t updates, uint64_t micro_steps, uint64_t allreduces)
{
    td_trainer_swap_in_staged(t); /* as a successful step does */
    t->steps = updates;
    t->micro_steps = micro_steps;
    t->allreduces = allreduces;
    t->micro = 0;
    t->has_outputs = false;
    t->updated = false;
    return td_program_write_all_params(t->program, t->master);
}

td_status td_trainer_commit_params(td_trainer *t)
{
    float *swap = t->master;
    t->master = t->pending;
    t->pending = swap;
    t->micro = 0;
    t->has_outputs = false;
    t->updated = false;
    return td_program_write_all_params(t->program, t->master);
}
