/* Building a run (td_fit_create): the built-in model's graph with a
 * masked loss and accuracy, the trainer and the evaluator over the mesh,
 * and the host buffers of one global batch. Also the fit's lifetime and
 * its accessors. */
#include <math.h>
#include <string.h>

#include "td_fit_internal.h"
#include "td_mesh_internal.h"

_Static_assert(offsetof(td_fit, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

/* Everything but the block; the graph, trainer and evaluator are the
 * context's own objects and go with it (or with td_fit_destroy). */
static void fit_release(td_owned *self)
{
    td_fit *f = (td_fit *)self;
    td_fit_batch_release(&f->batch);
    td_free(f->ctx, f->params);
    td_free(f->ctx, f->order);
    td_free(f->ctx, f->index);
    f->params = NULL;
    f->order = f->index = NULL;
}

void td_fit_destroy(td_fit *f)
{
    if (!f)
        return;
    if (td_owned_check_live(&f->owned, "td_fit_destroy") == TD_OK) {
        td_evaluator_destroy(f->evaluator);
        td_trainer_destroy(f->trainer);
        td_graph_destroy(f->g);
        f->evaluator = NULL;
        f->trainer = NULL;
        f->g = NULL;
    }
    td_owned_destroy(&f->owned);
}

void td_fit_request_stop(td_fit *f)
{
    if (f)
        atomic_store(&f->stop, true); /* lock-free on every target tandem builds for: signal-safe */
}

td_status td_fit_trainer(const td_fit *f, td_trainer **trainer)
{
    if (!f || !trainer)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&f->owned, "td_fit_trainer");
    if (s == TD_OK)
        *trainer = f->trainer;
    return s;
}

td_status td_fit_summarize(const td_fit *f, td_fit_summary *summary)
{
    if (!f || !summary)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&f->owned, "td_fit_summarize");
    if (s != TD_OK)
        return s;
    td_fit_summary full = f->summary;
    full.checkpoint = f->checkpoint[0] ? f->checkpoint : NULL;
    return TD_STRUCT_WRITE(f->ctx, "td_fit_summarize", td_fit_summary, summary, &full);
}

/* The data's shapes against the model: rows in step, the dtypes the
 * graph's inputs take, test rows shaped like the training rows. */
static td_status check_data(td_fit *f)
{
    td_context *ctx = f->ctx;
    uint32_t xr, yr;
    int64_t xd[TD_MAX_RANK], yd[TD_MAX_RANK];
    td_dtype xt, yt;
    td_status s;
    if ((s = td_tensor_shape(f->train_x, &xr, xd)) != TD_OK || (s = td_tensor_shape(f->train_y, &yr, yd)) != TD_OK ||
        (s = td_tensor_dtype(f->train_x, &xt)) != TD_OK || (s = td_tensor_dtype(f->train_y, &yt)) != TD_OK)
        return s;
    if (xd[0] != yd[0] || xd[0] < 1)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH,
                            "td_fit_create: train_x has %lld rows and train_y %lld, expected the same count (>= 1)",
                            (long long)xd[0], (long long)yd[0]);
    if (f->classifier ? yt != TD_I32 || yr != 1 : yt != TD_F32 || yr != 2 || yd[1] != 1)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_fit_create: train_y is %s of rank %u, expected %s",
                            td_dtype_name(yt), yr, f->classifier ? "i32 labels [N]" : "f32 targets [N, 1]");
    if (!f->classifier && (xt != TD_F32 || xr != 2))
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_fit_create: train_x is %s of rank %u, expected f32 [N, F]",
                            td_dtype_name(xt), xr);
    f->n_train = (size_t)xd[0];
    if (!f->test_x)
        return TD_OK;
    uint32_t tr, tyr;
    int64_t td[TD_MAX_RANK], tyd[TD_MAX_RANK];
    td_dtype tt, tyt;
    if ((s = td_tensor_shape(f->test_x, &tr, td)) != TD_OK || (s = td_tensor_shape(f->test_y, &tyr, tyd)) != TD_OK ||
        (s = td_tensor_dtype(f->test_x, &tt)) != TD_OK || (s = td_tensor_dtype(f->test_y, &tyt)) != TD_OK)
        return s;
    if (tr != xr || tt != xt || memcmp(td + 1, xd + 1, (xr - 1) * sizeof *xd) != 0 || tyr != yr || tyt != yt ||
        memcmp(tyd + 1, yd + 1, (yr - 1) * sizeof *yd) != 0 || td[0] != tyd[0])
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH,
                            "td_fit_create: the test tensors' rows (%s rank %u, %lld of them, %lld targets) are not "
                            "shaped like the training rows (%s rank %u)",
                            td_dtype_name(tt), tr, (long long)td[0], (long long)tyd[0], td_dtype_name(xt), xr);
    f->n_test = (size_t)td[0];
    return TD_OK;
}

/* Inputs, the model, and per-example loss and correctness as masked means
 * over the global batch: the padded rows of the last batch count nowhere. */
static td_status build_graph(td_fit *f)
{
    const int64_t B = f->o.batch, bd[1] = {B};
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    td_dtype xt;
    td_tensor_shape(f->train_x, &rank, dims);
    td_tensor_dtype(f->train_x, &xt);
    dims[0] = B;
    td_status s = td_graph_create(f->ctx, &f->g);
    if (s == TD_OK)
        s = td_graph_input(f->g, f->classifier ? "image" : "x", xt, rank, dims, TD_SHARDED, &f->x);
    if (s == TD_OK)
        s = td_graph_input(f->g, "mask", TD_F32, 1, bd, TD_SHARDED, &f->mask);
    if (s != TD_OK)
        return s;
    if (!f->classifier) {
        const int64_t yd[2] = {B, 1}, rows[1] = {-1}; /* -1: each device reshapes its own shard */
        td_node pred, diff, squared, per_example;
        if ((s = td_graph_input(f->g, "y", TD_F32, 2, yd, TD_SHARDED, &f->y)) == TD_OK &&
            (s = td_model_linreg(f->g, f->x, &pred)) == TD_OK && (s = td_graph_sub(f->g, pred, f->y, &diff)) == TD_OK &&
            (s = td_graph_mul(f->g, diff, diff, &squared)) == TD_OK &&
            (s = td_graph_reshape(f->g, squared, 1, rows, &per_example)) == TD_OK)
            s = td_graph_masked_mean(f->g, per_example, f->mask, &f->loss);
        f->summary.input_std = 1.0f;
        return s;
    }
    td_model_options mo;
    td_model_options_init(&mo);
    mo.seed = f->o.seed;
    mo.batch_norm = f->o.batch_norm;
    mo.dropout = f->o.dropout;
    /* The whole training set's statistics, whatever the limit: the same
     * for training and evaluation, and for a resumed run. */
    if (f->o.standardize_inputs && (s = td_data_pixel_stats(f->ctx, f->train_x, &mo.input_mean, &mo.input_std)) != TD_OK)
        return s;
    f->summary.input_mean = f->o.standardize_inputs ? mo.input_mean : 0.0f;
    f->summary.input_std = f->o.standardize_inputs ? mo.input_std : 1.0f;
    if ((s = td_graph_input(f->g, "label", TD_I32, 1, bd, TD_SHARDED, &f->y)) == TD_OK)
        s = td_model_classification(f->g, f->o.model, f->x, f->y, f->mask, &mo, &f->loss, &f->accuracy);
    return s;
}

static td_status build_trainer(td_fit *f)
{
    const td_fit_options *c = &f->o;
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.optimizer = c->optimizer;
    o.learning_rate = c->learning_rate > 0.0f ? c->learning_rate : td_optimizer_default_learning_rate(c->optimizer);
    o.momentum = c->momentum;
    o.accumulate_steps = c->accumulate;
    o.n_metrics = f->classifier ? 1 : 0;
    o.metrics = f->classifier ? &f->accuracy : NULL;
    o.on_device_loss = c->on_device_loss;
    o.balance = c->balance;
    o.balance_weights = c->balance_weights;
    o.n_balance_weights = c->n_balance_weights;
    o.timing_waits = c->timing_waits;
    o.precision = c->precision;
    o.overlap_bucket_bytes = c->overlap_bucket_bytes;
    o.wire = c->wire;
    f->summary.learning_rate = o.learning_rate;
    uint64_t updates = f->total_steps / c->accumulate;
    td_status s = td_schedule_for_run(f->ctx, c->schedule, o.learning_rate, updates ? updates : 1, &o.schedule);
    if (s == TD_OK && (s = td_graph_params(f->g, 0, NULL, &f->n_params)) == TD_OK) {
        f->params = td_alloc(f->ctx, sizeof *f->params * (f->n_params + 1u));
        s = f->params ? td_graph_params(f->g, f->n_params, f->params, &f->n_params) : TD_OOM(f->ctx, "parameters", 0);
    }
    if (s == TD_OK)
        s = td_trainer_create(f->g, f->mesh, f->loss, f->n_params, f->params, &o, &f->trainer);
    const td_node metrics[2] = {f->loss, f->accuracy};
    if (s == TD_OK)
        s = td_evaluator_create(f->g, f->mesh, f->mask, f->classifier ? 2 : 1, metrics, &f->evaluator);
    /* The run's policy for its evaluations too: a device lost while
     * evaluating is as lost as one lost in a step. */
    if (s == TD_OK)
        s = td_evaluator_set_on_device_loss(f->evaluator, c->on_device_loss);
    /* Evaluated as it trains (a replan only when not fp32). */
    if (s == TD_OK && c->precision != TD_PRECISION_FP32)
        s = td_evaluator_set_precision(f->evaluator, c->precision);
    return s;
}

/* The run's length: examples and steps per epoch, all its steps. */
static td_status plan(td_fit *f)
{
    const td_fit_options *c = &f->o;
    td_fit_summary *p = &f->summary;
    p->examples_per_epoch = c->limit && c->limit < f->n_train ? c->limit : f->n_train;
    p->steps_per_epoch = (p->examples_per_epoch + c->batch - 1) / c->batch;
    if (c->max_steps) {
        p->epochs = (c->max_steps + p->steps_per_epoch - 1) / p->steps_per_epoch;
        f->total_steps = c->max_steps;
    } else {
        p->epochs = c->epochs;
        f->total_steps = (uint64_t)c->epochs * p->steps_per_epoch;
    }
    p->total_steps = f->total_steps;
    p->test_examples = c->eval_limit && c->eval_limit < f->n_test ? c->eval_limit : f->n_test;
    uint32_t first = 0;
    td_status s = td_processes_mesh(f->mesh, &p->devices, &first);
    if (s != TD_OK)
        return s;
    if (c->batch < p->devices)
        return td_error_set(f->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_fit_create: batch %u is smaller than the job's %u devices, expected one example each at "
                            "least",
                            c->batch, p->devices);
    uint32_t process = 0;
    return td_processes_rank(f->ctx, &process, &f->processes);
}

td_status td_fit_create(td_mesh *mesh, const td_tensor *train_x, const td_tensor *train_y, const td_tensor *test_x,
                        const td_tensor *test_y, const td_fit_options *options, td_fit **out)
{
    if (!out)
        return TD_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!mesh)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&mesh->owned, "td_fit_create");
    if (s != TD_OK)
        return s;
    td_context *ctx = mesh->ctx;
    if (!train_x || !train_y)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_fit_create: train_%s is NULL, expected the training %s",
                            train_x ? "y" : "x", train_x ? "targets" : "examples");
    if (!test_x != !test_y)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_fit_create: test_%s is NULL but not test_%s, expected both or neither",
                            test_x ? "y" : "x", test_x ? "x" : "y");
    td_fit_options o;
    td_fit_options_init(&o);
    if ((s = TD_STRUCT_READ(ctx, "td_fit_create", td_fit_options, options, &o)) != TD_OK ||
        (s = td_fit_check_options(ctx, &o)) != TD_OK)
        return s;
    td_fit *f = td_alloc_zeroed(ctx, sizeof *f);
    if (!f)
        return TD_OOM(ctx, "a fit", sizeof *f);
    f->ctx = ctx;
    f->mesh = mesh;
    f->o = o;
    f->train_x = train_x;
    f->train_y = train_y;
    f->test_x = test_x;
    f->test_y = test_y;
    f->classifier = strcmp(o.model, "linreg") != 0;
    f->summary.struct_size = sizeof f->summary;
    atomic_init(&f->stop, false);
    td_context_own(ctx, &f->owned, "fit", mesh, fit_release);
    if ((s = check_data(f)) == TD_OK && (s = plan(f)) == TD_OK && (s = build_graph(f)) == TD_OK)
        s = build_trainer(f);
    if (s == TD_OK) {
        f->order = td_alloc(ctx, sizeof *f->order * f->n_train);
        f->index = td_alloc(ctx, sizeof *f->index * o.batch);
        if (!f->order || !f->index)
            s = TD_OOM(ctx, "the data order", sizeof *f->order * f->n_train);
    }
    if (s != TD_OK) {
        td_fit_destroy(f);
        return s;
    }
    *out = f;
    return TD_OK;
}
