/* Evaluation: a forward-only program of the trainer's graph, fed the
 * trainer's master parameters. Each batch's metrics come back as one value
 * per device; with td_graph_masked_mean their mean over the devices is the
 * batch's masked mean, and weighting that by the batch's valid count (read
 * from the bound mask on the host, where it already is) makes the tally an
 * average over exactly the valid examples of the whole data set, however
 * the last batch was padded. Sums are kept in double: a data set of many
 * batches must not drift with the batch count. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tandem/eval.h"
#include "td_balance.h"
#include "td_trace.h"
#include "td_trainer_internal.h"

struct td_evaluator {
    td_owned owned;
    td_context *ctx;
    td_program *program;
    uint32_t n_devices;
    uint32_t n_metrics;
    td_node mask;
    float *staging; /* the program's parameter buffer, assembled on the host */
    double *sums;   /* per metric: sum over batches of weight * value */
    double weight;  /* valid examples so far */
    uint64_t batch; /* the sharded inputs' common batch (0: none; each divides evenly) */
    uint32_t *rows; /* its even shares over the mesh's devices */
};

_Static_assert(offsetof(td_evaluator, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

/* Runs while the mesh is still open: its destroy releases its evaluators
 * first. */
static void evaluator_release(td_owned *self)
{
    td_evaluator *e = (td_evaluator *)self;
    td_mesh *mesh = e->program ? td_program_mesh(e->program) : NULL;
    td_program_destroy(e->program);
    e->program = NULL;
    if (mesh && td_mesh_any_wedged(mesh)) {
        td_owned_abandon(self); /* as the trainer: copies into its staging may be pending */
        return;
    }
    td_free(e->ctx, e->staging);
    td_free(e->ctx, e->sums);
    td_free(e->ctx, e->rows);
}

void td_evaluator_destroy(td_evaluator *e)
{
    if (e)
        td_owned_destroy(&e->owned);
}

/* The first check of every call on an evaluator: not NULL, not released. */
static td_status check_evaluator(const td_evaluator *e, const char *fn)
{
    return e ? td_owned_check_live(&e->owned, fn) : TD_ERR_INVALID_ARGUMENT;
}

static td_status check_nodes(td_graph *g, td_node mask, uint32_t n_metrics, const td_node *metrics)
{
    const char *fn = "td_evaluator_create";
    if (mask < g->count && g->nodes[mask].op == TD_OP_INPUT && g->nodes[mask].dtype != TD_F32) {
        char what[32];
        snprintf(what, sizeof what, "mask (node %u)", mask);
        return td_dtype_error(g->ctx, fn, what, g->nodes[mask].dtype, "an f32 [B] input");
    }
    if (mask >= g->count || g->nodes[mask].op != TD_OP_INPUT || g->nodes[mask].shape.rank != 1)
        return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "%s: mask is node %u, expected an f32 [B] input of the graph",
                            fn, mask);
    for (uint32_t i = 0; i < n_metrics; i++) {
        td_node m = metrics[i];
        if (m >= g->count)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: metrics[%u] is node %u, which does not exist (the graph has %u nodes)", fn, i, m,
                                g->count);
        if (g->nodes[m].dtype != TD_F32) {
            char what[48];
            snprintf(what, sizeof what, "metrics[%u] (node %u)", i, m);
            return td_dtype_error(g->ctx, fn, what, g->nodes[m].dtype, "an f32 scalar");
        }
        if (td_shape_count(&g->nodes[m].shape) != 1)
            return td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: metrics[%u] is node %u with %lld elements, expected an f32 scalar", fn, i, m,
                                (long long)td_shape_count(&g->nodes[m].shape));
    }
    return TD_OK;
}

/* The mesh is about to drop lost devices: the program re-plans on its
 * next run (with the parameters it held). */
static void evaluator_before_shrink(td_owned *self)
{
    td_evaluator *e = (td_evaluator *)self;
    if (!e->program)
        return;
    td_program_before_shrink(e->program);
    /* The survivors' even shares, which the re-plan then takes (a batch
     * they do not divide included). */
    td_mesh *mesh = td_program_mesh(e->program);
    uint32_t survivors = 0;
    for (uint32_t d = 0; d < mesh->count; d++)
        survivors += !td_mesh_device_lost(mesh, d);
    if (e->batch && survivors && e->batch >= survivors) {
        td_balance_even(e->batch, survivors, e->rows);
        td_program_set_split(e->program, survivors, e->rows);
    }
}

td_status td_evaluator_create(td_graph *g, td_mesh *mesh, td_node mask, uint32_t n_metrics, const td_node *metrics,
                              td_evaluator **out)
{
    if (!g)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    if (!mesh || !out || !n_metrics || !metrics)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_evaluator_create: mesh, out or metrics is NULL, or n_metrics is %u (expected >= 1)",
                            n_metrics);
    *out = NULL;
    td_status s = td_owned_check_live(&g->owned, "td_evaluator_create");
    if (s == TD_OK)
        s = td_owned_check_live(&mesh->owned, "td_evaluator_create");
    if (s == TD_OK)
        s = check_nodes(g, mask, n_metrics, metrics);
    if (s != TD_OK)
        return s;
    td_evaluator *e = td_alloc_zeroed(ctx, sizeof *e);
    if (!e)
        return TD_OOM(ctx, "an evaluator", sizeof *e);
    e->ctx = ctx;
    e->n_devices = mesh->count;
    e->n_metrics = n_metrics;
    e->mask = mask;
    td_context_own(ctx, &e->owned, "evaluator", mesh, evaluator_release);
    e->owned.before_shrink = evaluator_before_shrink;
    /* Shares of a batch the devices do not divide differ by one example;
     * the metrics are then weighted by them (td_graph_shard_weight). */
    e->batch = td_balance_common_batch(g);
    if (e->batch < mesh->count)
        e->batch = 0;
    e->rows = td_alloc_zeroed(ctx, sizeof *e->rows * mesh->count);
    if (!e->rows)
        s = TD_OOM(ctx, "an evaluator's split", sizeof *e->rows * mesh->count);
    else if (e->batch)
        td_balance_even(e->batch, mesh->count, e->rows);
    if (s == TD_OK)
        s = td_program_compile(g, mesh, e->batch ? e->rows : NULL, n_metrics, metrics, 0, NULL, NULL, false,
                               &e->program);
    if (s == TD_OK)
        td_program_set_trace_name(e->program, "evaluate");
    if (s == TD_OK) {
        td_program_disown(e->program);
        size_t floats = td_program_plan(e->program)->size[TD_BUF_PARAMS] + 1;
        e->staging = td_alloc_zeroed(ctx, floats * sizeof(float));
        e->sums = td_alloc_zeroed(ctx, sizeof *e->sums * n_metrics);
        if (!e->staging || !e->sums)
            s = TD_OOM(ctx, "the evaluator's parameters", floats * sizeof(float));
    }
    if (s != TD_OK) {
        td_evaluator_destroy(e);
        return s;
    }
    *out = e;
    return TD_OK;
}

td_status td_evaluator_reset(td_evaluator *e)
{
    td_status s = check_evaluator(e, "td_evaluator_reset");
    if (s != TD_OK)
        return s;
    memset(e->sums, 0, sizeof *e->sums * e->n_metrics);
    e->weight = 0.0;
    return TD_OK;
}

td_status td_evaluator_load(td_evaluator *e, const td_trainer *t)
{
    td_status live = check_evaluator(e, "td_evaluator_load");
    if (live != TD_OK)
        return live;
    if (!t)
        return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT, "td_evaluator_load: trainer is NULL");
    if ((live = td_trainer_check_live(t, "td_evaluator_load")) != TD_OK)
        return live;
    const td_program *tp = td_trainer_program(t);
    const td_plan *from = td_program_plan(tp), *to = td_program_plan(e->program);
    const float *master = td_trainer_master(t);
    /* Both plans lay every parameter of the graph out in node order; the
     * checks catch a trainer built from another graph. */
    for (td_node id = 0; id < to->n_nodes; id++) {
        const td_node_def *nd = td_program_node(e->program, id);
        if (nd->op != TD_OP_PARAM)
            continue;
        int64_t count = td_shape_count(&to->shapes[id]);
        if (id >= from->n_nodes || td_program_node(tp, id)->op != TD_OP_PARAM ||
            strcmp(td_program_node(tp, id)->name, nd->name) != 0 || td_shape_count(&from->shapes[id]) != count)
            return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_evaluator_load: parameter '%s' (node %u, %lld elements) is not the trainer's node %u, "
                                "expected a trainer created from the evaluator's graph",
                                nd->name, id, (long long)count, id);
        memcpy(e->staging + to->slots[id].offset, master + from->slots[id].offset, (size_t)count * sizeof(float));
    }
    td_status s = td_program_write_all_params(e->program, e->staging);
    if (s == TD_OK)
        s = td_evaluator_reset(e);
    return s;
}

td_status td_evaluator_run(td_evaluator *e, uint32_t n_bindings, const td_binding *bindings)
{
    td_status s = check_evaluator(e, "td_evaluator_run");
    if (s != TD_OK)
        return s;
    td_trace *tr = td_trace_of(e->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    s = td_program_run_for(e->program, n_bindings, bindings, "td_evaluator_run");
    if (tr)
        td_trace_span(tr, TD_TRACE_HOST, "host", "evaluate", NULL, begin, td_trace_now(), 0);
    e->n_devices = td_program_device_count(e->program); /* fewer after the mesh dropped lost devices */
    if (s != TD_OK)
        return s;
    /* The run checked the bindings: the mask is bound, f32, of its shape. */
    const td_tensor *mask = NULL;
    for (uint32_t i = 0; i < n_bindings; i++)
        if (bindings[i].node == e->mask)
            mask = bindings[i].value;
    if (!mask)
        return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_evaluator_run: the mask input (node %u) is not bound, expected a binding for it", e->mask);
    size_t count;
    void *data;
    td_tensor_count(mask, &count);
    td_tensor_data(mask, &data);
    double weight = 0.0;
    for (size_t i = 0; i < count; i++)
        weight += ((const float *)data)[i];
    if (weight == 0.0)
        return TD_OK;
    for (uint32_t m = 0; m < e->n_metrics; m++) {
        double mean = 0.0;
        for (uint32_t d = 0; d < e->n_devices; d++)
            mean += (double)td_program_shard_weight(e->program, d) * td_program_output_host(e->program, m, d)[0];
        e->sums[m] += weight * (mean / e->n_devices);
    }
    e->weight += weight;
    return TD_OK;
}

td_status td_evaluator_result(const td_evaluator *e, uint32_t capacity, float *values, double *examples)
{
    td_status live = check_evaluator(e, "td_evaluator_result");
    if (live != TD_OK)
        return live;
    if (capacity < e->n_metrics || !values)
        return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_evaluator_result: capacity %u (values %s), expected room for the evaluator's %u metrics",
                            capacity, values ? "given" : "NULL", e->n_metrics);
    for (uint32_t m = 0; m < e->n_metrics; m++)
        values[m] = e->weight > 0.0 ? (float)(e->sums[m] / e->weight) : 0.0f;
    if (examples)
        *examples = e->weight;
    return TD_OK;
}
