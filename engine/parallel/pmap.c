/* pmap: compiling a graph for a mesh and running it on every device at once.
 *
 * Compile (one job per device): allocate the arena, parameter and gradient
 * buffers, emit the kernel calls, create the segments, reserve ring staging.
 * Run (one job per device): upload inputs, run segments and collectives in
 * order, copy the outputs to host memory reserved at compile time. A failing
 * device aborts the ring so its peers return instead of waiting. */
#include <stdio.h>
#include <string.h>

#include "td_init_internal.h"
#include "td_program_internal.h"
#include "td_ring.h"

typedef struct program_device {
    td_buffer *buffers[TD_BUF_COUNT];
    td_segment **segments; /* per step; NULL for collective steps */
} program_device;

typedef enum job_kind { JOB_COMPILE, JOB_RUN, JOB_SET_PARAM, JOB_READ_PARAM, JOB_WRITE_ALL_PARAMS, JOB_RELEASE } job_kind;

struct td_program {
    td_owned owned;
    td_context *ctx;
    td_mesh *mesh;
    td_ring *ring; /* the mesh's, shared with every program on it */
    uint32_t n_dev;
    td_graph graph; /* a private copy of the nodes, so the caller's graph may go */
    td_plan plan;
    uint32_t n_outputs;
    td_node *outputs;
    size_t *output_offset; /* into out_host, per output; each holds n_dev copies */
    float *out_host;
    float *param_init; /* every parameter's initial values, laid out as the parameter buffer */
    /* The step buffer's host image, per device (plan.size[TD_BUF_STEP]
     * words each): the example offsets are fixed at compile, the step is
     * refreshed before every run. */
    uint32_t *step_words;
    uint64_t step;
    program_device *devs;
    const td_tensor **bound; /* per node, during a run */
    td_program_hook hook;
    void *hook_user;
    size_t ring_bytes;
    /* job arguments */
    job_kind job;
    td_node job_node;
    uint32_t job_device;
    const void *job_src;
    void *job_dst;
};

static td_status compile_device(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    program_device *pd = &p->devs[pos];
    td_context *ctx = p->ctx;
    td_status s = TD_OK;
    for (int b = 0; b < TD_BUF_COUNT && s == TD_OK; b++) {
        size_t elems = p->plan.size[b] ? p->plan.size[b] : 16;
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
    zero.n = (int64_t)p->plan.size[TD_BUF_GRADS];
    td_segment *init = NULL;
    uint64_t ticket;
    if ((s = md->ops->segment_create(md->dev, &zero, 1, &init)) != TD_OK)
        return s;
    s = md->ops->segment_run(md->dev, init);
    if (s == TD_OK && p->plan.size[TD_BUF_PARAMS])
        s = md->ops->write(md->dev, pd->buffers[TD_BUF_PARAMS], 0, p->param_init, p->plan.size[TD_BUF_PARAMS] * 4);
    if (s == TD_OK)
        s = md->ops->submit(md->dev, &ticket);
    if (s == TD_OK)
        s = md->ops->wait(md->dev, ticket, td_context_timeout_ms(ctx));
    md->ops->segment_destroy(md->dev, init);
    if (s != TD_OK)
        return s;

    pd->segments = td_alloc_zeroed(ctx, sizeof *pd->segments * (p->plan.n_steps + 1));
    td_kernel_call *calls = td_alloc_zeroed(ctx, sizeof *calls * (p->plan.n_calls + 1));
    if (!pd->segments || !calls) {
        td_free(ctx, calls);
        return TD_OOM(ctx, "device plan", sizeof *calls * p->plan.n_calls);
    }
    s = td_plan_emit(&p->graph, &p->plan, pd->buffers, pos, calls);
    for (uint32_t i = 0; i < p->plan.n_steps && s == TD_OK; i++) {
        const td_step *st = &p->plan.steps[i];
        if (st->kind == TD_STEP_SEGMENT)
            s = md->ops->segment_create(md->dev, calls + st->first_call, st->n_calls, &pd->segments[i]);
    }
    td_free(ctx, calls);
    if (s == TD_OK && p->ring_bytes)
        s = td_ring_reserve(p->ring, pos, p->ring_bytes);
    return s;
}

static void release_device(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    program_device *pd = &p->devs[pos];
    if (pd->segments) {
        for (uint32_t i = 0; i < p->plan.n_steps; i++)
            if (pd->segments[i])
                md->ops->segment_destroy(md->dev, pd->segments[i]);
        td_free(p->ctx, pd->segments);
        pd->segments = NULL;
    }
    for (int b = 0; b < TD_BUF_COUNT; b++)
        if (pd->buffers[b]) {
            md->ops->buffer_destroy(md->dev, pd->buffers[b]);
            pd->buffers[b] = NULL;
        }
}

static void pmean_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    const td_program *p = user;
    (void)rank;
    (void)offset;
    td_ring_divide(data, count, p->n_dev);
}

static td_arg slot_arg(const td_program *p, uint32_t pos, td_node node)
{
    const td_slot *sl = &p->plan.slots[node];
    td_arg a = {p->devs[pos].buffers[sl->buffer], sl->offset};
    return a;
}

static td_status run_device(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    program_device *pd = &p->devs[pos];
    td_status s = TD_OK;

    for (uint32_t id = 0; id < p->plan.n_nodes && s == TD_OK; id++) {
        const td_node_def *nd = &p->graph.nodes[id];
        if (nd->op != TD_OP_INPUT || !p->plan.needed[id])
            continue;
        void *host;
        td_tensor_data(p->bound[id], &host);
        size_t bytes = (size_t)td_shape_count(&p->plan.shapes[id]) * (nd->dtype == TD_U8 ? 1 : 4);
        size_t offset = nd->placement == TD_SHARDED ? bytes * pos : 0;
        s = ops->write(dev, pd->buffers[p->plan.slots[id].buffer], p->plan.slots[id].offset * 4,
                       (const char *)host + offset, bytes);
    }
    td_ring *ring = p->ring;
    if (s == TD_OK && p->plan.n_step_nodes) {
        const size_t words = p->plan.size[TD_BUF_STEP];
        uint32_t *w = p->step_words + words * pos;
        for (size_t k = 0; k < words; k += 2)
            w[k] = (uint32_t)p->step; /* the kernels' counter word: the step modulo 2^32 */
        s = ops->write(dev, pd->buffers[TD_BUF_STEP], 0, w, words * sizeof *w);
    }
    for (uint32_t i = 0; i < p->plan.n_steps && s == TD_OK; i++) {
        const td_step *st = &p->plan.steps[i];
        if (st->kind == TD_STEP_SEGMENT) {
            s = ops->segment_run(dev, pd->segments[i]);
            continue;
        }
        td_node in = p->graph.nodes[st->node].in[0];
        td_arg src = slot_arg(p, pos, in), dst = slot_arg(p, pos, st->node);
        size_t count = (size_t)td_shape_count(&p->plan.shapes[in]);
        if (st->kind == TD_STEP_ALLREDUCE)
            s = td_ring_allreduce(ring, pos, src.buffer, src.offset, dst.buffer, dst.offset, count,
                                  st->mean ? pmean_finalize : NULL, p);
        else if (st->kind == TD_STEP_ALL_GATHER)
            s = td_ring_all_gather(ring, pos, src.buffer, src.offset, dst.buffer, dst.offset, count);
        else
            s = td_ring_broadcast(ring, pos, p->graph.nodes[st->node].attr.broadcast.root, src.buffer, src.offset, dst.buffer,
                                  dst.offset, count);
    }
    if (s == TD_OK && p->hook)
        s = p->hook(p->hook_user, pos);
    for (uint32_t i = 0; i < p->n_outputs && s == TD_OK; i++) {
        td_node o = p->outputs[i];
        size_t count = (size_t)td_shape_count(&p->plan.shapes[o]);
        td_arg a = slot_arg(p, pos, o);
        s = ops->read(dev, a.buffer, a.offset * 4, p->out_host + p->output_offset[i] + count * pos, count * 4);
    }
    uint64_t ticket;
    if (s == TD_OK && (s = ops->submit(dev, &ticket)) == TD_OK)
        s = ops->wait(dev, ticket, td_context_timeout_ms(p->ctx));
    return s;
}

static td_status param_job(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    const td_slot *sl = &p->plan.slots[p->job_node];
    size_t bytes = (size_t)td_shape_count(&p->plan.shapes[p->job_node]) * 4;
    td_buffer *buf = p->devs[pos].buffers[TD_BUF_PARAMS];
    td_status s;
    if (p->job == JOB_WRITE_ALL_PARAMS)
        s = md->ops->write(md->dev, buf, 0, p->job_src, p->plan.size[TD_BUF_PARAMS] * 4);
    else if (p->job == JOB_SET_PARAM)
        s = md->ops->write(md->dev, buf, sl->offset * 4, p->job_src, bytes);
    else if (pos == p->job_device)
        s = md->ops->read(md->dev, buf, sl->offset * 4, p->job_dst, bytes);
    else
        return TD_OK;
    uint64_t ticket;
    if (s == TD_OK && (s = md->ops->submit(md->dev, &ticket)) == TD_OK)
        s = md->ops->wait(md->dev, ticket, td_context_timeout_ms(p->ctx));
    return s;
}

static td_status program_job(void *arg, uint32_t pos)
{
    td_program *p = arg;
    td_status s;
    switch (p->job) {
    case JOB_COMPILE: s = compile_device(p, pos); break;
    case JOB_RUN: s = run_device(p, pos); break;
    case JOB_SET_PARAM:
    case JOB_READ_PARAM:
    case JOB_WRITE_ALL_PARAMS: s = param_job(p, pos); break;
    case JOB_RELEASE: release_device(p, pos); return TD_OK;
    default: s = TD_ERR_STATE; break;
    }
    if (s != TD_OK && s != TD_ERR_ABORTED)
        td_ring_abort(p->ring, s); /* wake the peers waiting on this device */
    return s;
}

static td_status run_job(td_program *p, job_kind kind)
{
    if (td_ring_failed(p->ring))
        td_ring_reset(p->ring); /* no worker is inside a collective between jobs */
    p->job = kind;
    return td_mesh_run(p->mesh, program_job, p);
}

static void program_destroy_owned(td_owned *self)
{
    td_program_destroy((td_program *)self);
}

void td_program_destroy(td_program *p)
{
    if (!p)
        return;
    td_context *ctx = p->ctx;
    td_context_disown(ctx, &p->owned);
    if (p->devs && p->mesh->pool)
        run_job(p, JOB_RELEASE);
    td_plan_free(ctx, &p->plan);
    td_free(ctx, p->devs);
    td_free(ctx, p->graph.nodes);
    td_free(ctx, p->outputs);
    td_free(ctx, p->output_offset);
    td_free(ctx, p->out_host);
    td_free(ctx, p->param_init);
    td_free(ctx, p->step_words);
    td_free(ctx, p->bound);
    td_free(ctx, p);
}

td_status td_program_compile(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs,
                             uint32_t n_grads, const td_node *params, const td_node *grads, bool training,
                             td_program **out)
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
    if (n_outputs && !outputs)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: outputs is NULL for %u outputs", n_outputs);
    for (uint32_t i = 0; i < n_outputs; i++)
        if (outputs[i] >= g->count)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_pmap_compile: output %u is node %u, which does not exist",
                                i, outputs[i]);
    for (uint32_t i = 0; i < n_outputs; i++)
        if (g->nodes[outputs[i]].dtype == TD_U8)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_pmap_compile: output %u (node %u) is u8; outputs are f32 or i32 (cast it first)", i,
                                outputs[i]);

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
    td_context_own(ctx, &p->owned, program_destroy_owned);
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

    s = td_plan_build(&p->graph, mesh->count, n_outputs, outputs, n_grads, params, grads, training, &p->plan);
    if (s != TD_OK) {
        td_free(ctx, p->devs);
        p->devs = NULL;
        td_program_destroy(p);
        return s;
    }
    const size_t step_words = p->plan.size[TD_BUF_STEP];
    p->step_words = td_alloc_zeroed(ctx, (step_words * mesh->count + 1) * sizeof *p->step_words);
    if (!p->step_words) {
        td_program_destroy(p);
        return TD_OOM(ctx, "step words", step_words * mesh->count * sizeof *p->step_words);
    }
    /* Device d's row 0 is example d x rows: the mesh shards along axis 0. */
    for (uint32_t d = 0; d < mesh->count; d++)
        for (uint32_t k = 0; k < p->plan.n_step_nodes; k++)
            p->step_words[step_words * d + 2 * k + 1] =
                (uint32_t)((uint64_t)d * (uint64_t)p->plan.shapes[p->plan.step_nodes[k]].dims[0]);
    size_t total = 0;
    for (uint32_t i = 0; i < n_outputs; i++) {
        p->output_offset[i] = total;
        total += (size_t)td_shape_count(&p->plan.shapes[outputs[i]]) * mesh->count;
    }
    p->out_host = td_alloc_zeroed(ctx, (total + 1) * sizeof(float));
    if (!p->out_host) {
        td_program_destroy(p);
        return TD_OOM(ctx, "program outputs", total * sizeof(float));
    }
    uint64_t param_elems = p->plan.size[TD_BUF_PARAMS];
    p->param_init = td_alloc_zeroed(ctx, (param_elems + 1) * sizeof(float));
    if (!p->param_init) {
        td_program_destroy(p); /* frees the plan: the size was read before */
        return TD_OOM(ctx, "initial parameters", param_elems * sizeof(float));
    }
    for (uint32_t id = 0; id < p->plan.n_nodes; id++) {
        const td_node_def *nd = &p->graph.nodes[id];
        if (nd->op == TD_OP_PARAM && nd->init.kind != TD_INIT_ZEROS)
            td_init_fill(&nd->init, nd->name, p->plan.shapes[id].rank, p->plan.shapes[id].dims,
                         p->param_init + p->plan.slots[id].offset);
    }
    for (uint32_t i = 0; i < p->plan.n_steps; i++) {
        const td_step *st = &p->plan.steps[i];
        if (st->kind == TD_STEP_SEGMENT)
            continue;
        size_t bytes = (size_t)td_shape_count(&p->plan.shapes[st->node]) * 4;
        if (bytes > p->ring_bytes)
            p->ring_bytes = bytes;
    }
    if (n_grads && p->plan.size[TD_BUF_GRADS] * 4 > p->ring_bytes)
        p->ring_bytes = p->plan.size[TD_BUF_GRADS] * 4;
    if ((s = run_job(p, JOB_COMPILE)) != TD_OK) {
        td_program_destroy(p);
        return s;
    }
    *out = p;
    return TD_OK;
}

td_status td_pmap_compile(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs, td_program **out)
{
    return td_program_compile(g, mesh, n_outputs, outputs, 0, NULL, NULL, false, out);
}

td_status td_pmap_compile_training(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs,
                                   td_program **out)
{
    return td_program_compile(g, mesh, n_outputs, outputs, 0, NULL, NULL, true, out);
}

static td_status check_tensor(td_context *ctx, const td_tensor *t, td_dtype dtype, const td_shape *want,
                              const char *what, const char *name)
{
    td_dtype dt;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    if (!t)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s '%s': the tensor is NULL", what, name);
    td_tensor_dtype(t, &dt);
    td_tensor_shape(t, &rank, dims);
    if (dt != dtype)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s '%s': tensor is %s, expected %s", what, name,
                            td_dtype_name(dt), td_dtype_name(dtype));
    int same = rank == want->rank;
    for (uint32_t i = 0; same && i < rank; i++)
        same = dims[i] == want->dims[i];
    if (!same) {
        char got[96], exp[96];
        size_t u = 0, v = 0;
        for (uint32_t i = 0; i < rank; i++)
            u += (size_t)snprintf(got + u, sizeof got - u, "%s%lld", i ? "," : "", (long long)dims[i]);
        got[u] = 0;
        for (uint32_t i = 0; i < want->rank; i++)
            v += (size_t)snprintf(exp + v, sizeof exp - v, "%s%lld", i ? "," : "", (long long)want->dims[i]);
        exp[v] = 0;
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s '%s': tensor has shape [%s], expected [%s]", what, name, got,
                            exp);
    }
    return TD_OK;
}

td_status td_program_run(td_program *p, uint32_t n_bindings, const td_binding *bindings)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = p->ctx;
    if (n_bindings && !bindings)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_program_run: bindings is NULL for %u bindings", n_bindings);
    memset(p->bound, 0, sizeof *p->bound * p->plan.n_nodes);
    for (uint32_t i = 0; i < n_bindings; i++) {
        td_node n = bindings[i].node;
        if (n >= p->plan.n_nodes || p->graph.nodes[n].op != TD_OP_INPUT)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "binding %u: node %u is not an input of the graph", i, n);
        if (p->bound[n])
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "binding %u: input '%s' is bound twice", i,
                                p->graph.nodes[n].name);
        td_status s = check_tensor(ctx, bindings[i].value, p->graph.nodes[n].dtype, &p->graph.nodes[n].shape, "input",
                                   p->graph.nodes[n].name);
        if (s != TD_OK)
            return s;
        p->bound[n] = bindings[i].value;
    }
    for (uint32_t id = 0; id < p->plan.n_nodes; id++) {
        const td_node_def *nd = &p->graph.nodes[id];
        if (nd->op == TD_OP_INPUT && p->plan.needed[id] && !p->bound[id])
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "input '%s' (node %u) is not bound", nd->name, id);
        td_node label_src = nd->op == TD_OP_XENT ? nd->in[1] : 0;
        while (nd->op == TD_OP_XENT && p->graph.nodes[label_src].op == TD_OP_RESHAPE)
            label_src = p->graph.nodes[label_src].in[0]; /* reshapes keep the values */
        if (nd->op == TD_OP_XENT && p->plan.needed[id] && p->graph.nodes[label_src].op == TD_OP_INPUT) {
            /* A label outside [0, C) would silently give NaN: say which.
             * Labels computed on the device are not checked here; the
             * kernel gives NaN for the row (td_kernel.h), never reads out
             * of bounds. */
            const td_tensor *t = p->bound[label_src];
            int64_t classes = p->graph.nodes[nd->in[0]].shape.dims[1];
            size_t count;
            void *data;
            td_tensor_count(t, &count);
            td_tensor_data(t, &data);
            for (size_t i = 0; i < count; i++) {
                int32_t label = ((const int32_t *)data)[i];
                if (label < 0 || label >= classes)
                    return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                        "input '%s': label %d at index %zu is outside [0, %lld)",
                                        p->graph.nodes[label_src].name, label, i, (long long)classes);
            }
        }
    }
    td_error_clear(ctx);
    return run_job(p, JOB_RUN);
}

td_status td_program_output_shape(const td_program *p, uint32_t index, uint32_t *rank, int64_t *dims)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    if (!rank || !dims || index >= p->n_outputs)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "td_program_output_shape: output %u of %u, or NULL arguments",
                            index, p->n_outputs);
    const td_shape *s = &p->plan.shapes[p->outputs[index]];
    *rank = s->rank;
    memcpy(dims, s->dims, sizeof(int64_t) * s->rank);
    return TD_OK;
}

const float *td_program_output_host(const td_program *p, uint32_t index, uint32_t device)
{
    size_t count = (size_t)td_shape_count(&p->plan.shapes[p->outputs[index]]);
    return p->out_host + p->output_offset[index] + count * device;
}

td_status td_program_read_output(td_program *p, uint32_t index, uint32_t device, td_tensor *out)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    if (index >= p->n_outputs)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "output %u does not exist (program has %u)", index,
                            p->n_outputs);
    if (device >= p->n_dev)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "device %u is not in the mesh (%u devices)", device,
                            p->n_dev);
    const td_shape *sh = &p->plan.shapes[p->outputs[index]];
    td_status s = check_tensor(p->ctx, out, p->graph.nodes[p->outputs[index]].dtype, sh, "output", "result");
    if (s != TD_OK)
        return s;
    void *data;
    td_tensor_data(out, &data);
    memcpy(data, td_program_output_host(p, index, device), (size_t)td_shape_count(sh) * 4);
    return TD_OK;
}

static td_status check_param(td_program *p, td_node param, const td_tensor *t, const char *fn)
{
    if (param >= p->plan.n_nodes || p->graph.nodes[param].op != TD_OP_PARAM)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "%s: node %u is not a parameter", fn, param);
    return check_tensor(p->ctx, t, TD_F32, &p->plan.shapes[param], "parameter", p->graph.nodes[param].name);
}

td_status td_program_set_param(td_program *p, td_node param, const td_tensor *value)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = check_param(p, param, value, "td_program_set_param");
    if (s != TD_OK)
        return s;
    void *data;
    td_tensor_data(value, &data);
    p->job_node = param;
    p->job_src = data;
    return run_job(p, JOB_SET_PARAM);
}

td_status td_program_read_param(td_program *p, td_node param, uint32_t device, td_tensor *out)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = check_param(p, param, out, "td_program_read_param");
    if (s != TD_OK)
        return s;
    if (device >= p->n_dev)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "device %u is not in the mesh (%u devices)", device,
                            p->n_dev);
    void *data;
    td_tensor_data(out, &data);
    p->job_node = param;
    p->job_device = device;
    p->job_dst = data;
    return run_job(p, JOB_READ_PARAM);
}

td_status td_program_write_all_params(td_program *p, const float *params)
{
    p->job_src = params;
    return run_job(p, JOB_WRITE_ALL_PARAMS);
}

const float *td_program_initial_params(const td_program *p)
{
    return p->param_init;
}

td_status td_program_set_step(td_program *p, uint64_t step)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    p->step = step;
    return TD_OK;
}

void td_program_disown(td_program *p)
{
    td_context_disown(p->ctx, &p->owned);
}

void td_program_set_hook(td_program *p, td_program_hook hook, void *user)
{
    p->hook = hook;
    p->hook_user = user;
}

const td_plan *td_program_plan(const td_program *p)
{
    return &p->plan;
}

td_buffer *td_program_buffer(const td_program *p, uint32_t position, int which)
{
    return p->devs[position].buffers[which];
}

td_ring *td_program_ring(const td_program *p)
{
    return p->ring;
}

const td_node_def *td_program_node(const td_program *p, td_node node)
{
    return &p->graph.nodes[node];
}
