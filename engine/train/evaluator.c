/* Evaluation: a forward-only program of the trainer's graph, fed the
 * trainer's master parameters. Each batch's metrics come back as one value
 * per device; with td_graph_masked_mean their mean over the devices is the
 * batch's masked mean, and weighting that by the batch's valid count (read
 * from the bound mask on the host, where it already is) makes the tally an
 * average over exactly the valid examples of the whole data set, however
 * the last batch was padded. Sums are kept in double: a data set of many
 * batches must not drift with the batch count.
 *
 * The evaluator shares the trainer's mesh. With on_device_loss = continue
 * a batch that failed because a device was lost runs again on the
 * survivors, as a step does; the mesh's drop marks every object on it --
 * the trainer too -- to plan again for the survivors before its next
 * use.
 *
 * Across processes each binds its rows of the batch (its devices' even
 * shares of the global batch): the valid examples and the weighted device
 * values are summed over the processes in process order, one small
 * exchange per batch, so every process keeps the same tally. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tandem/eval.h"
#include "td_across.h"
#include "td_balance.h"
#include "td_procs.h"
#include "td_ring.h"
#include "td_survivors.h"
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
    td_on_device_loss on_device_loss;
    uint64_t batches; /* runs since the last load or reset, for messages */
    /* The global mesh (tandem/processes.h); one process: the mesh and 0. */
    uint32_t global_n, first_position, processes;
    double *exchange; /* (1 + n_metrics) x processes: each batch's partial sums of every process */
    double *totals;   /* 1 + n_metrics: their sums over the processes */
    bool resplit;     /* the job's mesh changed: learn it and split again before the next use */
    /* The agreement after each batch across processes (td_across.h). */
    float *agree_rows;      /* 2 per device of the job */
    size_t *agree_offsets;  /* processes + 1 */
    bool *kept;             /* per device of the job */
    uint64_t *old_rows;     /* processes + 1: each process's first row before a re-split */
    td_rebound rebound;     /* a batch bound again after a loss, for the batch's run */
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
    td_free(e->ctx, e->exchange);
    td_free(e->ctx, e->agree_rows);
    td_free(e->ctx, e->agree_offsets);
    td_free(e->ctx, e->kept);
    td_free(e->ctx, e->old_rows);
    td_rebound_free(e->ctx, &e->rebound);
    td_free(e->ctx, e->totals);
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
    if (e->processes > 1) { /* the job's survivors are known once its mesh is learned again */
        e->resplit = true;
        return;
    }
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
    td_ring *ring = NULL;
    if ((s = td_mesh_ring(mesh, &ring)) != TD_OK) {
        td_evaluator_destroy(e);
        return s;
    }
    e->global_n = td_ring_global_count(ring);
    e->first_position = td_ring_global_position(ring, 0);
    e->processes = td_ring_process_count(ring);
    e->batch = td_balance_common_batch(g);
    if (e->batch < e->global_n)
        e->batch = 0;
    e->rows = td_alloc_zeroed(ctx, sizeof *e->rows * e->global_n);
    e->exchange = td_alloc_zeroed(ctx, sizeof *e->exchange * (n_metrics + 1) * e->processes);
    e->totals = td_alloc_zeroed(ctx, sizeof *e->totals * (n_metrics + 1));
    e->agree_rows = td_alloc_zeroed(ctx, sizeof *e->agree_rows * 2 * ((size_t)e->global_n + 1));
    e->agree_offsets = td_alloc_zeroed(ctx, sizeof *e->agree_offsets * ((size_t)e->processes + 1));
    e->kept = td_alloc_zeroed(ctx, sizeof *e->kept * ((size_t)e->global_n + 1));
    e->old_rows = td_alloc_zeroed(ctx, sizeof *e->old_rows * ((size_t)e->processes + 1));
    if (!e->rows || !e->exchange || !e->totals || !e->agree_rows || !e->agree_offsets || !e->kept || !e->old_rows)
        s = TD_OOM(ctx, "an evaluator's split", sizeof *e->rows * e->global_n);
    else if (e->batch)
        td_balance_even(e->batch, e->global_n, e->rows);
    if (s == TD_OK)
        s = td_program_compile(g, mesh, e->batch ? e->rows : NULL, n_metrics, metrics, 0, NULL, NULL, false,
                               TD_GEMM_FP32, &e->program);
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
    e->batches = 0;
    return TD_OK;
}

td_status td_evaluator_set_on_device_loss(td_evaluator *e, td_on_device_loss policy)
{
    td_status s = check_evaluator(e, "td_evaluator_set_on_device_loss");
    if (s != TD_OK)
        return s;
    if (policy != TD_ON_DEVICE_LOSS_FAIL && policy != TD_ON_DEVICE_LOSS_CONTINUE)
        return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_evaluator_set_on_device_loss: policy %d, expected TD_ON_DEVICE_LOSS_FAIL (0) or "
                            "_CONTINUE (1)",
                            (int)policy);
    e->on_device_loss = policy;
    return TD_OK;
}

td_status td_evaluator_set_precision(td_evaluator *e, td_precision precision)
{
    td_status s = check_evaluator(e, "td_evaluator_set_precision");
    if (s != TD_OK)
        return s;
    if (precision != TD_PRECISION_FP32 && precision != TD_PRECISION_BF16)
        return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_evaluator_set_precision: precision %d, expected TD_PRECISION_FP32 (0) or "
                            "TD_PRECISION_BF16 (1)",
                            (int)precision);
    return td_program_set_gemm_precision(e->program, (int32_t)precision);
}

/* Across processes, after the job's mesh changed (a trainer continued on
 * the survivors): the global mesh as it is now, and its even shares. */
static td_status sync_mesh(td_evaluator *e)
{
    if (!e->resplit)
        return TD_OK;
    td_ring *ring = NULL;
    td_status s = td_mesh_ring(td_program_mesh(e->program), &ring);
    if (s != TD_OK)
        return s;
    e->global_n = td_ring_global_count(ring);
    e->first_position = td_ring_global_position(ring, 0);
    if (e->batch && e->batch >= e->global_n) {
        td_balance_even(e->batch, e->global_n, e->rows);
        if ((s = td_program_set_split(e->program, e->global_n, e->rows)) != TD_OK)
            return s;
    }
    e->resplit = false;
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
    if ((live = sync_mesh(e)) != TD_OK)
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

static td_status run_batch(td_evaluator *e, uint32_t n_bindings, const td_binding *bindings)
{
    td_trace *tr = td_trace_of(e->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    td_status s = sync_mesh(e);
    if (s == TD_OK)
        s = td_program_run_for(e->program, n_bindings, bindings, "td_evaluator_run");
    if (tr)
        td_trace_span(tr, TD_TRACE_HOST, "host", "evaluate", NULL, begin, td_trace_now(), 0);
    e->n_devices = td_program_device_count(e->program); /* fewer after the mesh dropped lost devices */
    return s;
}

/* After the mesh dropped devices: the program plans for the survivors now
 * (with the parameters it read back before the drop), so that a failure
 * to plan is told as the reason the evaluation cannot go on. */
static td_status replan_evaluator(void *evaluator)
{
    td_evaluator *e = evaluator;
    return td_program_refresh(e->program);
}

static td_status tally(td_evaluator *e, uint32_t n_bindings, const td_binding *bindings);

/* Across processes: the batch's run, agreed on by every process; after an
 * agreed loss under continue, every process goes on with the job's
 * survivors, binds its new rows (gathered between processes) and runs the
 * batch again. *used: the bindings the successful run had. */
static td_status run_across(td_evaluator *e, uint32_t n, const td_binding *bindings, const td_binding **used)
{
    td_context *ctx = e->ctx;
    const td_binding *current = bindings;
    for (;;) {
        td_ring *ring = td_program_ring(e->program);
        td_status s = run_batch(e, n, current);
        bool any_lost = false;
        if (s == TD_OK || !td_procs_broken(td_procs_of(ctx)))
            s = td_across_agree(ctx, td_program_mesh(e->program), ring, s, e->agree_rows, 2, e->agree_offsets,
                                e->kept, &any_lost);
        if (s == TD_OK) {
            *used = current;
            return TD_OK;
        }
        if (e->on_device_loss != TD_ON_DEVICE_LOSS_CONTINUE || !any_lost)
            return s;
        if (!e->batch)
            return td_error_set(ctx, TD_ERR_UNSUPPORTED, "td_evaluator_run: the sharded inputs share no batch size, so "
                                                         "the batch cannot be split again after a loss");
        td_across_row_offsets(ring, e->rows, e->batch, e->old_rows); /* before the split changes */
        if ((s = td_across_continue(ctx, td_program_mesh(e->program), ring, e->kept, s)) != TD_OK)
            return s;
        /* The job's survivors' split, and the program planned for it now. */
        uint64_t first = 0, count = 0;
        if ((s = sync_mesh(e)) != TD_OK || (s = td_program_refresh(e->program)) != TD_OK ||
            (s = td_evaluator_process_rows(e, &first, &count)) != TD_OK ||
            (s = td_across_rebind(ctx, e->program, e->processes, n, current, e->old_rows, first, count, &e->rebound)) !=
                TD_OK)
            return s;
        current = e->rebound.bindings;
    }
}

td_status td_evaluator_run(td_evaluator *e, uint32_t n_bindings, const td_binding *bindings)
{
    td_status s = check_evaluator(e, "td_evaluator_run");
    if (s != TD_OK)
        return s;
    e->batches++;
    if (e->processes > 1) {
        const td_binding *used = bindings;
        s = run_across(e, n_bindings, bindings, &used);
        if (s == TD_OK)
            s = tally(e, n_bindings, used);
        td_rebound_free(e->ctx, &e->rebound);
        return s;
    }
    /* A batch changes nothing on the devices, so one that failed for a
     * lost device runs again, whole, on the survivors. */
    while ((s = run_batch(e, n_bindings, bindings)) != TD_OK) {
        char what[48];
        snprintf(what, sizeof what, "evaluation batch %llu", (unsigned long long)e->batches);
        uint32_t dropped;
        s = td_continue_on_survivors(td_program_mesh(e->program), e->on_device_loss, s, what, replan_evaluator, e,
                                     &dropped);
        if (s != TD_OK)
            return s;
    }
    return tally(e, n_bindings, bindings);
}

/* Adds a successful batch's metrics to the tally: weighted by its valid
 * examples (the bound mask's sum), over every process. */
static td_status tally(td_evaluator *e, uint32_t n_bindings, const td_binding *bindings)
{
    td_status s;
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
    /* [valid examples, then each metric's weighted sum over the devices]. */
    const uint32_t values = e->n_metrics + 1;
    double *mine = e->exchange + (size_t)values * (e->processes > 1 ? td_procs_rank(td_procs_of(e->ctx)) : 0);
    mine[0] = 0.0;
    for (size_t i = 0; i < count; i++)
        mine[0] += ((const float *)data)[i];
    for (uint32_t m = 0; m < e->n_metrics; m++) {
        mine[m + 1] = 0.0;
        for (uint32_t d = 0; d < e->n_devices; d++)
            mine[m + 1] += (double)td_program_shard_weight(e->program, d) * td_program_output_host(e->program, m, d)[0];
    }
    if (e->processes > 1 && (s = td_procs_allgather(td_procs_of(e->ctx), mine, e->exchange, sizeof *mine * values,
                                                     NULL, NULL)) != TD_OK)
        return s;
    double *sum = e->totals;
    for (uint32_t i = 0; i < values; i++) {
        sum[i] = 0.0;
        for (uint32_t q = 0; q < e->processes; q++)
            sum[i] += e->exchange[(size_t)q * values + i];
    }
    const double weight = sum[0];
    if (weight == 0.0)
        return TD_OK;
    for (uint32_t m = 0; m < e->n_metrics; m++)
        e->sums[m] += weight * (sum[m + 1] / (e->processes > 1 ? e->global_n : e->n_devices));
    e->weight += weight;
    return TD_OK;
}

td_status td_evaluator_process_rows(const td_evaluator *e, uint64_t *first, uint64_t *count)
{
    td_status s = check_evaluator(e, "td_evaluator_process_rows");
    if (s != TD_OK)
        return s;
    if (!first || !count)
        return td_error_set(e->ctx, TD_ERR_INVALID_ARGUMENT, "td_evaluator_process_rows: first or count is NULL");
    if ((s = sync_mesh((td_evaluator *)e)) != TD_OK) /* it learns the mesh once; the evaluator stays the same */
        return s;
    return td_rows_of_process(e->ctx, "td_evaluator_process_rows", e->batch, e->rows, e->first_position,
                              td_program_mesh(e->program)->count, e->processes, first, count);
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
