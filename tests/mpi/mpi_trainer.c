/* The trainer over several processes (run under mpirun): an MLP trained
 * with Adam and clipping on a global mesh of every process's CPU devices
 * must
 *   - match, in losses and parameters, the same model trained in one
 *     process on a mesh with the same total device count (each process
 *     trains that reference too, on a context of its own that joined
 *     nothing), within float rounding of the sums' order;
 *   - keep every device of every process bitwise identical (hashes
 *     compared across processes, td_trainer_replicas_identical);
 *   - split the batch unevenly by explicit weights over the global mesh,
 *     and still match.
 * Each process binds only its own rows of every global batch.
 *
 * With BALANCE "auto", the split is measured instead: every process must
 * find the same split, and a device slowed down (an injected fault, e.g.
 * "cpu:1/cpu:1@slow=4") must get fewer examples than the others.
 *
 * With "loss SPEC", a device of one process fails mid-run under
 * on_device_loss = continue: every process must learn it at the same
 * step, the job goes on with one device fewer, and the run must match one
 * process on SPEC (the same devices, the same failure) within rounding.
 *
 * With "overlap", the trainer runs without clipping, once with the
 * all-reduce in buckets during backward (td_trainer_options.
 * overlap_bucket_bytes, the windowed all-reduce across processes) and once
 * without: the two must agree bitwise, losses and parameters, the
 * buckets must have run, and their exchanges between processes on the
 * ring's exchange thread (beside backward).
 *
 * With "wire", the gradients travel as bfloat16 (td_trainer_options.wire):
 * replicas still bitwise identical, other bits than a fp32 wire's, and
 * the one-process reference (on a bf16 wire too, whose sums round at
 * other places) matched within bf16's rounding instead of fp32's, and
 * buckets during backward (without clipping) bitwise the one all-reduce.
 *
 * With "loss SPEC overlap", the same loss with buckets during backward (no
 * clipping, in the reference too): the failing step has bucket exchanges
 * on the exchange thread, and the job must go on as without.
 *
 * With "overlap-bn", as "overlap" with a synchronized batch norm after the
 * first layer, whose backward all-reduce comes between buckets.
 *
 * Usage: mpi_trainer MESHES [even | weights | auto | loss SPEC [overlap] | overlap | overlap-bn | wire],
 * MESHES as mt_mesh takes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test_util.h"
#include "td_ring.h"
#include "td_trainer_state.h"

enum { BATCH = 24, IN = 5, HIDDEN = 7, OUT = 3, STEPS = 6 };
/* A bf16 wire rounds every sum to 8 significant bits, at other places in
 * one process than across processes: measured at 2 processes of 2
 * devices, 4e-5 in the losses and 1.5e-3 in the parameters; the
 * tolerances leave a factor of 5-7. */
#define WIRE_LOSS_TOLERANCE 2e-4
#define WIRE_PARAM_TOLERANCE 1e-2

typedef struct model {
    td_graph *g;
    td_node x, y, loss, params[4];
} model;

static bool sync_bn; /* "overlap-bn": a synchronized batch norm after the first layer */

static void build(mt_run *run, td_context *ctx, model *m)
{
    MT_OK(run, ctx, td_graph_create(ctx, &m->g));
    int64_t xd[2] = {BATCH, IN}, yd[1] = {BATCH};
    int64_t w1[2] = {IN, HIDDEN}, b1[1] = {HIDDEN}, w2[2] = {HIDDEN, OUT}, b2[1] = {OUT};
    MT_OK(run, ctx, td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x));
    MT_OK(run, ctx, td_graph_input(m->g, "y", TD_I32, 1, yd, TD_SHARDED, &m->y));
    td_initializer uniform, zeros;
    td_initializer_uniform(-0.5f, 0.5f, 7, &uniform);
    td_initializer_zeros(&zeros);
    MT_OK(run, ctx, td_graph_param_init(m->g, "w1", 2, w1, &uniform, &m->params[0]));
    MT_OK(run, ctx, td_graph_param_init(m->g, "b1", 1, b1, &zeros, &m->params[1]));
    MT_OK(run, ctx, td_graph_param_init(m->g, "w2", 2, w2, &uniform, &m->params[2]));
    MT_OK(run, ctx, td_graph_param_init(m->g, "b2", 1, b2, &zeros, &m->params[3]));
    td_node h, a, logits;
    MT_OK(run, ctx, td_graph_matmul(m->g, m->x, m->params[0], &h));
    MT_OK(run, ctx, td_graph_add(m->g, h, m->params[1], &h));
    MT_OK(run, ctx, td_graph_tanh(m->g, h, &a));
    if (sync_bn) {
        /* Its backward all-reduces statistics over every device of every
         * process between the buckets of w2/b2 and of w1/b1: a ring op
         * while a bucket's exchange may still be on the exchange thread.
         * (After the tanh: right after b1 it would leave b1 a gradient of
         * rounding noise, which Adam turns into full steps.) */
        td_batch_norm_options bo;
        td_batch_norm_options_init(&bo);
        bo.sync = true;
        MT_OK(run, ctx, td_layer_batch_norm(m->g, "bn", a, &bo, &a));
    }
    MT_OK(run, ctx, td_graph_matmul(m->g, a, m->params[2], &logits));
    MT_OK(run, ctx, td_graph_add(m->g, logits, m->params[3], &logits));
    MT_OK(run, ctx, td_graph_softmax_cross_entropy(m->g, logits, m->y, &m->loss));
}

static float x_at(uint64_t step, uint64_t row, int c)
{
    uint64_t h = ((step * 131 + row) * 1000003u + (uint64_t)c * 7919u) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    return (float)((double)(h % 20000) / 10000.0 - 1.0);
}

static int32_t y_at(uint64_t step, uint64_t row)
{
    return (int32_t)((step * 7 + row * 5) % OUT);
}

/* Trains STEPS steps; the bound rows are [first, first + rows) of each
 * global batch. Fills losses and the final parameters (device 0's). */
static td_trainer *train(mt_run *run, td_context *ctx, td_mesh *mesh, const float *weights, uint32_t n_weights,
                         float *losses, float *params, size_t *n_params);
static bool continue_on_loss; /* the "loss" mode's trainers continue on the survivors */
static bool overlap_mode;     /* "overlap": no clipping, buckets of overlap_bytes */
static uint64_t overlap_bytes;
static td_wire wire_option;   /* "wire": TD_WIRE_BF16 */
static td_context *joined_ctx; /* the job's context, whose allocations are counted */

/* Auto balance across processes: the slowed device ends with the fewest
 * examples, and every process holds the same global split. */
static void check_auto(mt_run *run, td_context *ctx, td_mesh *mesh)
{
    model m;
    build(run, ctx, &m);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.learning_rate = 0.05f;
    o.balance = TD_BALANCE_AUTO;
    o.balance_warmup = 2;
    o.balance_granularity = 1;
    td_trainer *t = NULL;
    MT_OK(run, ctx, td_trainer_create(m.g, mesh, m.loss, 4, m.params, &o, &t));
    uint32_t global = 0, first_device = 0, local = 0;
    MT_OK(run, ctx, td_processes_mesh(mesh, &global, &first_device));
    MT_OK(run, ctx, td_mesh_size(mesh, &local));
    td_tensor *xt = NULL, *yt = NULL;
    uint64_t bound = 0;
    for (uint64_t s = 0; s < 8; s++) {
        uint64_t first = 0, count = 0;
        MT_OK(run, ctx, td_trainer_process_rows(t, &first, &count));
        if (!xt || count != bound) { /* the split changed: this process's rows did */
            td_tensor_destroy(xt);
            td_tensor_destroy(yt);
            int64_t xd[2] = {(int64_t)count, IN}, yd[1] = {(int64_t)count};
            MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, 2, xd, &xt));
            MT_OK(run, ctx, td_tensor_create(ctx, TD_I32, 1, yd, &yt));
            bound = count;
        }
        float *xv;
        int32_t *yv;
        td_tensor_data(xt, (void **)&xv);
        td_tensor_data(yt, (void **)&yv);
        for (uint64_t r = 0; r < count; r++) {
            for (int c = 0; c < IN; c++)
                xv[r * IN + (uint64_t)c] = x_at(s, first + r, c);
            yv[r] = y_at(s, first + r);
        }
        td_binding b[2] = {{m.x, xt}, {m.y, yt}};
        float loss;
        MT_OK(run, ctx, td_trainer_step(t, 2, b, &loss));
        mt_check(run, loss == loss, "step %llu: the loss is NaN", (unsigned long long)s);
    }
    uint32_t rows[64], n = 0;
    MT_OK(run, ctx, td_trainer_split(t, 64, rows, &n));
    double split[64] = {0};
    for (uint32_t d = 0; d < n; d++)
        split[first_device + d] = rows[d];
    MT_OK(run, ctx, td_processes_sum(ctx, split, global));
    double total = 0.0, slowest = 1e30, fastest = 0.0;
    for (uint32_t d = 0; d < global; d++) {
        total += split[d];
        slowest = d == global - 1 ? split[d] : slowest;
        fastest = d == 0 ? split[d] : fastest;
    }
    mt_check(run, total == BATCH, "the global split covers %g examples, expected %d", total, BATCH);
    mt_check(run, slowest < fastest, "the slowed device (last) got %g examples, device 0 %g: expected fewer",
             slowest, fastest);
    bool identical = false;
    MT_OK(run, ctx, td_trainer_replicas_identical(t, &identical));
    mt_check(run, identical, "replicas differ under auto balance");
    /* Every process learned the same global split (each filled only its
     * own devices above, so compare the summed split's hash). */
    mt_check(run, mt_same_on_every_process(run, ctx, mt_hash(1469598103934665603ull, split, sizeof split)),
             "the processes hold different splits");
    if (run->rank == 0) {
        printf("auto balance over %u devices: split", global);
        for (uint32_t d = 0; d < global; d++)
            printf(" %g", split[d]);
        printf("\n");
    }
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    td_trainer_destroy(t);
    td_graph_destroy(m.g);
}

static td_trainer *train(mt_run *run, td_context *ctx, td_mesh *mesh, const float *weights, uint32_t n_weights,
                         float *losses, float *params, size_t *n_params)
{
    model m;
    build(run, ctx, &m);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.optimizer = TD_OPTIMIZER_ADAM;
    o.learning_rate = 0.05f;
    o.max_norm = overlap_mode ? 0.0f : 1.0f;
    o.overlap_bucket_bytes = overlap_bytes;
    o.wire = wire_option;
    if (continue_on_loss)
        o.on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    if (weights) {
        o.balance = TD_BALANCE_EXPLICIT;
        o.balance_weights = weights;
        o.n_balance_weights = n_weights;
        o.balance_granularity = 1;
    }
    td_trainer *t = NULL;
    MT_OK(run, ctx, td_trainer_create(m.g, mesh, m.loss, 4, m.params, &o, &t));
    uint64_t allocations = 0;
    td_tensor *xt = NULL, *yt = NULL;
    float *xv = NULL;
    int32_t *yv = NULL;
    uint64_t bound = 0;
    for (uint64_t s = 0; s < STEPS; s++) {
        /* This process's rows: those of the devices before it, then its own
         * (they change when the job loses a device). */
        uint64_t first = 0, count = 0;
        MT_OK(run, ctx, td_trainer_process_rows(t, &first, &count));
        if (!xt || count != bound) {
            td_tensor_destroy(xt);
            td_tensor_destroy(yt);
            int64_t xd[2] = {(int64_t)count, IN}, yd[1] = {(int64_t)count};
            MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, 2, xd, &xt));
            MT_OK(run, ctx, td_tensor_create(ctx, TD_I32, 1, yd, &yt));
            td_tensor_data(xt, (void **)&xv);
            td_tensor_data(yt, (void **)&yv);
            bound = count;
        }
        for (uint64_t r = 0; r < count; r++) {
            for (int c = 0; c < IN; c++)
                xv[r * IN + (uint64_t)c] = x_at(s, first + r, c);
            yv[r] = y_at(s, first + r);
        }
        td_binding b[2] = {{m.x, xt}, {m.y, yt}};
        if (s == 2)
            allocations = run->allocations;
        MT_OK(run, ctx, td_trainer_step(t, 2, b, &losses[s]));
    }
    /* A steady-state step allocates nothing, across processes too (the
     * exchanges, the agreement and the update reuse what the first steps
     * made); only a step that lost a device may. */
    if (ctx == joined_ctx && !continue_on_loss)
        mt_check(run, run->allocations == allocations, "steps 3-%d allocated %llu times, expected none", STEPS,
                 (unsigned long long)(run->allocations - allocations));
    size_t at = 0;
    for (int i = 0; i < 4; i++) {
        int64_t dims[4];
        td_tensor *p = NULL;
        td_node node = m.params[i];
        int64_t shape[4][2] = {{IN, HIDDEN}, {HIDDEN, 0}, {HIDDEN, OUT}, {OUT, 0}};
        uint32_t ranks[4] = {2, 1, 2, 1};
        memcpy(dims, shape[i], sizeof shape[i]);
        MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, ranks[i], dims, &p));
        MT_OK(run, ctx, td_trainer_read_param(t, node, 0, p));
        size_t c;
        float *v;
        td_tensor_count(p, &c);
        td_tensor_data(p, (void **)&v);
        memcpy(params + at, v, c * sizeof *v);
        at += c;
        td_tensor_destroy(p);
    }
    *n_params = at;
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    td_graph_destroy(m.g);
    return t;
}

int main(int argc, char **argv)
{
    mt_run run;
    td_context *ctx = mt_start(&run, argc, argv);
    joined_ctx = ctx;
    const bool weighted = argc > 2 && strcmp(argv[2], "weights") == 0;
    td_mesh *mesh = mt_mesh(&run, ctx, argc > 1 ? argv[1] : "1");
    if (argc > 2 && strcmp(argv[2], "auto") == 0) {
        check_auto(&run, ctx, mesh);
        return mt_finish(&run, ctx);
    }
    continue_on_loss = argc > 3 && strcmp(argv[2], "loss") == 0;
    /* "loss SPEC overlap": the loss with buckets during backward, so the
     * failing step leaves bucket exchanges on the exchange thread. */
    const bool loss_overlap = continue_on_loss && argc > 4 && strcmp(argv[4], "overlap") == 0;
    sync_bn = argc > 2 && strcmp(argv[2], "overlap-bn") == 0;
    overlap_mode = (argc > 2 && strcmp(argv[2], "overlap") == 0) || loss_overlap || sync_bn;
    overlap_bytes = overlap_mode ? 16 : 0; /* a bucket per parameter */
    const bool wire_mode = argc > 2 && strcmp(argv[2], "wire") == 0;
    wire_option = wire_mode ? TD_WIRE_BF16 : TD_WIRE_FP32;
    uint32_t global = 0, first = 0;
    MT_OK(&run, ctx, td_processes_mesh(mesh, &global, &first));
    /* Uneven weights: device g weighs g + 1. */
    float weights[64];
    for (uint32_t d = 0; d < global; d++)
        weights[d] = (float)(d + 1);

    float losses[STEPS], ref_losses[STEPS], params[256], ref_params[256];
    size_t n = 0, ref_n = 0;
    td_trainer *t = train(&run, ctx, mesh, weighted ? weights : NULL, global, losses, params, &n);
    bool identical = false;
    MT_OK(&run, ctx, td_trainer_replicas_identical(t, &identical));
    mt_check(&run, identical, "replicas differ across the processes' devices");
    if (overlap_mode && !continue_on_loss) {
        mt_check(&run, t->n_buckets > 1 && td_program_buckets_done(t->program, 0) == t->n_buckets,
                 "process %u: %u of %u buckets ran during backward", run.rank, td_program_buckets_done(t->program, 0),
                 t->n_buckets);
        /* The buckets' exchanges between processes ran on the exchange
         * thread, beside backward (process-local rank 0 makes them). */
        const uint64_t on_thread = td_ring_exchanges_on_thread(t->ring);
        mt_check(&run, on_thread >= (uint64_t)STEPS * t->n_buckets,
                 "process %u: %llu exchanges on the exchange thread, expected at least %u", run.rank,
                 (unsigned long long)on_thread, STEPS * t->n_buckets);
        float plain_losses[STEPS], plain_params[256];
        size_t plain_n = 0;
        overlap_bytes = 0;
        train(&run, ctx, mesh, NULL, global, plain_losses, plain_params, &plain_n);
        overlap_bytes = 16;
        mt_check(&run, plain_n == n && memcmp(plain_losses, losses, sizeof losses) == 0 &&
                           memcmp(plain_params, params, n * sizeof *params) == 0,
                 "process %u: buckets during backward changed the training (loss %.9g vs %.9g, w1[0] %.9g vs %.9g)",
                 run.rank, (double)losses[STEPS - 1], (double)plain_losses[STEPS - 1], (double)params[0],
                 (double)plain_params[0]);
    }
    if (wire_mode) {
        float fp32_losses[STEPS], fp32_params[256];
        size_t fp32_n = 0;
        wire_option = TD_WIRE_FP32;
        train(&run, ctx, mesh, NULL, global, fp32_losses, fp32_params, &fp32_n);
        wire_option = TD_WIRE_BF16;
        size_t same = 0;
        for (size_t i = 0; i < n && i < fp32_n; i++)
            same += memcmp(&params[i], &fp32_params[i], sizeof(float)) == 0;
        mt_check(&run, fp32_n == n && same < n / 2, "process %u: wire bf16 left %zu of %zu parameters at fp32's bits",
                 run.rank, same, n);
        /* Buckets during backward (no clipping) on the bf16 wire: the
         * windows' exchanges pack only their blocks, and give bitwise the
         * one all-reduce. */
        float bucket_losses[STEPS], bucket_params[256], one_losses[STEPS], one_params[256];
        size_t bucket_n = 0, one_n = 0;
        overlap_mode = true;
        overlap_bytes = 16;
        td_trainer *bt = train(&run, ctx, mesh, NULL, global, bucket_losses, bucket_params, &bucket_n);
        mt_check(&run, bt->n_buckets > 1 && td_program_buckets_done(bt->program, 0) == bt->n_buckets,
                 "process %u: wire bf16: %u of %u buckets ran during backward", run.rank,
                 td_program_buckets_done(bt->program, 0), bt->n_buckets);
        overlap_bytes = 0;
        train(&run, ctx, mesh, NULL, global, one_losses, one_params, &one_n);
        overlap_mode = false;
        mt_check(&run, bucket_n == one_n && memcmp(bucket_losses, one_losses, sizeof one_losses) == 0 &&
                           memcmp(bucket_params, one_params, one_n * sizeof *one_params) == 0,
                 "process %u: wire bf16: buckets changed the training", run.rank);
    }
    if (continue_on_loss) {
        td_train_progress p = {.struct_size = sizeof(td_train_progress)};
        uint32_t now = 0, first_now = 0;
        MT_OK(&run, ctx, td_trainer_progress(t, &p));
        MT_OK(&run, ctx, td_processes_mesh(mesh, &now, &first_now));
        mt_check(&run, p.devices_lost == 1, "process %u counts %u devices lost, expected 1", run.rank, p.devices_lost);
        if (loss_overlap)
            mt_check(&run, t->n_buckets > 1 && td_program_buckets_done(t->program, 0) == t->n_buckets,
                     "process %u: after the loss %u of %u buckets ran during backward", run.rank,
                     td_program_buckets_done(t->program, 0), t->n_buckets);
        mt_check(&run, now == global - 1, "the job has %u devices after the loss, expected %u", now, global - 1);
    }

    /* The reference: one process, the same total devices, the same weights. */
    td_context_options o;
    td_context_options_init(&o);
    o.timeout_ms = 20000;
    td_context *solo = NULL;
    MT_OK(&run, ctx, td_context_create(&o, &solo));
    char spec[32];
    snprintf(spec, sizeof spec, "%s", continue_on_loss ? argv[3] : "");
    if (!continue_on_loss)
        snprintf(spec, sizeof spec, "cpu:%u", global);
    td_mesh *one = NULL;
    MT_OK(&run, solo, td_mesh_create(solo, spec, &one));
    train(&run, solo, one, weighted ? weights : NULL, global, ref_losses, ref_params, &ref_n);

    mt_check(&run, n == ref_n, "%zu parameters, the reference has %zu", n, ref_n);
    double loss_err = 0.0, param_err = 0.0;
    for (int s = 0; s < STEPS; s++)
        loss_err = fmax(loss_err, fabs((double)losses[s] - ref_losses[s]));
    for (size_t i = 0; i < n && i < ref_n; i++)
        param_err = fmax(param_err, fabs((double)params[i] - ref_params[i]));
    /* Only the order of the float sums differs: a few roundings each step,
     * grown over 6 Adam steps. */
    const double loss_tol = wire_mode ? WIRE_LOSS_TOLERANCE : 2e-6, param_tol = wire_mode ? WIRE_PARAM_TOLERANCE : 2e-5;
    mt_check(&run, loss_err <= loss_tol, "losses differ from one process by %g (tolerance %g)", loss_err, loss_tol);
    mt_check(&run, param_err <= param_tol, "parameters differ from one process by %g (tolerance %g)", param_err,
             param_tol);
    mt_check(&run, losses[STEPS - 1] < losses[0], "the loss did not fall: %g -> %g", (double)losses[0],
             (double)losses[STEPS - 1]);
    if (run.rank == 0)
        printf("processes %u, devices %u%s: loss %.6f -> %.6f, max difference from one process: loss %.3g, "
               "parameters %.3g\n",
               run.count, global, weighted ? " (weighted split)" : "", (double)losses[0], (double)losses[STEPS - 1],
               loss_err, param_err);
    td_context_destroy(solo);
    return mt_finish(&run, ctx);
}
