/* pmap, running: one job per device uploads the bound inputs and the step
 * words, runs the segments and collectives in plan order, then the hook
 * (the trainer's fused all-reduce + update), and copies the outputs into
 * host memory reserved at compile time. Inputs are checked on the host
 * first, so a bad binding is a message, not a device fault. */
#include <string.h>

#include "td_platform.h"
#include "td_program_state.h"
#include "td_trace.h"

static void pmean_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    const td_program *p = user;
    (void)rank;
    (void)offset;
    td_ring_divide(data, count, td_ring_global_count(p->ring)); /* every device of every process */
}

static double seconds_now(void)
{
    return (double)td_platform_now_ns() * 1e-9;
}

/* Ends a phase: waits for the device first when the program asks for it,
 * so the phase owns the work it queued. */
static td_status end_phase(td_program *p, uint32_t pos, td_program_phase phase, double *mark)
{
    const td_status s =
        p->phase_waits ? td_mesh_device_submit_wait(&p->mesh->devices[pos], td_context_timeout_ms(p->ctx)) : TD_OK;
    double t = seconds_now();
    p->devs[pos].phase_seconds[phase] = t - *mark;
    *mark = t;
    return s;
}

static td_arg slot_arg(const td_program *p, uint32_t pos, td_node node)
{
    const td_slot *sl = &td_program_device_plan(p, pos)->slots[node];
    td_arg a = {p->devs[pos].buffers[sl->buffer], sl->offset};
    return a;
}

/* One segment step with every kernel timed alone: each call runs as its
 * own segment (made on the first traced run) and is waited for. */
static td_status run_segment_traced(td_program *p, uint32_t pos, const td_step *st, td_trace *tr, uint32_t track)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    td_program_device *pd = &p->devs[pos];
    const td_plan *plan = td_program_device_plan(p, pos);
    const uint32_t timeout = td_context_timeout_ms(p->ctx);
    if (!pd->call_segments) {
        pd->call_segments = td_alloc_zeroed(p->ctx, sizeof *pd->call_segments * (plan->n_calls + 1));
        pd->call_names = td_alloc_zeroed(p->ctx, sizeof *pd->call_names * (plan->n_calls + 1));
        if (!pd->call_segments || !pd->call_names)
            return TD_OOM(p->ctx, "traced kernel segments", sizeof *pd->call_segments * plan->n_calls);
        td_plan_call_names(&p->graph, plan, pd->call_names);
    }
    td_status s = td_mesh_device_submit_wait(md, timeout);
    for (uint32_t c = st->first_call; c < st->first_call + st->n_calls && s == TD_OK; c++) {
        if (!pd->call_segments[c] &&
            (s = md->ops->segment_create(md->dev, &pd->calls[c], 1, &pd->call_segments[c])) != TD_OK)
            break;
        const uint64_t begin = td_trace_now();
        if ((s = md->ops->segment_run(md->dev, pd->call_segments[c])) == TD_OK &&
            (s = td_mesh_device_submit_wait(md, timeout)) == TD_OK &&
            (s = td_mesh_device_slow_down(p->mesh, pos, td_trace_now() - begin)) == TD_OK) /* an injected slowdown shows */
            td_trace_span(tr, track, "kernel", pd->call_names[c], td_kernel_name(pd->calls[c].kernel), begin,
                          td_trace_now(), 0);
    }
    return s;
}

/* A segment (a plan step's, or a piece of the bucketed schedule) as one
 * enqueue -- waited for and stretched only on a device with an injected
 * slowdown. */
static td_status run_segment(td_program *p, uint32_t pos, td_segment *segment)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    if (!(md->faults.slow > 1.0f))
        return md->ops->segment_run(md->dev, segment);
    const uint64_t begin = td_trace_now();
    td_status s = md->ops->segment_run(md->dev, segment);
    if (s == TD_OK && (s = td_mesh_device_submit_wait(md, td_context_timeout_ms(p->ctx))) == TD_OK)
        s = td_mesh_device_slow_down(p->mesh, pos, td_trace_now() - begin);
    return s;
}

/* One in-graph collective step. Time in collectives is waiting for peers,
 * not this device's work: kept apart for td_program_busy_seconds (with
 * phase waits, the device's queued kernels finish before it starts). */
static td_status run_collective(td_program *p, uint32_t pos, const td_step *st, double *collective_seconds)
{
    const td_plan *plan = td_program_device_plan(p, pos);
    td_ring *ring = p->ring;
    td_status s;
    if (p->phase_waits &&
        (s = td_mesh_device_submit_wait(&p->mesh->devices[pos], td_context_timeout_ms(p->ctx))) != TD_OK)
        return s;
    const double collective_begin = seconds_now();
    td_node in = p->graph.nodes[st->node].in[0];
    td_arg src = slot_arg(p, pos, in), dst = slot_arg(p, pos, st->node);
    size_t count = (size_t)td_shape_count(&plan->shapes[in]);
    if (st->kind == TD_STEP_ALLREDUCE)
        s = td_ring_allreduce(ring, pos, src.buffer, src.offset, dst.buffer, dst.offset, count,
                              st->mean ? pmean_finalize : NULL, p);
    else if (st->kind == TD_STEP_ALL_GATHER)
        s = td_ring_all_gather(ring, pos, src.buffer, src.offset, dst.buffer, dst.offset, count);
    else
        s = td_ring_broadcast(ring, pos, p->graph.nodes[st->node].attr.broadcast.root, src.buffer, src.offset,
                              dst.buffer, dst.offset, count);
    *collective_seconds += seconds_now() - collective_begin;
    return s;
}

/* The begun buckets, [buckets_done, begun) in the buckets' order, go to
 * the bucket function (their all-reduce and update), counted as
 * collective time. */
static td_status finish_buckets(td_program *p, uint32_t pos, uint32_t begun, double *collective_seconds)
{
    td_program_device *pd = &p->devs[pos];
    if (pd->buckets_done >= begun)
        return TD_OK;
    const double begin = seconds_now();
    td_status s = TD_OK;
    for (; pd->buckets_done < begun && s == TD_OK; pd->buckets_done++)
        s = p->bucket_fn(p->bucket_user, pos, pd->bucket_order[pd->buckets_done]);
    pd->bucket_seconds += seconds_now() - begin;
    *collective_seconds += seconds_now() - begin;
    return s;
}

/* The step's segments as the bucketed schedule's pieces (pmap_buckets.c):
 * after each piece, the buckets whose last call it ran go to the bucket
 * function -- or, with a begin function, to it, and to the bucket function
 * after the next piece is enqueued and flushed, so that the device runs it
 * meanwhile. Every device follows the same rule over the same sequence of
 * pieces, so the ring's ops come in one order on all of them. */
static td_status run_pieces(td_program *p, uint32_t pos, td_trace *tr, uint32_t track, double *collective_seconds)
{
    td_program_device *pd = &p->devs[pos];
    td_mesh_device *md = &p->mesh->devices[pos];
    const bool lag = p->bucket_begin_fn != NULL;
    uint32_t begun = pd->buckets_done; /* lag: buckets begun, not yet finished */
    td_status s = TD_OK;
    for (uint32_t i = 0; i < pd->n_pieces && s == TD_OK; i++) {
        if (pd->piece_step[i] != TD_NO_PIECE_STEP) { /* an in-graph collective, in plan order */
            if (lag)
                s = finish_buckets(p, pos, begun, collective_seconds);
            if (s == TD_OK)
                s = run_collective(p, pos, &td_program_device_plan(p, pos)->steps[pd->piece_step[i]],
                                   collective_seconds);
            continue;
        }
        if (td_mesh_device_lost(p->mesh, pos))
            return TD_ERR_DEVICE_LOST; /* as run_device: the timeout named the device */
        if (tr) {
            const td_step piece = {.kind = TD_STEP_SEGMENT, .first_call = pd->piece_first[i], .n_calls = pd->piece_calls[i]};
            s = run_segment_traced(p, pos, &piece, tr, track);
        } else {
            s = run_segment(p, pos, pd->piece_segments[i]);
        }
        if (s != TD_OK)
            continue;
        if (!lag) {
            s = finish_buckets(p, pos, pd->piece_buckets[i], collective_seconds);
            continue;
        }
        uint64_t ticket;
        if (pd->buckets_done < begun && (s = md->ops->submit(md->dev, &ticket)) == TD_OK) /* the piece starts */
            s = finish_buckets(p, pos, begun, collective_seconds);
        for (; begun < pd->piece_buckets[i] && s == TD_OK; begun++)
            s = p->bucket_begin_fn(p->bucket_user, pos, pd->bucket_order[begun]);
    }
    if (lag && s == TD_OK)
        s = finish_buckets(p, pos, begun, collective_seconds);
    return s;
}

static td_status run_device(td_program *p, uint32_t pos)
{
    td_mesh_device *md = &p->mesh->devices[pos];
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    td_program_device *pd = &p->devs[pos];
    const td_plan *plan = td_program_device_plan(p, pos);
    td_status s = TD_OK;
    double mark = seconds_now();
    td_trace *tr = td_trace_of(p->ctx);
    const uint32_t track = tr ? td_trace_device_track(tr, md) : 0;
    const uint64_t run_begin = tr ? td_trace_now() : 0;
    uint64_t bytes = 0;
    double collective_seconds = 0.0;
    if ((s = td_mesh_device_begin_run(p->mesh, pos)) != TD_OK)
        return s;

    for (uint32_t id = 0; id < plan->n_nodes && s == TD_OK; id++) {
        const td_node_def *nd = &p->graph.nodes[id];
        if (nd->op != TD_OP_INPUT || !plan->needed[id])
            continue;
        void *host;
        td_tensor_data(p->bound[id], &host);
        const td_shape *shape = &plan->shapes[id];
        size_t input_bytes = (size_t)td_shape_count(shape) * (nd->dtype == TD_U8 ? 1 : 4);
        size_t offset = 0;
        if (nd->placement == TD_SHARDED && shape->dims[0] > 0) { /* the rows of the devices before it */
            uint64_t first;
            td_program_process_rows(p, shape->dims[0], &first); /* the bound rows start at the process's first */
            offset = input_bytes / (size_t)shape->dims[0] *
                     (size_t)(td_program_row_start(p, pos, shape->dims[0]) - first);
        }
        s = ops->write(dev, pd->buffers[plan->slots[id].buffer], plan->slots[id].offset * 4,
                       (const char *)host + offset, input_bytes);
        bytes += input_bytes;
    }
    if (s == TD_OK && plan->n_step_nodes) {
        const size_t words = plan->size[TD_BUF_STEP];
        uint32_t *w = p->step_words + words * pos;
        for (size_t k = 0; k < words; k += 2)
            w[k] = (uint32_t)p->step; /* the kernels' counter word: the step modulo 2^32 */
        s = ops->write(dev, pd->buffers[TD_BUF_STEP], 0, w, words * sizeof *w);
        bytes += words * sizeof *w;
    }
    if (s == TD_OK && tr && (s = td_mesh_device_submit_wait(md, td_context_timeout_ms(p->ctx))) == TD_OK)
        td_trace_span(tr, track, "copy", "upload host->device", NULL, run_begin, td_trace_now(), bytes);
    if (s == TD_OK)
        s = end_phase(p, pos, TD_PHASE_UPLOAD, &mark);
    pd->buckets_done = 0;
    pd->bucket_seconds = 0.0;
    if (s == TD_OK && p->n_buckets && !pd->pieces_tried)
        s = td_program_make_pieces(p, pos);
    /* The bucketed schedule's pieces, or the plan's steps as they are. */
    const bool pieces = s == TD_OK && pd->n_pieces > 0;
    if (pieces)
        s = run_pieces(p, pos, tr, track, &collective_seconds);
    for (uint32_t i = 0; !pieces && i < plan->n_steps && s == TD_OK; i++) {
        const td_step *st = &plan->steps[i];
        if (st->kind == TD_STEP_SEGMENT) {
            /* Fenced off while inside this run (worker.c): no more work is
             * enqueued, so a GPU device's stale run ends with the wait it
             * is in (a CPU device's backend stops inside the segment). No
             * message: the timeout named the device. */
            if (td_mesh_device_lost(p->mesh, pos))
                s = TD_ERR_DEVICE_LOST;
            else
                s = tr ? run_segment_traced(p, pos, st, tr, track) : run_segment(p, pos, p->devs[pos].segments[i]);
            continue;
        }
        s = run_collective(p, pos, st, &collective_seconds);
    }
    pd->collective_seconds = collective_seconds;
    if (s == TD_OK)
        s = end_phase(p, pos, TD_PHASE_COMPUTE, &mark);
    if (s == TD_OK && p->hook)
        s = p->hook(p->hook_user, pos);
    if (s == TD_OK) {
        double t = seconds_now();
        pd->phase_seconds[TD_PHASE_HOOK] = t - mark;
        mark = t;
    }
    const uint64_t download_begin = tr ? td_trace_now() : 0;
    bytes = 0;
    for (uint32_t i = 0; i < p->n_outputs && s == TD_OK; i++) {
        td_node o = p->outputs[i];
        size_t count = (size_t)td_shape_count(&plan->shapes[o]);
        td_arg a = slot_arg(p, pos, o);
        s = ops->read(dev, a.buffer, a.offset * 4, p->out_host + p->output_offset[i] + count * pos, count * 4);
        bytes += count * 4;
    }
    if (s == TD_OK)
        s = td_mesh_device_submit_wait(md, td_context_timeout_ms(p->ctx));
    if (s == TD_OK)
        pd->phase_seconds[TD_PHASE_DOWNLOAD] = seconds_now() - mark;
    if (s == TD_OK && tr) {
        const uint64_t end = td_trace_now();
        td_trace_span(tr, track, "copy", "download device->host", NULL, download_begin, end, bytes);
        td_trace_span(tr, track, "run", p->trace_name, NULL, run_begin, end, 0);
    }
    return s;
}

td_status td_program_run(td_program *p, uint32_t n_bindings, const td_binding *bindings)
{
    return td_program_run_for(p, n_bindings, bindings, "td_program_run");
}

td_status td_program_run_for(td_program *p, uint32_t n_bindings, const td_binding *bindings, const char *fn)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_context *ctx = p->ctx;
    td_status live = td_owned_check_live(&p->owned, fn);
    if (live != TD_OK)
        return live;
    if (n_bindings && !bindings)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: bindings is NULL for %u bindings", fn, n_bindings);
    /* The jobs read p->bound: a job that timed out may still be ending on
     * a fenced-off device, and rebinding under it would hand it this
     * run's tensors halfway through its upload (and is a data race). So
     * wait for it first, within the timeout, before anything the jobs
     * read changes -- td_program_on_devices waits too, but that is too
     * late for the bindings. Between runs no job is inside, and this is
     * one uncontended lock. */
    if ((live = td_mesh_wait_quiet(p->mesh)) != TD_OK)
        return live;
    /* The mesh dropped devices since the last run: plan for it first, so the
     * bindings are checked against the plan that will run. */
    if (p->stale && (live = td_program_refresh(p)) != TD_OK)
        return live;
    memset(p->bound, 0, sizeof *p->bound * p->plans[0].n_nodes);
    for (uint32_t i = 0; i < n_bindings; i++) {
        td_node n = bindings[i].node;
        if (n >= p->plans[0].n_nodes || p->graph.nodes[n].op != TD_OP_INPUT)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "binding %u: node %u is not an input of the graph", i, n);
        if (p->bound[n])
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "binding %u: input '%s' is bound twice", i,
                                p->graph.nodes[n].name);
        /* Across processes each binds its own rows of a sharded input. */
        td_shape want = p->graph.nodes[n].shape;
        if (p->graph.nodes[n].placement == TD_SHARDED && td_ring_process_count(p->ring) > 1 && want.rank > 0) {
            uint64_t first;
            const int64_t per_device = want.dims[0] / (int64_t)td_ring_global_count(p->ring);
            want.dims[0] = (int64_t)td_program_process_rows(p, per_device, &first);
        }
        td_status s = td_program_check_tensor(ctx, fn, bindings[i].value, p->graph.nodes[n].dtype, &want, "input",
                                              p->graph.nodes[n].name);
        if (s != TD_OK)
            return s;
        p->bound[n] = bindings[i].value;
    }
    for (uint32_t id = 0; id < p->plans[0].n_nodes; id++) {
        const td_node_def *nd = &p->graph.nodes[id];
        if (nd->op == TD_OP_INPUT && p->plans[0].needed[id] && !p->bound[id])
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "input '%s' (node %u) is not bound", nd->name, id);
        td_node label_src = nd->op == TD_OP_XENT ? nd->in[1] : 0;
        while (nd->op == TD_OP_XENT && p->graph.nodes[label_src].op == TD_OP_RESHAPE)
            label_src = p->graph.nodes[label_src].in[0]; /* reshapes keep the values */
        if (nd->op == TD_OP_XENT && p->plans[0].needed[id] && p->graph.nodes[label_src].op == TD_OP_INPUT) {
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
    return td_program_on_devices(p, run_device);
}

td_status td_program_set_step(td_program *p, uint64_t step)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_status live = td_owned_check_live(&p->owned, "td_program_set_step");
    if (live != TD_OK)
        return live;
    p->step = step;
    return TD_OK;
}

void td_program_set_phase_waits(td_program *p, bool on)
{
    p->phase_waits = on;
}

void td_program_set_trace_name(td_program *p, const char *name)
{
    p->trace_name = name;
}

void td_program_phase_seconds(const td_program *p, uint32_t position, double *seconds)
{
    memcpy(seconds, p->devs[position].phase_seconds, sizeof p->devs[position].phase_seconds);
}

double td_program_busy_seconds(const td_program *p, uint32_t position)
{
    const td_program_device *pd = &p->devs[position];
    const double busy =
        pd->phase_seconds[TD_PHASE_UPLOAD] + pd->phase_seconds[TD_PHASE_COMPUTE] - pd->collective_seconds;
    return busy > 0.0 ? busy : 0.0;
}

float td_program_shard_weight(const td_program *p, uint32_t position)
{
    return td_program_device_plan(p, position)->shard_weight;
}

void td_program_set_hook(td_program *p, td_program_hook hook, void *user)
{
    p->hook = hook;
    p->hook_user = user;
}

td_status td_program_output_shape(const td_program *p, uint32_t index, uint32_t *rank, int64_t *dims)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_status live = td_owned_check_live(&p->owned, "td_program_output_shape");
    if (live != TD_OK)
        return live;
    if (!rank || !dims || index >= p->n_outputs)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "td_program_output_shape: output %u of %u, or NULL arguments",
                            index, p->n_outputs);
    const td_shape *s = &p->plans[0].shapes[p->outputs[index]];
    *rank = s->rank;
    memcpy(dims, s->dims, sizeof(int64_t) * s->rank);
    return TD_OK;
}

const float *td_program_output_host(const td_program *p, uint32_t index, uint32_t device)
{
    size_t count = (size_t)td_shape_count(&p->plans[0].shapes[p->outputs[index]]);
    return p->out_host + p->output_offset[index] + count * device;
}

td_status td_program_read_output(td_program *p, uint32_t index, uint32_t device, td_tensor *out)
{
    if (!p)
        return TD_ERR_INVALID_ARGUMENT;
    td_status live = td_owned_check_live(&p->owned, "td_program_read_output");
    if (live != TD_OK)
        return live;
    if (index >= p->n_outputs)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "output %u does not exist (program has %u)", index,
                            p->n_outputs);
    if (device >= p->n_dev)
        return td_error_set(p->ctx, TD_ERR_INVALID_ARGUMENT, "device %u is not in the mesh (%u devices)", device,
                            p->n_dev);
    const td_shape *sh = &p->plans[0].shapes[p->outputs[index]];
    td_status s = td_program_check_tensor(p->ctx, "td_program_read_output", out, p->graph.nodes[p->outputs[index]].dtype,
                                          sh, "output", "result");
    if (s != TD_OK)
        return s;
    void *data;
    td_tensor_data(out, &data);
    memcpy(data, td_program_output_host(p, index, device), (size_t)td_shape_count(sh) * 4);
    return TD_OK;
}
