/* The data-parallel trainer: pmap(value_and_grad) with the gradient
 * all-reduce fused with the optimizer. After the ring's reduce-scatter, the
 * owner of each chunk computes that chunk's new parameters once, from a host
 * master copy, and the all-gather hands the new values to every device.
 * Every parameter is thus computed exactly once, in host code, and copied:
 * the replicas are bitwise identical on any mix of devices by construction.
 *
 * A step is all or nothing. New values go to a second host copy, which
 * becomes the master only when every device finished the step; if any
 * device fails, every device's parameters are rewritten from the master, so
 * a failed step leaves no replica half-updated. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tandem/train.h"
#include "td_program_internal.h"
#include "td_ring.h"

struct td_trainer {
    td_owned owned;
    td_context *ctx;
    td_mesh *mesh;
    td_program *program;
    td_trainer_options options;
    uint32_t n_params;
    td_node *params;
    float *master;  /* parameters, laid out as the device parameter buffer */
    float *pending; /* the step's new parameters; swapped in on success */
    size_t param_elems;
    double seconds;
    uint64_t steps;
};

td_status td_trainer_options_init(td_trainer_options *o)
{
    if (!o)
        return TD_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->optimizer = TD_OPTIMIZER_SGD;
    o->learning_rate = 0.01f;
    return TD_OK;
}

/* SGD on the owner's chunk: data holds the gradient summed over devices. */
static void sgd_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    td_trainer *t = user;
    (void)rank;
    const float lr = t->options.learning_rate;
    const float *p = t->master + offset;
    float *next = t->pending + offset;
    td_ring_divide(data, count, t->mesh->count); /* the mean gradient */
    for (size_t i = 0; i < count; i++) {
        float g = data[i];
        float step = lr * g;
        next[i] = p[i] - step;
        data[i] = next[i];
    }
}

static td_status update_hook(void *user, uint32_t pos)
{
    td_trainer *t = user;
    td_buffer *grads = td_program_buffer(t->program, pos, TD_BUF_GRADS);
    td_buffer *params = td_program_buffer(t->program, pos, TD_BUF_PARAMS);
    return td_ring_allreduce_consume(t->mesh->ring, pos, grads, 0, params, 0, t->param_elems, sgd_finalize, t);
}

static void trainer_destroy_owned(td_owned *self)
{
    td_trainer_destroy((td_trainer *)self);
}

void td_trainer_destroy(td_trainer *t)
{
    if (!t)
        return;
    td_context_disown(t->ctx, &t->owned);
    td_program_destroy(t->program);
    td_free(t->ctx, t->params);
    td_free(t->ctx, t->master);
    td_free(t->ctx, t->pending);
    td_free(t->ctx, t);
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
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    if (options) {
        size_t n = options->struct_size ? options->struct_size : sizeof opts;
        memcpy(&opts, options, n < sizeof opts ? n : sizeof opts);
    }
    if (opts.optimizer != TD_OPTIMIZER_SGD)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: optimizer %d is not a td_optimizer_kind",
                            (int)opts.optimizer);
    if (!(opts.learning_rate > 0.0f) || opts.learning_rate != opts.learning_rate)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_create: learning rate %g must be > 0",
                            (double)opts.learning_rate);

    td_trainer *t = td_alloc_zeroed(ctx, sizeof *t);
    td_node *grads = td_alloc(ctx, sizeof *grads * (n_params + 1));
    if (!t || !grads) {
        td_free(ctx, t);
        td_free(ctx, grads);
        return TD_OOM(ctx, "a trainer", sizeof *t);
    }
    t->ctx = ctx;
    t->mesh = mesh;
    t->options = opts;
    t->n_params = n_params;
    td_context_own(ctx, &t->owned, trainer_destroy_owned);
    t->params = td_alloc(ctx, sizeof *t->params * (n_params + 1));
    td_status s = t->params ? TD_OK : TD_OOM(ctx, "trainer parameters", sizeof *t->params * n_params);
    if (s == TD_OK) {
        if (n_params)
            memcpy(t->params, params, sizeof *params * n_params);
        s = td_graph_value_and_grad(g, loss, n_params, params, grads);
    }
    if (s == TD_OK)
        s = td_program_compile(g, mesh, 1, &loss, n_params, params, grads, &t->program);
    td_free(ctx, grads);
    if (s == TD_OK)
        td_program_disown(t->program); /* the trainer destroys it */
    if (s == TD_OK) {
        t->param_elems = td_program_plan(t->program)->size[TD_BUF_PARAMS];
        t->master = td_alloc_zeroed(ctx, (t->param_elems + 1) * sizeof(float));
        t->pending = td_alloc_zeroed(ctx, (t->param_elems + 1) * sizeof(float));
        if (!t->master || !t->pending)
            s = TD_OOM(ctx, "the master parameters", 2 * t->param_elems * sizeof(float));
        else /* the master starts where the devices start */
            memcpy(t->master, td_program_initial_params(t->program), t->param_elems * sizeof(float));
    }
    if (s != TD_OK) {
        td_trainer_destroy(t);
        return s;
    }
    td_program_set_hook(t->program, update_hook, t);
    *out = t;
    return TD_OK;
}

td_status td_trainer_set_param(td_trainer *t, td_node param, const td_tensor *value)
{
    if (!t)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_program_set_param(t->program, param, value);
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
    if (!t)
        return TD_ERR_INVALID_ARGUMENT;
    return td_program_read_param(t->program, param, device, out);
}

td_status td_trainer_step(td_trainer *t, uint32_t n_bindings, const td_binding *bindings, float *loss)
{
    if (!t)
        return TD_ERR_INVALID_ARGUMENT;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    td_status s = td_program_run(t->program, n_bindings, bindings);
    clock_gettime(CLOCK_MONOTONIC, &b);
    t->seconds += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    if (s != TD_OK) {
        /* Some owners may have finalized and some devices received new
         * values: put every replica back to the master. The step's own
         * error is what the caller gets; a device that cannot be restored
         * (lost) fails again on the next call. */
        char cause[512];
        snprintf(cause, sizeof cause, "%s", td_last_error(t->ctx));
        td_status r = td_program_write_all_params(t->program, t->master);
        td_error_set(t->ctx, s, "%s%s", cause,
                     r == TD_OK ? " (parameters restored to their values before the step)"
                                : " (and restoring the parameters failed too)");
        return s;
    }
    float *swap = t->master;
    t->master = t->pending;
    t->pending = swap;
    t->steps++;
    if (loss) {
        /* Each device's loss is the mean over its shard; equal shards make
         * their mean the mean over the global batch. Fixed order. */
        float sum = 0.0f;
        for (uint32_t d = 0; d < t->mesh->count; d++)
            sum += td_program_output_host(t->program, 0, d)[0];
        *loss = sum / (float)t->mesh->count;
    }
    return TD_OK;
}

td_status td_trainer_replicas_identical(td_trainer *t, bool *identical)
{
    if (!t)
        return TD_ERR_INVALID_ARGUMENT;
    if (!identical)
        return td_error_set(t->ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_replicas_identical: identical is NULL");
    *identical = true;
    const td_plan *plan = td_program_plan(t->program);
    td_status s = TD_OK;
    for (uint32_t i = 0; i < t->n_params && s == TD_OK && *identical; i++) {
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
        td_tensor_destroy(ref);
        td_tensor_destroy(other);
    }
    return s;
}

td_status td_trainer_stats(const td_trainer *t, double *step_seconds, uint64_t *steps)
{
    if (!t)
        return TD_ERR_INVALID_ARGUMENT;
    if (step_seconds)
        *step_seconds = t->seconds;
    if (steps)
        *steps = t->steps;
    return TD_OK;
}
