/* pmap, compiling: a graph traced once into a per-device plan for a mesh.
 *
 * The host side builds the plan, the step words and every parameter's
 * initial values; then one job per device allocates the arena, parameter
 * and gradient buffers, writes the initial values, emits the kernel calls,
 * creates the segments and reserves ring staging. Destroying a program
 * releases all of it on the devices' workers. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "td_init_internal.h"
#include "td_op.h"
#include "td_program_state.h"

static void unplan(td_program *p);
static td_status plan_for_mesh(td_program *p, const float *params);

static void free_plans(td_program *p)
{
    for (uint32_t k = 0; p->plans && k < p->n_plans; k++)
        td_plan_free(p->ctx, &p->plans[k]);
    td_free(p->ctx, p->plans);
    td_free(p->ctx, p->plan_of);
    p->plans = NULL;
    p->plan_of = NULL;
    p->n_plans = 0;
}

/* The split covers the global mesh: every device of every process. */
static bool has_split(const td_program *p)
{
    return p->split_total && p->ring && p->split_devices == td_ring_global_count(p->ring);
}

/* Plan k (first taken by device d) runs the same steps as device 0's --
 * kernel segments and the same collectives on the same sizes -- and gives
 * outputs of the same shapes; only what the rows size differs, the number
 * of calls in a segment included (a batched product makes one GEMM per
 * example and head). An uneven split of a graph whose collectives or
 * outputs carry rows (an all_gather of activations, per-example outputs)
 * is refused, naming the node. */
static td_status check_same_plan(const td_program *p, uint32_t k, uint32_t d)
{
    const td_plan *a = &p->plans[0], *b = &p->plans[k];
    bool same = a->n_steps == b->n_steps;
    for (uint32_t i = 0; same && i < a->n_steps; i++)
        same = a->steps[i].kind == b->steps[i].kind && (a->steps[i].n_calls == 0) == (b->steps[i].n_calls == 0);
    if (!same)
        return td_error_set(p->ctx, TD_ERR_UNSUPPORTED,
                            "the plans of devices 0 and %u run different kernels under the batch split (use an even "
                            "split)", d);
    for (uint32_t i = 0; i < a->n_steps; i++) {
        const td_node node = a->steps[i].node;
        if (a->steps[i].kind != TD_STEP_SEGMENT && td_shape_count(&a->shapes[node]) != td_shape_count(&b->shapes[node]))
            return td_error_set(p->ctx, TD_ERR_SHAPE_MISMATCH,
                                "%s node %u has %lld elements on device 0 and %lld on device %u under an uneven batch "
                                "split: a collective must move the same size on every device (use an even split)",
                                td_op_def_of(p->graph.nodes[node].op)->name, node,
                                (long long)td_shape_count(&a->shapes[node]), (long long)td_shape_count(&b->shapes[node]),
                                d);
    }
    for (uint32_t i = 0; i < p->n_outputs; i++) {
        const td_node node = p->outputs[i];
        if (td_shape_count(&a->shapes[node]) != td_shape_count(&b->shapes[node]))
            return td_error_set(p->ctx, TD_ERR_SHAPE_MISMATCH,
                                "output %u (node %u) has %lld elements on device 0 and %lld on device %u under an uneven "
                                "batch split: outputs must have the same shape on every device (use an even split)",
                                i, node, (long long)td_shape_count(&a->shapes[node]),
                                (long long)td_shape_count(&b->shapes[node]), d);
    }
    return TD_OK;
}

static td_status compile_device(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    td_program_device *pd = &p->devs[pos];
    const td_plan *plan = td_program_device_plan(p, pos);
    td_context *ctx = p->ctx;
    td_status s = TD_OK;
    for (int b = 0; b < TD_BUF_COUNT && s == TD_OK; b++) {
        size_t elems = plan->size[b] ? plan->size[b] : 16;
        s = md->ops->buffer_create(md->dev, elems * sizeof(float), &pd->buffers[b]);
    }
    if (s != TD_OK)
        return s;

    /* Parameters start from their initializers, computed once on the host
     * so every device gets bitwise the same values; the gradient bucket's
     * gaps must stay zero. */
    td_kernel_call zero;
    memset(&zero, 0, sizeof zero);
    zero.kernel = TD_KERNEL_FILL;
    zero.out.buffer = pd->buffers[TD_BUF_GRADS];
    zero.n = (int64_t)plan->size[TD_BUF_GRADS];
    td_segment *init = NULL;
    if ((s = md->ops->segment_create(md->dev, &zero, 1, &init)) != TD_OK)
        return s;
    s = md->ops->segment_run(md->dev, init);
    if (s == TD_OK && plan->size[TD_BUF_PARAMS])
        s = md->ops->write(md->dev, pd->buffers[TD_BUF_PARAMS], 0, p->param_init, plan->size[TD_BUF_PARAMS] * 4);
    if (s == TD_OK)
        s = td_mesh_device_submit_wait(md, td_context_timeout_ms(ctx));
    md->ops->segment_destroy(md->dev, init);
    if (s != TD_OK)
        return s;

    pd->segments = td_alloc_zeroed(ctx, sizeof *pd->segments * (plan->n_steps + 1));
    td_kernel_call *calls = td_alloc_zeroed(ctx, sizeof *calls * (plan->n_calls + 1));
    if (!pd->segments || !calls) {
        td_free(ctx, calls);
        return TD_OOM(ctx, "device plan", sizeof *calls * plan->n_calls);
    }
    s = td_plan_emit(&p->graph, plan, pd->buffers, td_ring_global_position(p->ring, pos), calls);
    /* Matrix products and convolutions are the plan's only GEMMs. */
    for (uint32_t i = 0; i < plan->n_calls && s == TD_OK && p->gemm_precision != TD_GEMM_FP32; i++)
        if (calls[i].kernel == TD_KERNEL_GEMM)
            calls[i].p.gemm.precision = p->gemm_precision;
    for (uint32_t i = 0; i < plan->n_steps && s == TD_OK; i++) {
        const td_step *st = &plan->steps[i];
        if (st->kind == TD_STEP_SEGMENT)
            s = md->ops->segment_create(md->dev, calls + st->first_call, st->n_calls, &pd->segments[i]);
    }
    pd->calls = calls;
    if (s == TD_OK && p->ring_bytes)
        s = td_ring_reserve(p->ring, pos, p->ring_bytes);
    return s;
}

/* Destroys the segments of *list (count entries, some NULL) and the list. */
static void destroy_segments(td_context *ctx, td_mesh_device *md, td_segment ***list, uint32_t count)
{
    for (uint32_t i = 0; *list && i < count; i++)
        if ((*list)[i])
            md->ops->segment_destroy(md->dev, (*list)[i]);
    td_free(ctx, *list);
    *list = NULL;
}

static td_status release_device(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    td_program_device *pd = &p->devs[pos];
    /* A device fenced off after a timeout may still be running the kernels
     * of that job (a GPU's cannot be stopped): its buffers and segments
     * are left to it rather than freed under it (lavapipe would fault). */
    if (td_mesh_device_drain(p->mesh, pos) == TD_ERR_TIMEOUT)
        return TD_OK;
    const td_plan *plan = p->plans && p->plan_of ? td_program_device_plan(p, pos) : NULL;
    td_program_free_pieces(p, pos);
    destroy_segments(p->ctx, md, &pd->segments, plan ? plan->n_steps : 0);
    destroy_segments(p->ctx, md, &pd->call_segments, plan ? plan->n_calls : 0);
    td_free(p->ctx, pd->calls);
    td_free(p->ctx, pd->call_names);
    pd->calls = NULL;
    pd->call_names = NULL;
    for (int b = 0; b < TD_BUF_COUNT; b++)
        if (pd->buffers[b]) {
            md->ops->buffer_destroy(md->dev, pd->buffers[b]);
            pd->buffers[b] = NULL;
        }
    return TD_OK;
}

/* The plan for the mesh as it is now and everything sized by it: step
 * words, call names, output memory, initial parameters (`params`, when
 * given, replaces the initializers' values: a re-plan keeps the values the
 * devices held), ring staging; then every device compiles its part. On
 * failure what was made is left for program_release. */
static td_status plan_for_mesh(td_program *p, const float *params)
{
    td_context *ctx = p->ctx;
    td_mesh *mesh = p->mesh;
    const uint32_t n_outputs = p->n_outputs;
    const td_node *outputs = p->outputs;
    const bool split = has_split(p);
    p->plans = td_alloc_zeroed(ctx, sizeof *p->plans * mesh->count);
    p->plan_of = td_alloc_zeroed(ctx, sizeof *p->plan_of * mesh->count);
    td_status s = p->plans && p->plan_of ? TD_OK : TD_OOM(ctx, "a program's plans", sizeof *p->plans * mesh->count);
    /* Across processes the plans are for the global mesh: its device
     * count sizes all_gather and the shard weights, each device takes the
     * rows of its global position. */
    const uint32_t global_n = td_ring_global_count(p->ring), first = td_ring_global_position(p->ring, 0);
    for (uint32_t d = 0; d < mesh->count && s == TD_OK; d++) {
        /* A device with the rows of one before it takes that one's plan. */
        uint32_t e = 0;
        while (e < d && split && p->split_rows[first + e] != p->split_rows[first + d])
            e++;
        if (e < d) {
            p->plan_of[d] = p->plan_of[e];
            continue;
        }
        const td_plan_split share = {split ? p->split_rows[first + d] : 0, split ? p->split_total : 0};
        s = td_plan_build(&p->graph, global_n, split ? &share : NULL, n_outputs, outputs, p->n_grads,
                          p->grad_params, p->grad_nodes, p->training, &p->plans[p->n_plans]);
        if (s != TD_OK)
            break;
        p->plan_of[d] = p->n_plans++;
        if (p->plan_of[d] > 0)
            s = check_same_plan(p, p->plan_of[d], d);
    }
    if (s != TD_OK) {
        free_plans(p);
        td_free(ctx, p->devs);
        p->devs = NULL;
        return s;
    }
    p->planned = true;
    const size_t step_words = p->plans[0].size[TD_BUF_STEP];
    p->step_words = td_alloc_zeroed(ctx, (step_words * mesh->count + 1) * sizeof *p->step_words);
    if (!p->step_words)
        return TD_OOM(ctx, "step words", step_words * mesh->count * sizeof *p->step_words);
    /* Device d's row 0 is the example after the rows of the devices before
     * it: the mesh shards along axis 0. */
    for (uint32_t d = 0; d < mesh->count; d++)
        for (uint32_t k = 0; k < td_program_device_plan(p, d)->n_step_nodes; k++) {
            const td_plan *plan = td_program_device_plan(p, d);
            p->step_words[step_words * d + 2 * k + 1] =
                (uint32_t)td_program_row_start(p, d, plan->shapes[plan->step_nodes[k]].dims[0]);
        }
    size_t total = 0;
    for (uint32_t i = 0; i < n_outputs; i++) {
        p->output_offset[i] = total;
        total += (size_t)td_shape_count(&p->plans[0].shapes[outputs[i]]) * mesh->count;
    }
    p->out_host = td_alloc_zeroed(ctx, (total + 1) * sizeof(float));
    if (!p->out_host)
        return TD_OOM(ctx, "program outputs", total * sizeof(float));
    uint64_t param_elems = p->plans[0].size[TD_BUF_PARAMS];
    p->param_init = td_alloc_zeroed(ctx, (param_elems + 1) * sizeof(float));
    if (!p->param_init)
        return TD_OOM(ctx, "initial parameters", param_elems * sizeof(float));
    if (params) {
        memcpy(p->param_init, params, param_elems * sizeof(float));
    } else {
        for (uint32_t id = 0; id < p->plans[0].n_nodes; id++) {
            const td_node_def *nd = &p->graph.nodes[id];
            if (nd->op == TD_OP_PARAM && nd->init.kind != TD_INIT_ZEROS)
                td_init_fill(&nd->init, nd->name, p->plans[0].shapes[id].rank, p->plans[0].shapes[id].dims,
                             p->param_init + p->plans[0].slots[id].offset);
        }
    }
    p->ring_bytes = 0;
    for (uint32_t i = 0; i < p->plans[0].n_steps; i++) {
        const td_step *st = &p->plans[0].steps[i];
        if (st->kind == TD_STEP_SEGMENT)
            continue;
        size_t bytes = (size_t)td_shape_count(&p->plans[0].shapes[st->node]) * 4;
        if (bytes > p->ring_bytes)
            p->ring_bytes = bytes;
    }
    if (p->n_grads && p->plans[0].size[TD_BUF_GRADS] * 4 > p->ring_bytes)
        p->ring_bytes = p->plans[0].size[TD_BUF_GRADS] * 4;
    return td_program_on_devices(p, compile_device);
}

static td_status release_job(void *arg, uint32_t pos)
{
    return release_device(arg, pos);
}

static td_status read_params_job(void *arg, uint32_t pos)
{
    td_program *p = arg;
    if (pos != p->job_device)
        return TD_OK;
    td_mesh_device *md = &p->mesh->devices[pos];
    td_status s = md->ops->read(md->dev, p->devs[pos].buffers[TD_BUF_PARAMS], 0, p->job_dst,
                                p->plans[0].size[TD_BUF_PARAMS] * sizeof(float));
    return s == TD_OK ? td_mesh_device_submit_wait(md, td_context_timeout_ms(p->ctx)) : s;
}

void td_program_before_shrink(td_program *p)
{
    if (p->stale || !p->devs || !p->planned)
        return;
    td_context *ctx = p->ctx;
    const uint64_t n = p->plans[0].size[TD_BUF_PARAMS];
    uint32_t survivor = p->n_dev;
    for (uint32_t i = 0; i < p->n_dev && survivor == p->n_dev; i++)
        if (!td_mesh_device_lost(p->mesh, i))
            survivor = i;
    td_free(ctx, p->saved_params);
    p->saved_params = n && survivor < p->n_dev ? td_alloc(ctx, n * sizeof(float)) : NULL;
    p->saved_elems = n;
    if (p->saved_params) {
        p->job_device = survivor;
        p->job_dst = p->saved_params;
        if (td_mesh_run(p->mesh, read_params_job, p) != TD_OK) {
            /* Unreadable: the re-plan starts from the initializers, and says so. */
            char why[512];
            td_error_copy(ctx, why, sizeof why);
            td_log(ctx, TD_LOG_WARN, "a program's parameters could not be read back before the mesh shrank: %s", why);
            td_free(ctx, p->saved_params);
            p->saved_params = NULL;
        }
    }
    td_mesh_run(p->mesh, release_job, p);
    p->stale = true;
}

td_status td_program_refresh(td_program *p)
{
    if (!p->stale)
        return TD_OK;
    td_context *ctx = p->ctx;
    unplan(p);
    td_free(ctx, p->devs);
    p->n_dev = p->mesh->count;
    p->devs = td_alloc_zeroed(ctx, sizeof *p->devs * p->n_dev);
    td_status s = p->devs ? td_mesh_ring(p->mesh, &p->ring) : TD_OOM(ctx, "a program's devices", sizeof *p->devs);
    p->stale = false;
    if (s == TD_OK) {
        s = plan_for_mesh(p, NULL);
        /* The parameters as they were, when the layout is the same (it
         * does not depend on the device count, only on the graph). */
        if (s == TD_OK && p->saved_params && p->saved_elems == p->plans[0].size[TD_BUF_PARAMS] && p->saved_elems)
            s = td_program_write_all_params(p, p->saved_params);
    }
    if (s == TD_OK) {
        td_free(ctx, p->saved_params); /* kept otherwise, for the next try */
        p->saved_params = NULL;
    }
    if (s != TD_OK) {
        if (p->devs)
            td_mesh_run(p->mesh, release_job, p); /* what did compile */
        p->stale = true;                          /* and try again next time */
    }
    return s;
}

td_status td_program_set_split(td_program *p, uint32_t n, const uint32_t *rows)
{
    td_context *ctx = p->ctx;
    if (!rows || n == 0) {
        p->split_total = 0;
        return TD_OK;
    }
    uint32_t *copy = td_alloc(ctx, sizeof *copy * n);
    uint64_t *start = td_alloc(ctx, sizeof *start * n);
    if (!copy || !start) {
        td_free(ctx, copy);
        td_free(ctx, start);
        return TD_OOM(ctx, "a batch split", (sizeof *copy + sizeof *start) * n);
    }
    uint64_t total = 0;
    for (uint32_t d = 0; d < n; d++) {
        copy[d] = rows[d];
        start[d] = total;
        total += rows[d];
    }
    td_free(ctx, p->split_rows);
    td_free(ctx, p->split_start);
    p->split_rows = copy;
    p->split_start = start;
    p->split_devices = n;
    p->split_total = total;
    return TD_OK;
}

td_status td_program_replan(td_program *p, const float *params)
{
    td_context *ctx = p->ctx;
    if (p->stale)
        return td_program_refresh(p);
    const uint64_t n = p->plans[0].size[TD_BUF_PARAMS];
    float *keep = td_alloc(ctx, (n + 1) * sizeof *keep);
    if (!keep)
        return TD_OOM(ctx, "the parameters across a re-plan", n * sizeof *keep);
    memcpy(keep, params, n * sizeof *keep);
    td_status s = td_mesh_run(p->mesh, release_job, p);
    unplan(p);
    if (s == TD_OK)
        s = plan_for_mesh(p, keep);
    if (s == TD_OK) {
        td_free(ctx, keep);
        return TD_OK;
    }
    /* Let go of what did compile, and plan again at the next use (with these
     * parameters) -- the same path a mesh change takes. */
    if (p->devs)
        td_mesh_run(p->mesh, release_job, p);
    td_free(ctx, p->saved_params);
    p->saved_params = keep;
    p->saved_elems = n;
    p->stale = true;
    return s;
}

td_status td_program_set_gemm_precision(td_program *p, int32_t gemm_precision)
{
    if (p->gemm_precision == gemm_precision)
        return TD_OK;
    p->gemm_precision = gemm_precision;
    if (p->stale || !p->planned)
        return TD_OK; /* planned again at its next use, with it */
    /* The same path a mesh change takes: parameters read back from a
     * device, the devices' part released, planned again with them. */
    td_program_before_shrink(p);
    return td_program_refresh(p);
}

uint64_t td_program_row_start(const td_program *p, uint32_t pos, int64_t rows)
{
    const uint32_t g = td_ring_global_position(p->ring, pos);
    return has_split(p) ? p->split_start[g] : (uint64_t)g * (uint64_t)rows;
}

uint64_t td_program_process_rows(const td_program *p, int64_t rows, uint64_t *first)
{
    const uint32_t g = td_ring_global_position(p->ring, 0), n = p->mesh->count;
    if (!has_split(p)) {
        *first = (uint64_t)g * (uint64_t)rows;
        return (uint64_t)n * (uint64_t)rows;
    }
    *first = p->split_start[g];
    uint64_t total = 0;
    for (uint32_t d = 0; d < n; d++)
        total += p->split_rows[g + d];
    return total;
}

static void program_shrink_hook(td_owned *self)
{
    td_program_before_shrink((td_program *)self);
}

/* What plan_for_mesh made, on the host. */
static void unplan(td_program *p)
{
    td_context *ctx = p->ctx;
    if (p->planned)
        free_plans(p);
    p->planned = false;
    td_free(ctx, p->out_host);
    td_free(ctx, p->param_init);
    td_free(ctx, p->step_words);
    p->out_host = p->param_init = NULL;
    p->step_words = NULL;
}

_Static_assert(offsetof(td_program, owned) == 0, "td_owned_destroy frees the block at the td_owned's address");

/* Runs while the mesh is still open: its destroy releases its programs
 * first. */
static void program_release(td_owned *self)
{
    td_program *p = (td_program *)self;
    td_context *ctx = p->ctx;
    if (p->devs && !td_mesh_quiesce(p->mesh)) {
        td_owned_abandon(self); /* a worker stuck in a timed-out run may still be using it */
        return;
    }
    if (p->devs && p->mesh->pool && !p->stale)
        td_mesh_run(p->mesh, release_job, p);
    if (p->devs && td_mesh_any_wedged(p->mesh)) {
        /* A device still runs work past the timeout: its copies from and
         * into this program's host memory (initial values, step words,
         * outputs) may still be pending. */
        td_owned_abandon(self);
        return;
    }
    unplan(p);
    td_free(ctx, p->saved_params);
    td_free(ctx, p->split_rows);
    td_free(ctx, p->split_start);
    td_free(ctx, p->devs);
    td_free(ctx, p->graph.nodes);
    td_free(ctx, p->outputs);
    td_free(ctx, p->output_offset);
    td_free(ctx, p->bound);
    td_free(ctx, p->bucket_bounds);
    td_free(ctx, p->grad_params);
    td_free(ctx, p->grad_nodes);
    p->devs = NULL;
    p->n_outputs = 0;
}

void td_program_destroy(td_program *p)
{
    if (p)
        td_owned_destroy(&p->owned);
}

td_status td_program_compile(td_graph *g, td_mesh *mesh, const uint32_t *split, uint32_t n_outputs,
                             const td_node *outputs, uint32_t n_grads, const td_node *params,
                             const td_node *grads, bool training, int32_t gemm_precision, td_program **out)
{
    if (!g || !mesh)
        return g ? td_error_set(g->ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: mesh is NULL")
                 : TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = g->ctx;
    if (!out)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: out is NULL");
    *out = NULL;
    if (mesh->ctx != ctx)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: the graph and the mesh belong to different contexts");
    td_status live = td_owned_check_live(&g->owned, "td_pmap_compile");
    if (live == TD_OK)
        live = td_owned_check_live(&mesh->owned, "td_pmap_compile");
    if (live != TD_OK)
        return live;
    if (n_outputs && !outputs)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: outputs is NULL for %u outputs", n_outputs);
    for (uint32_t i = 0; i < n_outputs; i++)
        if (outputs[i] >= g->count)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: output %u is node %u, which does not exist",
                                i, outputs[i]);
    for (uint32_t i = 0; i < n_outputs; i++)
        if (g->nodes[outputs[i]].dtype == TD_U8) {
            char what[48];
            snprintf(what, sizeof what, "output %u (node %u)", i, outputs[i]);
            return td_dtype_error(ctx, "td_pmap_compile", what, TD_U8, "f32 or i32 (cast it first)");
        }

    td_ring *ring;
    td_status s = td_mesh_ring(mesh, &ring);
    if (s != TD_OK)
        return s;
    td_program *p = td_alloc_zeroed(ctx, sizeof *p);
    if (!p)
        return TD_OOM(ctx, "a program", sizeof *p);
    p->ctx = ctx;
    p->mesh = mesh;
    p->ring = ring;
    p->n_dev = mesh->count;
    td_context_own(ctx, &p->owned, "program", mesh, program_release);
    p->owned.before_shrink = program_shrink_hook;
    p->graph.ctx = ctx;
    p->graph.count = g->count;
    p->graph.nodes = td_alloc(ctx, sizeof *g->nodes * g->count);
    p->outputs = td_alloc(ctx, sizeof *outputs * (n_outputs + 1));
    p->output_offset = td_alloc(ctx, sizeof *p->output_offset * (n_outputs + 1));
    p->bound = td_alloc_zeroed(ctx, sizeof *p->bound * g->count);
    p->devs = td_alloc_zeroed(ctx, sizeof *p->devs * mesh->count);
    if (!p->graph.nodes || !p->outputs || !p->output_offset || !p->bound || !p->devs) {
        td_program_destroy(p);
        return TD_OOM(ctx, "a program", sizeof *g->nodes * g->count);
    }
    memcpy(p->graph.nodes, g->nodes, sizeof *g->nodes * g->count);
    if (n_outputs)
        memcpy(p->outputs, outputs, sizeof *outputs * n_outputs);
    p->n_outputs = n_outputs;

    p->training = training;
    p->gemm_precision = gemm_precision;
    p->n_grads = n_grads;
    p->grad_params = td_alloc(ctx, sizeof *params * (n_grads + 1));
    p->grad_nodes = td_alloc(ctx, sizeof *grads * (n_grads + 1));
    if (!p->grad_params || !p->grad_nodes) {
        td_program_destroy(p);
        return TD_OOM(ctx, "a program's gradients", sizeof *grads * n_grads);
    }
    if (n_grads) {
        memcpy(p->grad_params, params, sizeof *params * n_grads);
        memcpy(p->grad_nodes, grads, sizeof *grads * n_grads);
    }
    p->trace_name = "run";
    if ((split && (s = td_program_set_split(p, td_ring_global_count(ring), split)) != TD_OK) ||
        (s = plan_for_mesh(p, NULL)) != TD_OK) {
        td_program_destroy(p);
        return s;
    }
    *out = p;
    return TD_OK;
}

td_status td_pmap_compile(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs, td_program **out)
{
    return td_program_compile(g, mesh, NULL, n_outputs, outputs, 0, NULL, NULL, false, TD_GEMM_FP32, out);
}

td_status td_pmap_compile_training(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs,
                                   td_program **out)
{
    return td_program_compile(g, mesh, NULL, n_outputs, outputs, 0, NULL, NULL, true, TD_GEMM_FP32, out);
}
