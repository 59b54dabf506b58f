/* A trainer's life: create (the options and nodes checked, the graph's
 * gradient and the state updates added, the step program compiled, the
 * master copy and the owners planned), the parameters a caller sets or
 * reads by node, and the release the mesh, the context or destroy runs. */
#include <stddef.h>
#include <string.h>

#include "tandem/train.h"
#include "td_trainer_state.h"

_Static_assert(offsetof(td_trainer, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

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
    td_trainer_free_owners(t);
    td_trainer_free_accumulators(t);
    td_free(t->ctx, t->flat_state);
    td_free(t->ctx, t->report_metrics);
    td_free(t->ctx, t->report_timing);
    td_free(t->ctx, t->device_values);
    td_free(t->ctx, t->combined);
    td_free(t->ctx, t->process_offsets);
    td_free(t->ctx, t->gathered_state);
    td_free(t->ctx, t->busy);
    td_free(t->ctx, t->keep);
    td_balancer_free(&t->balance);
    td_free(t->ctx, t->metrics);
    td_free(t->ctx, t->ranges);
    td_free(t->ctx, t->bucket_bounds);
    td_free(t->ctx, t->bucket_tickets);
    td_free(t->ctx, t->params);
    td_free(t->ctx, t->master);
    td_free(t->ctx, t->pending);
}

void td_trainer_destroy(td_trainer *t)
{
    if (t)
        td_owned_destroy(&t->owned);
}

/* The global mesh, known since the mesh was made (its ring learned it),
 * and what is sized by it. */
static td_status plan_global_mesh(td_trainer *t, const td_trainer_options *opts)
{
    td_context *ctx = t->ctx;
    td_ring *ring = NULL;
    td_status s = td_mesh_ring(t->mesh, &ring);
    if (s != TD_OK)
        return s;
    t->global_n = td_ring_global_count(ring);
    t->first_position = td_ring_global_position(ring, 0);
    t->processes = td_ring_process_count(ring);
    const size_t values = (size_t)t->global_n * (opts->n_metrics + 3);
    t->device_values = td_alloc_zeroed(ctx, sizeof *t->device_values * (values + 1));
    t->combined = td_alloc_zeroed(ctx, sizeof *t->combined * ((size_t)opts->n_metrics + 1));
    t->busy = td_alloc_zeroed(ctx, sizeof *t->busy * t->global_n);
    t->process_offsets = td_alloc_zeroed(ctx, sizeof *t->process_offsets * ((size_t)td_ring_process_count(ring) + 1));
    t->keep = td_alloc_zeroed(ctx, sizeof *t->keep * t->global_n); /* per device of the whole job */
    if (!t->device_values || !t->combined || !t->busy || !t->process_offsets || !t->keep)
        return TD_OOM(ctx, "the trainer's per-device values", sizeof *t->device_values * values);
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
    td_status s = TD_OK;
    if (options) {
        size_t n; /* the first layout: the optimizer and its rate */
        s = td_options_bytes(ctx, "td_trainer_create", "td_trainer_options", options->struct_size,
                             offsetof(td_trainer_options, learning_rate) + sizeof opts.learning_rate, sizeof opts, &n);
        if (s != TD_OK)
            return s;
        memcpy(&opts, options, n);
        opts.struct_size = sizeof opts;
    }
    s = td_trainer_check_options(ctx, &opts);
    if (s == TD_OK)
        s = td_trainer_check_params(g, n_params, params);
    if (s == TD_OK)
        s = td_trainer_check_metrics(g, opts.n_metrics, opts.metrics);
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
    t->optimizer = td_trainer_optimizer_for(opts.optimizer);
    t->state_floats = t->optimizer->state_floats(&opts);
    t->schedule = opts.schedule;
    if (t->schedule.kind == TD_SCHEDULE_CONSTANT) {
        if (opts.learning_rate == 0.0f) /* checked: a known optimizer, whose default this is */
            t->options.learning_rate = td_optimizer_default_learning_rate(opts.optimizer);
        t->schedule.init_value = t->options.learning_rate;
    }
    t->n_params = n_params;
    t->n_ranges = n_ranges;
    t->n_metrics = opts.n_metrics;
    t->metrics = outputs; /* [loss, metrics...]; options.metrics may be the caller's memory */
    t->options.metrics = outputs + 1;
    td_context_own(ctx, &t->owned, "trainer", mesh, trainer_release);
    t->owned.before_shrink = td_trainer_before_shrink;
    t->n_owners = mesh->count;
    t->params = td_alloc(ctx, sizeof *t->params * (n_params + 1));
    t->report_metrics = td_alloc_zeroed(ctx, sizeof *t->report_metrics * ((size_t)opts.n_metrics + 1));
    t->report_timing = td_alloc_zeroed(ctx, sizeof *t->report_timing * mesh->count);
    s = t->params && t->report_metrics && t->report_timing
            ? TD_OK
            : TD_OOM(ctx, "trainer parameters and reports", sizeof *t->params * n_params);
    if (s == TD_OK)
        s = plan_global_mesh(t, &opts);
    if (s == TD_OK)
        s = td_balancer_init(&t->balance, ctx, &opts, g, t->global_n);
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
                               grads, true, (int32_t)opts.precision, &t->program);
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
        s = td_trainer_plan_owners(t, listed);
    td_free(ctx, grads);
    if (s == TD_OK && opts.accumulate_steps > 1)
        s = td_trainer_plan_accumulators(t);
    if (s != TD_OK) {
        td_trainer_destroy(t);
        return s;
    }
    if (s == TD_OK)
        s = td_trainer_plan_buckets(t);
    if (s != TD_OK) {
        td_trainer_destroy(t);
        return s;
    }
    td_program_set_hook(t->program, td_trainer_update_hook, t);
    td_program_set_phase_waits(t->program, opts.timing_waits);
    td_program_set_trace_name(t->program, "step");
    *out = t;
    return TD_OK;
}

td_status td_trainer_set_param(td_trainer *t, td_node param, const td_tensor *value)
{
    td_status s = td_trainer_check(t, "td_trainer_set_param");
    if (s == TD_OK)
        s = td_trainer_check_planned(t, "td_trainer_set_param"); /* the devices it writes are the mesh's now */
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
    if (s == TD_OK)
        s = td_trainer_check_planned(t, "td_trainer_read_param");
    if (s != TD_OK)
        return s;
    return td_program_read_param_for(t->program, param, device, out, "td_trainer_read_param");
}
