/* The all-reduce overlapped with backward (td_trainer_options.
 * overlap_bucket_bytes): bucket by bucket between backward's kernels, it
 * must leave bitwise the parameters of the one all-reduce after backward
 * -- on any device count, on an MLP and a CNN, whether the buckets run
 * (and they must run where they can) or the step falls back (clipping,
 * accumulation) -- and a step failing between two buckets must leave
 * nothing of itself behind. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_mesh_internal.h"
#include "td_program_state.h"
#include "td_trainer_state.h"

#define BATCH 12
#define STEPS 5

typedef enum { NET_MLP, NET_CNN, NET_CNN_SYNC_BN } net_kind;

typedef struct net {
    td_graph *g;
    td_node x, y, loss;
    uint32_t n_params;
    td_node params[16];
} net;

/* MLP: 16 -> 24 tanh -> 20 relu -> 3. CNN: 8x8x1, conv 3x3 4 relu,
 * max-pool, conv 3x3 6 tanh, dense 3; NET_CNN_SYNC_BN with a synchronized
 * batch norm after the first conv, whose all-reduces (forward and
 * backward) are in-graph collectives the buckets run among, and whose
 * running statistics are updated states. Several layers, so several
 * buckets complete at different points of backward. */
static void build(td_context *ctx, net *n, net_kind kind)
{
    memset(n, 0, sizeof *n);
    TEST_OK(ctx, td_graph_create(ctx, &n->g));
    const int64_t yd[1] = {BATCH};
    td_node h;
    if (kind == NET_MLP) {
        const int64_t xd[2] = {BATCH, 16};
        TEST_OK(ctx, td_graph_input(n->g, "x", TD_F32, 2, xd, TD_SHARDED, &n->x));
        TEST_OK(ctx, td_layer_dense(n->g, "d1", n->x, 24, true, 3, &h));
        TEST_OK(ctx, td_graph_tanh(n->g, h, &h));
        TEST_OK(ctx, td_layer_dense(n->g, "d2", h, 20, true, 4, &h));
        TEST_OK(ctx, td_graph_relu(n->g, h, &h));
    } else {
        const int64_t xd[4] = {BATCH, 8, 8, 1}, flat[2] = {-1, 96};
        TEST_OK(ctx, td_graph_input(n->g, "x", TD_F32, 4, xd, TD_SHARDED, &n->x));
        TEST_OK(ctx, td_layer_conv2d(n->g, "c1", n->x, 4, 3, 3, NULL, kind == NET_CNN, 7, &h));
        if (kind == NET_CNN_SYNC_BN) {
            td_batch_norm_options bo;
            td_batch_norm_options_init(&bo);
            bo.sync = true;
            bo.momentum = 0.9f;
            TEST_OK(ctx, td_layer_batch_norm(n->g, "bn", h, &bo, &h));
        }
        TEST_OK(ctx, td_graph_relu(n->g, h, &h));
        TEST_OK(ctx, td_graph_max_pool2d(n->g, h, NULL, &h));
        TEST_OK(ctx, td_layer_conv2d(n->g, "c2", h, 6, 3, 3, NULL, true, 8, &h));
        TEST_OK(ctx, td_graph_tanh(n->g, h, &h));
        TEST_OK(ctx, td_graph_reshape(n->g, h, 2, flat, &h));
    }
    TEST_OK(ctx, td_graph_input(n->g, "y", TD_I32, 1, yd, TD_SHARDED, &n->y));
    TEST_OK(ctx, td_layer_dense(n->g, "out", h, 3, true, 5, &h));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(n->g, h, n->y, &n->loss));
    TEST_OK(ctx, td_graph_params(n->g, 16, n->params, &n->n_params));
}

typedef struct run_options {
    const char *spec;
    net_kind kind;
    uint64_t bucket_bytes;
    float max_norm;
    uint32_t accumulate;
    int fail_step;          /* this step fails once, then runs again (-1: none) */
    int fail_segment;       /* ...at device 1's fail_segment-th segment run of that step */
    bool continue_on_loss;  /* on_device_loss = continue */
    bool uneven;            /* an explicit split 1:2:3: a plan per row count */
    bool log_device0;       /* log device 0's backend calls in the last step (a ring that is not direct) */
} run_options;

typedef struct run_result {
    float *master;
    size_t elems;
    uint32_t buckets;      /* the trainer's buckets */
    uint32_t buckets_done; /* device 0's buckets run before the last step's hook */
    uint32_t pieces;       /* device 0's pieces */
    bool direct;           /* the ring's direct all-reduce ran the buckets */
    bool lagged;           /* each bucket's copy to the host began a piece before its reduction */
    uint32_t overlapped;   /* log_device0: buckets whose copies back were all enqueued beside a later piece */
} run_result;

/* Device 0's calls into its backend during the last step, in order
 * (run_options.log_device0): what the engine enqueued and what it waited
 * for, to tell whether a bucket's reduction ran beside backward. */
typedef enum { EV_SEGMENT, EV_SUBMIT, EV_WAIT, EV_READ_GRADS, EV_WRITE_PARAMS } event_kind;
typedef struct event {
    event_kind kind;
    uint64_t ticket;    /* EV_SUBMIT, EV_WAIT */
    size_t lo, hi;      /* EV_READ_GRADS, EV_WRITE_PARAMS: the bytes copied */
} event;
#define MAX_EVENTS 8192
static event events[MAX_EVENTS];
static size_t n_events;
static bool logging;
static td_backend_ops logging_ops;
static const td_backend_ops *logged_ops;
static td_buffer *log_grads, *log_params;

static void note(event_kind kind, uint64_t ticket, size_t offset, size_t bytes)
{
    if (logging && n_events < MAX_EVENTS)
        events[n_events++] = (event){kind, ticket, offset, offset + bytes};
}

static td_status log_segment_run(td_device *dev, td_segment *seg)
{
    note(EV_SEGMENT, 0, 0, 0);
    return logged_ops->segment_run(dev, seg);
}

static td_status log_submit(td_device *dev, uint64_t *ticket)
{
    td_status s = logged_ops->submit(dev, ticket);
    if (s == TD_OK)
        note(EV_SUBMIT, *ticket, 0, 0);
    return s;
}

static td_status log_wait(td_device *dev, uint64_t ticket, uint32_t timeout_ms)
{
    note(EV_WAIT, ticket, 0, 0);
    return logged_ops->wait(dev, ticket, timeout_ms);
}

static td_status log_read(td_device *dev, td_buffer *src, size_t offset, void *host, size_t bytes)
{
    if (src == log_grads)
        note(EV_READ_GRADS, 0, offset, bytes);
    return logged_ops->read(dev, src, offset, host, bytes);
}

static td_status log_write(td_device *dev, td_buffer *dst, size_t offset, const void *host, size_t bytes)
{
    if (dst == log_params)
        note(EV_WRITE_PARAMS, 0, offset, bytes);
    return logged_ops->write(dev, dst, offset, host, bytes);
}

/* Buckets whose copies of new parameters were all enqueued beside a later
 * piece of backward: each copy after a segment that came after the
 * bucket's gradients were read (the same elements: gradients sit at their
 * parameters' offsets), that segment flushed with ticket t, and no wait
 * for t or later before the copy. A bucket is one read of its gradients
 * (td_ring_window_prefetch), its copies back those that land inside it. */
static uint32_t count_overlapped(void)
{
    uint32_t overlapped = 0;
    for (size_t r = 0; r < n_events; r++) {
        if (events[r].kind != EV_READ_GRADS)
            continue;
        bool segment = false, waited = false;
        uint64_t flush = 0; /* the first submit after the latest segment */
        uint32_t copies = 0, beside = 0;
        for (size_t i = r + 1; i < n_events; i++) {
            const event *e = &events[i];
            if (e->kind == EV_SEGMENT) {
                segment = true;
                flush = 0;
                waited = false;
            } else if (e->kind == EV_SUBMIT && segment && flush == 0) {
                flush = e->ticket;
            } else if (e->kind == EV_WAIT && flush != 0 && e->ticket >= flush) {
                waited = true;
            } else if (e->kind == EV_WRITE_PARAMS && e->lo >= events[r].lo && e->hi <= events[r].hi) {
                copies++;
                beside += flush != 0 && !waited;
            }
        }
        overlapped += copies > 0 && beside == copies;
    }
    return overlapped;
}

static td_backend_ops faulty_ops;
static int fail_in;
static td_context *fault_ctx;

static td_status faulty_segment_run(td_device *dev, td_segment *seg)
{
    if (fail_in > 0 && --fail_in == 0)
        return td_error_set(fault_ctx, TD_ERR_DEVICE_LOST, "injected device loss in segment_run");
    return td_cpu_backend.segment_run(dev, seg);
}

static void batch(test_rng *rng, net_kind kind, td_tensor *x, td_tensor *y)
{
    test_fill_uniform(rng, test_f32(x), test_count(x), kind == NET_MLP ? -1.0f : 0.0f, 1.0f);
    for (int i = 0; i < BATCH; i++)
        test_i32(y)[i] = (int32_t)(test_rng_next(rng) % 3);
}

static run_result train(const run_options *ro)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = test_mesh_or_skip(ctx, ro->spec);
    if (ro->fail_step >= 0) {
        fault_ctx = ctx;
        fail_in = 0;
        faulty_ops = td_cpu_backend;
        faulty_ops.segment_run = faulty_segment_run;
        mesh->devices[1].ops = &faulty_ops;
    }
    net n;
    build(ctx, &n, ro->kind);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.optimizer = TD_OPTIMIZER_ADAM;
    o.learning_rate = 1e-2f;
    o.overlap_bucket_bytes = ro->bucket_bytes;
    o.max_norm = ro->max_norm;
    o.accumulate_steps = ro->accumulate ? ro->accumulate : 1;
    if (ro->continue_on_loss)
        o.on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    static const float weights[3] = {1.0f, 2.0f, 3.0f};
    if (ro->uneven) {
        o.balance = TD_BALANCE_EXPLICIT;
        o.balance_weights = weights;
        o.n_balance_weights = 3;
        o.balance_granularity = 1;
    }
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(n.g, mesh, n.loss, n.n_params, n.params, &o, &t));
    const int64_t xm[2] = {BATCH, 16}, xc[4] = {BATCH, 8, 8, 1}, yd[1] = {BATCH};
    td_tensor *x = ro->kind == NET_MLP ? test_tensor(ctx, TD_F32, 2, xm) : test_tensor(ctx, TD_F32, 4, xc);
    td_tensor *y = test_tensor(ctx, TD_I32, 1, yd);
    test_rng rng = {0x5EED};
    const size_t elems = t->param_elems;
    float *before = malloc(elems * sizeof *before);
    if (ro->log_device0 && !td_ring_direct(t->ring)) {
        logged_ops = mesh->devices[0].ops;
        logging_ops = *logged_ops;
        logging_ops.segment_run = log_segment_run;
        logging_ops.submit = log_submit;
        logging_ops.wait = log_wait;
        logging_ops.read = log_read;
        logging_ops.write = log_write;
        mesh->devices[0].ops = &logging_ops;
        log_grads = td_program_buffer(t->program, 0, TD_BUF_GRADS);
        log_params = td_program_buffer(t->program, 0, TD_BUF_PARAMS);
    }
    for (int step = 0; step < STEPS; step++) {
        batch(&rng, ro->kind, x, y);
        n_events = 0;
        logging = step == STEPS - 1;
        td_binding b[2] = {{n.x, x}, {n.y, y}};
        float loss = 0;
        if (step == ro->fail_step) {
            memcpy(before, t->master, elems * sizeof *before);
            fail_in = ro->fail_segment;
            TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "injected device loss in segment_run", td_trainer_step(t, 2, b, &loss));
            cr_assert(memcmp(before, t->master, elems * sizeof *before) == 0, "the failed step changed the master");
            /* Device 0 went on until a bucket the failed device never
             * reached: at least one bucket wrote every replica first. */
            cr_assert(td_program_buckets_done(t->program, 0) > 1, "only %u buckets ran before the failure",
                      td_program_buckets_done(t->program, 0));
            const float *device = td_mesh_device_host_view(&mesh->devices[0], td_program_buffer(t->program, 0, TD_BUF_PARAMS));
            cr_assert(memcmp(before, device, elems * sizeof *before) == 0,
                      "device 0 kept values of the failed step (its buckets were updated before the failure)");
        }
        TEST_OK(ctx, td_trainer_step(t, 2, b, &loss));
        cr_assert(isfinite(loss), "%s: step %d loss %g", ro->spec, step, (double)loss);
    }
    if (ro->continue_on_loss) {
        td_train_progress progress = {.struct_size = sizeof progress};
        TEST_OK(ctx, td_trainer_progress(t, &progress));
        cr_assert_eq(progress.devices_lost, 1u, "%s: %u devices lost", ro->spec, progress.devices_lost);
    }
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(t, &identical));
    cr_assert(identical, "%s: replicas differ", ro->spec);
    run_result r = {
        .master = malloc(elems * sizeof(float)),
        .elems = elems,
        .buckets = t->n_buckets,
        .buckets_done = td_program_buckets_done(t->program, 0),
        .pieces = t->program->devs[0].n_pieces,
        .direct = td_ring_direct(t->ring),
        .lagged = t->bucket_tickets != NULL,
        .overlapped = count_overlapped(),
    };
    logging = false;
    n_events = 0;
    memcpy(r.master, t->master, elems * sizeof(float));
    free(before);
    td_tensor_destroy(x);
    td_tensor_destroy(y);
    td_context_destroy(ctx);
    return r;
}

/* Overlapped (small buckets: about one per parameter) against the one
 * all-reduce, bitwise; `runs` says whether the buckets must have run. */
static void check_same_bits(run_options ro, bool runs)
{
    ro.bucket_bytes = 0;
    run_result off = train(&ro);
    cr_assert_eq(off.buckets, 0u);
    ro.bucket_bytes = 64;
    run_result on = train(&ro);
    if (runs) {
        cr_assert(on.buckets > 2, "%s: %u buckets, expected one per parameter or so", ro.spec, on.buckets);
        cr_assert_eq(on.buckets_done, on.buckets, "%s: %u of %u buckets ran during backward", ro.spec, on.buckets_done,
                     on.buckets);
        cr_assert(on.pieces > 1, "%s: backward was not cut (%u pieces)", ro.spec, on.pieces);
        cr_assert_eq(on.lagged, !on.direct, "%s: buckets %s a piece behind on a%s ring", ro.spec,
                     on.lagged ? "ran" : "did not run", on.direct ? " direct" : "n indirect");
    } else {
        cr_assert_eq(on.buckets, 0u, "%s: buckets where the step must keep the one all-reduce", ro.spec);
    }
    cr_assert_eq(on.elems, off.elems);
    for (size_t i = 0; i < on.elems; i++)
        cr_assert(memcmp(&on.master[i], &off.master[i], sizeof(float)) == 0,
                  "%s: parameter element %zu is %.9g overlapped, %.9g after backward", ro.spec, i,
                  (double)on.master[i], (double)off.master[i]);
    free(on.master);
    free(off.master);
}

#define SAME(name, spec_, kind_)                                                                                       \
    Test(overlap, name) { check_same_bits((run_options){.spec = spec_, .kind = kind_, .fail_step = -1}, true); }

SAME(mlp_cpu1_same_bits, "cpu:1", NET_MLP)
SAME(mlp_cpu2_same_bits, "cpu:2", NET_MLP)
SAME(mlp_cpu3_same_bits, "cpu:3", NET_MLP)
SAME(mlp_cpu4_same_bits, "cpu:4", NET_MLP)
SAME(cnn_cpu1_same_bits, "cpu:1", NET_CNN)
SAME(cnn_cpu2_same_bits, "cpu:2", NET_CNN)
SAME(cnn_cpu3_same_bits, "cpu:3", NET_CNN)
SAME(cnn_cpu4_same_bits, "cpu:4", NET_CNN)
SAME(cnn_sync_batch_norm_cpu1_same_bits, "cpu:1", NET_CNN_SYNC_BN)
SAME(cnn_sync_batch_norm_cpu2_same_bits, "cpu:2", NET_CNN_SYNC_BN)
SAME(cnn_sync_batch_norm_cpu3_same_bits, "cpu:3", NET_CNN_SYNC_BN)

Test(overlap, clipping_keeps_the_one_all_reduce_and_its_bits)
{
    check_same_bits((run_options){.spec = "cpu:3", .kind = NET_MLP, .max_norm = 0.05f, .fail_step = -1}, false);
}

Test(overlap, accumulation_keeps_the_one_all_reduce_and_its_bits)
{
    check_same_bits((run_options){.spec = "cpu:2", .kind = NET_CNN, .accumulate = 2, .fail_step = -1}, false);
}

/* Device 1 fails in the middle of backward, after some buckets were
 * reduced and written to every replica: the step changes nothing, and the
 * same batch run again gives the bits of a run that never failed. */
Test(overlap, a_step_failing_between_buckets_leaves_nothing)
{
    run_options ro = {.spec = "cpu:3", .kind = NET_MLP, .fail_step = 2};
    ro.bucket_bytes = 64;
    run_result probe = train(&(run_options){.spec = "cpu:3", .kind = NET_MLP, .bucket_bytes = 64, .fail_step = -1});
    cr_assert(probe.pieces > 2, "%u pieces", probe.pieces);
    ro.fail_segment = (int)(probe.pieces - 1); /* in backward, after the first bucket ran */
    run_result failed = train(&ro);
    run_result clean = train(&(run_options){.spec = "cpu:3", .kind = NET_MLP, .fail_step = -1});
    for (size_t i = 0; i < clean.elems; i++)
        cr_assert(memcmp(&failed.master[i], &clean.master[i], sizeof(float)) == 0,
                  "parameter element %zu is %.9g after the failed step, %.9g without it", i, (double)failed.master[i],
                  (double)clean.master[i]);
    free(probe.master);
    free(failed.master);
    free(clean.master);
}

/* A device lost in its third run; the step runs again on the survivors,
 * re-planned -- the buckets with them. */
Test(overlap, continuing_on_the_survivors_keeps_the_buckets_and_the_bits)
{
    check_same_bits((run_options){.spec = "cpu:2,cpu:1@fail=3", .kind = NET_CNN, .fail_step = -1, .continue_on_loss = true},
                    true);
}

/* Devices with different row counts run different plans: the buckets
 * still meet at the same points on every device. */
Test(overlap, an_uneven_split_keeps_the_bits)
{
    check_same_bits((run_options){.spec = "cpu:3", .kind = NET_CNN_SYNC_BN, .fail_step = -1, .uneven = true}, true);
}

/* The backend suite's meshes (TD_TEST_DEVICES: OpenCL, Vulkan, mixed;
 * cpu:2 without): the ring proper reduces the buckets, each one's copy to
 * the host enqueued when it is ready and its reduction run while the
 * device has the next piece of backward -- bitwise the one all-reduce. */
Test(overlap_devices, mlp_same_bits, .timeout = 600)
{
    check_same_bits((run_options){.spec = test_devices_spec("cpu:2"), .kind = NET_MLP, .fail_step = -1}, true);
}

/* Where the ring is not direct: the buckets' copies back to device 0 are
 * enqueued while a later piece of backward is on its queue, not waited
 * for -- the reduction ran beside backward, not after it. With cpu:2
 * (no queue of its own) the ring is direct and nothing is logged. */
Test(overlap_devices, the_reductions_run_beside_backward, .timeout = 600)
{
    run_result r = train(&(run_options){.spec = test_devices_spec("cpu:2"), .kind = NET_MLP, .bucket_bytes = 64,
                                        .fail_step = -1, .log_device0 = true});
    if (r.direct) {
        cr_assert_eq(r.overlapped, 0u);
    } else {
        /* The MLP's buckets complete at different pieces; all but the
         * last one's have a piece after them. */
        cr_assert(r.buckets > 2, "%u buckets", r.buckets);
        cr_assert_geq(r.overlapped, r.buckets - 1, "%u of %u buckets' copies back all overlapped a later piece",
                      r.overlapped, r.buckets);
    }
    free(r.master);
}

Test(overlap_devices, cnn_same_bits, .timeout = 600)
{
    check_same_bits((run_options){.spec = test_devices_spec("cpu:2"), .kind = NET_CNN, .fail_step = -1}, true);
}

Test(overlap_devices, cnn_sync_batch_norm_same_bits, .timeout = 600)
{
    check_same_bits((run_options){.spec = test_devices_spec("cpu:2"), .kind = NET_CNN_SYNC_BN, .fail_step = -1},
                    true);
}
