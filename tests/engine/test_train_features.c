/* Trainer features: the global masked mean (N padded shards train as one
 * device on the unpadded batch), metrics returned with the step, gradient
 * accumulation (optax.MultiSteps) and evaluation over a padded data set.
 *
 * Model: pred = tanh(x w1 + b1) w2, per-example error (pred - y)^2 [B, 1],
 * an accuracy-like metric min(relu(1e6 pred y), 1) (1 when pred has y's sign)
 * and y in {-1, +1}. Expectations are computed on the host in double.
 *
 * Tolerances: N devices vs 1 and K micro-batches vs one batch differ only in
 * the order of float sums (a few ulps per step); after 3 SGD steps every parameter agrees within 1e-5 absolute (values are O(1)) and
 * losses within 1e-5 relative. Host double vs device float: 1e-5 relative. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_trainer_internal.h"

enum { F = 3, H = 4, NP = 3 };

typedef struct net {
    td_graph *g;
    int64_t batch;
    td_node x, y, mask, params[NP];
    td_node per_example, loss, err_metric, acc_metric;
} net;

/* masked: loss = masked_mean(err, mask); else loss = mean(err), no mask. */
static void build_net(td_context *ctx, net *n, int64_t batch, bool masked)
{
    memset(n, 0, sizeof *n);
    n->batch = batch;
    TEST_OK(ctx, td_graph_create(ctx, &n->g));
    int64_t xd[2] = {batch, F}, yd[2] = {batch, 1}, w1d[2] = {F, H}, b1d[1] = {H}, w2d[2] = {H, 1};
    TEST_OK(ctx, td_graph_input(n->g, "x", TD_F32, 2, xd, TD_SHARDED, &n->x));
    TEST_OK(ctx, td_graph_input(n->g, "y", TD_F32, 2, yd, TD_SHARDED, &n->y));
    TEST_OK(ctx, td_graph_param(n->g, "w1", 2, w1d, &n->params[0]));
    TEST_OK(ctx, td_graph_param(n->g, "b1", 1, b1d, &n->params[1]));
    TEST_OK(ctx, td_graph_param(n->g, "w2", 2, w2d, &n->params[2]));
    td_node h, hb, ht, pred, diff, py, big, pos, one;
    TEST_OK(ctx, td_graph_matmul(n->g, n->x, n->params[0], &h));
    TEST_OK(ctx, td_graph_add(n->g, h, n->params[1], &hb));
    TEST_OK(ctx, td_graph_tanh(n->g, hb, &ht));
    TEST_OK(ctx, td_graph_matmul(n->g, ht, n->params[2], &pred));
    TEST_OK(ctx, td_graph_sub(n->g, pred, n->y, &diff));
    TEST_OK(ctx, td_graph_mul(n->g, diff, diff, &n->per_example));
    TEST_OK(ctx, td_graph_mul(n->g, pred, n->y, &py));
    TEST_OK(ctx, td_graph_scale(n->g, py, 1e6f, &big));
    TEST_OK(ctx, td_graph_relu(n->g, big, &pos));
    TEST_OK(ctx, td_graph_constant(n->g, 1.0f, &one));
    td_node correct;
    TEST_OK(ctx, td_graph_minimum(n->g, pos, one, &correct));
    if (masked) {
        TEST_OK(ctx, td_graph_input(n->g, "mask", TD_F32, 1, &batch, TD_SHARDED, &n->mask));
        TEST_OK(ctx, td_graph_masked_mean(n->g, n->per_example, n->mask, &n->loss));
        TEST_OK(ctx, td_graph_masked_mean(n->g, n->per_example, n->mask, &n->err_metric));
        TEST_OK(ctx, td_graph_masked_mean(n->g, correct, n->mask, &n->acc_metric));
    } else {
        TEST_OK(ctx, td_graph_mean(n->g, n->per_example, 0, NULL, false, &n->loss));
        TEST_OK(ctx, td_graph_mean(n->g, correct, 0, NULL, false, &n->acc_metric));
        n->err_metric = n->loss;
    }
}

/* The parameters every test starts from. */
static float init_w1[F * H], init_b1[H], init_w2[H];

static void make_init(void)
{
    test_rng rng = {0x5EED};
    for (int i = 0; i < F * H; i++)
        init_w1[i] = 0.7f * test_rng_normal(&rng);
    for (int i = 0; i < H; i++) {
        init_b1[i] = 0.1f * test_rng_normal(&rng);
        init_w2[i] = 0.7f * test_rng_normal(&rng);
    }
}

static void set_init(td_context *ctx, td_trainer *t, const net *n)
{
    make_init();
    int64_t w1d[2] = {F, H}, b1d[1] = {H}, w2d[2] = {H, 1};
    td_tensor *w1 = test_tensor_f32(ctx, 2, w1d, init_w1), *b1 = test_tensor_f32(ctx, 1, b1d, init_b1),
              *w2 = test_tensor_f32(ctx, 2, w2d, init_w2);
    TEST_OK(ctx, td_trainer_set_param(t, n->params[0], w1));
    TEST_OK(ctx, td_trainer_set_param(t, n->params[1], b1));
    TEST_OK(ctx, td_trainer_set_param(t, n->params[2], w2));
    td_tensor_destroy(w1);
    td_tensor_destroy(b1);
    td_tensor_destroy(w2);
}

/* All parameters of device 0, concatenated (F*H + H + H floats). */
static void read_params(td_context *ctx, td_trainer *t, const net *n, float *out)
{
    size_t at = 0;
    for (int i = 0; i < NP; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        TEST_OK(ctx, td_graph_shape(n->g, n->params[i], &rank, dims));
        td_tensor *p = test_tensor(ctx, TD_F32, rank, dims);
        TEST_OK(ctx, td_trainer_read_param(t, n->params[i], 0, p));
        memcpy(out + at, test_f32(p), test_count(p) * sizeof(float));
        at += test_count(p);
        td_tensor_destroy(p);
    }
}
#define N_VALUES (F * H + 2 * H)

/* Example i of the data: x uniform in [-1, 1), y = +-1. */
static void example(uint64_t seed, int64_t i, float *x, float *y)
{
    test_rng rng = {seed * 1000003u + (uint64_t)i};
    for (int j = 0; j < F; j++)
        x[j] = test_rng_uniform(&rng, -1.0f, 1.0f);
    *y = test_rng_uniform(&rng, 0.0f, 1.0f) < 0.5f ? -1.0f : 1.0f;
}

/* Rows [first, first+count) of data set `seed` into x, y; rows count..B-1
 * are padding holding large finite garbage; mask = 1 for the real rows. */
static void fill_batch(uint64_t seed, int64_t first, int64_t count, td_tensor *x, td_tensor *y, td_tensor *mask)
{
    int64_t b = (int64_t)test_count(y);
    for (int64_t r = 0; r < b; r++) {
        if (r < count) {
            example(seed, first + r, test_f32(x) + r * F, test_f32(y) + r);
        } else {
            for (int j = 0; j < F; j++)
                test_f32(x)[r * F + j] = 9.0f - (float)j;
            test_f32(y)[r] = 50.0f;
        }
        if (mask)
            test_f32(mask)[r] = r < count ? 1.0f : 0.0f;
    }
}

/* Host forward in double over examples [first, first+count) of `seed`:
 * mean squared error and fraction with pred's sign = y's. */
static void host_metrics(const float *params, uint64_t seed, int64_t first, int64_t count, double *mse, double *acc)
{
    const float *w1 = params, *b1 = params + F * H, *w2 = params + F * H + H;
    double se = 0, hits = 0;
    for (int64_t i = first; i < first + count; i++) {
        float x[F], y;
        example(seed, i, x, &y);
        double pred = 0;
        for (int k = 0; k < H; k++) {
            double h = b1[k];
            for (int j = 0; j < F; j++)
                h += (double)x[j] * w1[j * H + k];
            pred += tanh(h) * w2[k];
        }
        cr_assert(fabs(pred) > 1e-3, "example %lld: |pred| %g too near 0 for the sign metric", (long long)i, pred);
        se += (pred - y) * (pred - y);
        hits += pred * y > 0 ? 1 : 0;
    }
    *mse = se / (double)count;
    *acc = hits / (double)count;
}

/* The options of the accumulation test: SGD with momentum and a learning
 * rate halved at every update, so that both a wrong gradient scale and a
 * schedule counting calls instead of updates show. */
static void momentum_decay(td_trainer_options *o)
{
    o->momentum = 0.9f;
    o->schedule.kind = TD_SCHEDULE_EXPONENTIAL_DECAY;
    o->schedule.init_value = 0.1f;
    o->schedule.decay_rate = 0.5f;
    o->schedule.transition_steps = 1;
}

static td_trainer *make_trainer_with(td_context *ctx, td_mesh *mesh, const net *n, td_optimizer_kind kind, float lr,
                                     uint32_t accumulate, void (*adjust)(td_trainer_options *))
{
    td_trainer_options o;
    TEST_OK(ctx, td_trainer_options_init(&o));
    o.optimizer = kind;
    o.learning_rate = lr;
    o.accumulate_steps = accumulate;
    if (adjust)
        adjust(&o);
    td_node metrics[2] = {n->err_metric, n->acc_metric};
    o.n_metrics = 2;
    o.metrics = metrics;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(n->g, mesh, n->loss, NP, n->params, &o, &t));
    set_init(ctx, t, n);
    return t;
}

static td_trainer *make_trainer(td_context *ctx, td_mesh *mesh, const net *n, td_optimizer_kind kind, float lr,
                                uint32_t accumulate)
{
    return make_trainer_with(ctx, mesh, n, kind, lr, accumulate, NULL);
}

/* 3 devices, global batch 9 of which 4 are real: device 0 holds 3 real rows,
 * device 1 one real row and two padding rows, device 2 only padding. Must
 * train exactly as 1 device on the 4 real rows with a plain mean. */
Test(train_features, masked_mean_n_devices_equal_one_device_on_valid_rows)
{
    enum { STEPS = 3, VALID = 4, PADDED = 9 };
    td_context *ctx = test_context(30000);
    net n3, n1;
    build_net(ctx, &n3, PADDED, true);
    build_net(ctx, &n1, VALID, false);
    td_trainer *t3 = make_trainer(ctx, test_mesh(ctx, "cpu:3"), &n3, TD_OPTIMIZER_SGD, 0.2f, 1);
    td_trainer *t1 = make_trainer(ctx, test_mesh(ctx, "cpu:1"), &n1, TD_OPTIMIZER_SGD, 0.2f, 1);
    int64_t x3d[2] = {PADDED, F}, y3d[2] = {PADDED, 1}, m3d[1] = {PADDED}, x1d[2] = {VALID, F}, y1d[2] = {VALID, 1};
    td_tensor *x3 = test_tensor(ctx, TD_F32, 2, x3d), *y3 = test_tensor(ctx, TD_F32, 2, y3d),
              *m3 = test_tensor(ctx, TD_F32, 1, m3d), *x1 = test_tensor(ctx, TD_F32, 2, x1d),
              *y1 = test_tensor(ctx, TD_F32, 2, y1d);
    td_binding b3[3] = {{n3.x, x3}, {n3.y, y3}, {n3.mask, m3}}, b1[2] = {{n1.x, x1}, {n1.y, y1}};
    for (int step = 0; step < STEPS; step++) {
        fill_batch(100 + (uint64_t)step, 0, VALID, x3, y3, m3);
        fill_batch(100 + (uint64_t)step, 0, VALID, x1, y1, NULL);
        float before[N_VALUES];
        read_params(ctx, t1, &n1, before);
        double mse, acc;
        host_metrics(before, 100 + (uint64_t)step, 0, VALID, &mse, &acc);
        float l3, l1, m[2];
        TEST_OK(ctx, td_trainer_step(t3, 3, b3, &l3));
        TEST_OK(ctx, td_trainer_step(t1, 2, b1, &l1));
        cr_assert(test_close(l3, l1, 1e-5, 0), "step %d: loss on cpu:3 %.9g, on cpu:1 %.9g", step, l3, l1);
        cr_assert(test_close(l3, mse, 1e-5, 0), "step %d: loss %.9g, host mse over the valid rows %.9g", step, l3, mse);
        TEST_OK(ctx, td_trainer_metrics(t3, 2, m));
        cr_assert(test_close(m[0], l3, 1e-6, 0), "step %d: error metric %.9g vs loss %.9g", step, m[0], l3);
        cr_assert(test_close(m[1], acc, 1e-6, 1e-6), "step %d: accuracy %.9g, host %.9g", step, m[1], acc);
    }
    float p3[N_VALUES], p1[N_VALUES];
    read_params(ctx, t3, &n3, p3);
    read_params(ctx, t1, &n1, p1);
    make_init();
    double moved = 0;
    for (int i = 0; i < N_VALUES; i++) {
        cr_assert(fabsf(p3[i] - p1[i]) <= 1e-5f, "param %d: cpu:3 %.9g, cpu:1 %.9g", i, p3[i], p1[i]);
        moved += fabs((double)p1[i] - (i < F * H ? init_w1[i] : i < F * H + H ? init_b1[i - F * H] : init_w2[i - F * H - H]));
    }
    cr_assert_gt(moved, 1e-2, "training did not move the parameters (%g)", moved);
    td_context_destroy(ctx);
}

/* A batch of padding only: loss 0, gradient 0 (SGD leaves every parameter
 * bitwise unchanged), metrics 0, nothing NaN. */
Test(train_features, all_padding_batch_gives_zero_loss_and_gradient)
{
    td_context *ctx = test_context(30000);
    net n;
    build_net(ctx, &n, 4, true);
    td_trainer *t = make_trainer(ctx, test_mesh(ctx, "cpu:2"), &n, TD_OPTIMIZER_SGD, 0.5f, 1);
    int64_t xd[2] = {4, F}, yd[2] = {4, 1}, md[1] = {4};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *y = test_tensor(ctx, TD_F32, 2, yd), *m = test_tensor(ctx, TD_F32, 1, md);
    fill_batch(7, 0, 0, x, y, m);
    td_binding b[3] = {{n.x, x}, {n.y, y}, {n.mask, m}};
    float before[N_VALUES], after[N_VALUES], loss = -1, metrics[2] = {-1, -1};
    read_params(ctx, t, &n, before);
    TEST_OK(ctx, td_trainer_step(t, 3, b, &loss));
    read_params(ctx, t, &n, after);
    TEST_OK(ctx, td_trainer_metrics(t, 2, metrics));
    cr_assert_eq(loss, 0.0f, "loss %g on an all-padding batch", loss);
    cr_assert(metrics[0] == 0.0f && metrics[1] == 0.0f, "metrics %g %g", metrics[0], metrics[1]);
    cr_assert(memcmp(before, after, sizeof before) == 0, "an all-padding batch changed the parameters");
    td_context_destroy(ctx);
}

/* K = 4 micro-batches of 4 rows, 3 times, equal 3 steps on the 16-row
 * batches (SGD, momentum, decaying rate); the parameters do not move
 * between updates and the ring runs once per update. */
static void accumulation_matches_big_batch(const char *spec)
{
    enum { K = 4, MICRO = 4, UPDATES = 3 };
    td_context *ctx = test_context(30000);
    net nk, nb;
    build_net(ctx, &nk, MICRO, false);
    build_net(ctx, &nb, MICRO * K, false);
    td_trainer *tk = make_trainer_with(ctx, test_mesh(ctx, spec), &nk, TD_OPTIMIZER_SGD, 0, K, momentum_decay);
    td_trainer *tb = make_trainer_with(ctx, test_mesh(ctx, spec), &nb, TD_OPTIMIZER_SGD, 0, 1, momentum_decay);
    int64_t xkd[2] = {MICRO, F}, ykd[2] = {MICRO, 1}, xbd[2] = {MICRO * K, F}, ybd[2] = {MICRO * K, 1};
    td_tensor *xk = test_tensor(ctx, TD_F32, 2, xkd), *yk = test_tensor(ctx, TD_F32, 2, ykd),
              *xb = test_tensor(ctx, TD_F32, 2, xbd), *yb = test_tensor(ctx, TD_F32, 2, ybd);
    td_binding bk[2] = {{nk.x, xk}, {nk.y, yk}}, bb[2] = {{nb.x, xb}, {nb.y, yb}};
    for (int u = 0; u < UPDATES; u++) {
        double loss_sum = 0;
        for (int k = 0; k < K; k++) {
            float before[N_VALUES], after[N_VALUES], loss;
            read_params(ctx, tk, &nk, before);
            fill_batch(200 + (uint64_t)u, (int64_t)k * MICRO, MICRO, xk, yk, NULL);
            TEST_OK(ctx, td_trainer_step(tk, 2, bk, &loss));
            loss_sum += loss;
            td_train_progress pr = {.struct_size = sizeof(td_train_progress)};
            TEST_OK(ctx, td_trainer_progress(tk, &pr));
            read_params(ctx, tk, &nk, after);
            cr_assert_eq(pr.updated, k == K - 1, "%s update %d micro %d: updated %d", spec, u, k, pr.updated);
            cr_assert_eq(pr.accumulated, (uint32_t)((k + 1) % K), "%s: %u micro-batches accumulated", spec, pr.accumulated);
            if (k < K - 1)
                cr_assert(memcmp(before, after, sizeof before) == 0, "%s: parameters moved before the K-th call", spec);
        }
        float big_loss;
        fill_batch(200 + (uint64_t)u, 0, MICRO * K, xb, yb, NULL);
        TEST_OK(ctx, td_trainer_step(tb, 2, bb, &big_loss));
        cr_assert(test_close(loss_sum / K, big_loss, 1e-5, 0), "%s: mean micro loss %.9g, big batch %.9g", spec,
                  loss_sum / K, big_loss);
    }
    float pk[N_VALUES], pb[N_VALUES];
    read_params(ctx, tk, &nk, pk);
    read_params(ctx, tb, &nb, pb);
    for (int i = 0; i < N_VALUES; i++)
        cr_assert(fabsf(pk[i] - pb[i]) <= 1e-5f, "%s param %d: accumulated %.9g, big batch %.9g", spec, i, pk[i], pb[i]);
    td_train_progress pr = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(tk, &pr));
    cr_assert(pr.micro_steps == K * UPDATES && pr.updates == UPDATES && pr.allreduces == UPDATES,
              "%s: %llu calls, %llu updates, %llu all-reduces; expected %d, %d, %d", spec,
              (unsigned long long)pr.micro_steps, (unsigned long long)pr.updates, (unsigned long long)pr.allreduces,
              K * UPDATES, UPDATES, UPDATES);
    TEST_OK(ctx, td_trainer_progress(tb, &pr));
    cr_assert(pr.updates == UPDATES && pr.allreduces == UPDATES, "%s: big batch %llu updates, %llu all-reduces", spec,
              (unsigned long long)pr.updates, (unsigned long long)pr.allreduces);
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(tk, &identical));
    cr_assert(identical, "%s: replicas differ after accumulated updates", spec);
    td_context_destroy(ctx);
}

Test(train_features, accumulation_equals_big_batch_cpu1)
{
    accumulation_matches_big_batch("cpu:1");
}

Test(train_features, accumulation_equals_big_batch_cpu2)
{
    accumulation_matches_big_batch("cpu:2");
}

/* K = 2: a call fails after one micro-batch was accumulated; the round
 * restarts, so the next two calls give bitwise what a fresh trainer gets
 * from those two micro-batches alone. */
Test(train_features, failed_micro_step_restarts_accumulation)
{
    td_context *ctx = test_context(30000);
    net na, nf;
    build_net(ctx, &na, 4, false);
    build_net(ctx, &nf, 4, false);
    td_trainer *ta = make_trainer(ctx, test_mesh(ctx, "cpu:2"), &na, TD_OPTIMIZER_SGD, 0.1f, 2);
    td_trainer *tf = make_trainer(ctx, test_mesh(ctx, "cpu:2"), &nf, TD_OPTIMIZER_SGD, 0.1f, 2);
    int64_t xd[2] = {4, F}, yd[2] = {4, 1}, bad_d[2] = {4, 2};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *y = test_tensor(ctx, TD_F32, 2, yd),
              *bad = test_tensor(ctx, TD_F32, 2, bad_d);
    td_binding ba[2] = {{na.x, x}, {na.y, y}}, bf[2] = {{nf.x, x}, {nf.y, y}}, wrong[2] = {{na.x, bad}, {na.y, y}};
    fill_batch(300, 0, 4, x, y, NULL);
    TEST_OK(ctx, td_trainer_step(ta, 2, ba, NULL));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "accumulation restarts", td_trainer_step(ta, 2, wrong, NULL));
    td_train_progress pr = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(ta, &pr));
    cr_assert(pr.accumulated == 0 && !pr.updated, "after a failure: %u accumulated, updated %d", pr.accumulated,
              pr.updated);
    TEST_FAILS(ctx, TD_ERR_STATE, "did not succeed", td_trainer_metrics(ta, 2, (float[2]){0}));
    for (int k = 0; k < 2; k++) {
        fill_batch(301, 4 * k, 4, x, y, NULL);
        TEST_OK(ctx, td_trainer_step(ta, 2, ba, NULL));
        TEST_OK(ctx, td_trainer_step(tf, 2, bf, NULL));
    }
    float pa[N_VALUES], pf[N_VALUES];
    read_params(ctx, ta, &na, pa);
    read_params(ctx, tf, &nf, pf);
    cr_assert(memcmp(pa, pf, sizeof pa) == 0, "the failed round's gradient reached the parameters");
    TEST_OK(ctx, td_trainer_progress(ta, &pr));
    cr_assert(pr.updates == 1 && pr.allreduces == 1 && pr.micro_steps == 3, "%llu updates, %llu all-reduces, %llu calls",
              (unsigned long long)pr.updates, (unsigned long long)pr.allreduces, (unsigned long long)pr.micro_steps);
    td_context_destroy(ctx);
}

/* 10 examples in global batches of 4 on cpu:2: the last batch holds 2 real
 * rows (on device 0) and 2 padding rows (device 1 holds only padding). The
 * result must be the host's mean over the 10 examples, each counted once,
 * with the trainer's current (trained) parameters. */
Test(train_features, evaluation_counts_each_example_once)
{
    enum { EXAMPLES = 10, BATCH = 4 };
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    net n;
    build_net(ctx, &n, BATCH, true);
    td_trainer *t = make_trainer(ctx, mesh, &n, TD_OPTIMIZER_SGD, 0.3f, 1);
    int64_t xd[2] = {BATCH, F}, yd[2] = {BATCH, 1}, md[1] = {BATCH};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *y = test_tensor(ctx, TD_F32, 2, yd), *m = test_tensor(ctx, TD_F32, 1, md);
    td_binding b[3] = {{n.x, x}, {n.y, y}, {n.mask, m}};
    fill_batch(400, 0, BATCH, x, y, m);
    TEST_OK(ctx, td_trainer_step(t, 3, b, NULL));
    cr_assert(td_program_plan(td_trainer_program(t))->training, "the trainer's plan is not marked training");

    td_node metrics[2] = {n.err_metric, n.acc_metric};
    td_evaluator *e = NULL;
    TEST_OK(ctx, td_evaluator_create(n.g, mesh, n.mask, 2, metrics, &e));
    TEST_OK(ctx, td_evaluator_load(e, t));
    for (int64_t first = 0; first < EXAMPLES; first += BATCH) {
        int64_t count = EXAMPLES - first < BATCH ? EXAMPLES - first : BATCH;
        fill_batch(500, first, count, x, y, m);
        TEST_OK(ctx, td_evaluator_run(e, 3, b));
    }
    float values[2], params[N_VALUES];
    double examples = 0, mse, acc;
    TEST_OK(ctx, td_evaluator_result(e, 2, values, &examples));
    read_params(ctx, t, &n, params);
    host_metrics(params, 500, 0, EXAMPLES, &mse, &acc);
    cr_assert_eq(examples, (double)EXAMPLES, "evaluated %g examples, expected %d", examples, EXAMPLES);
    cr_assert(test_close(values[0], mse, 1e-5, 0), "eval mse %.9g, host %.9g", values[0], mse);
    cr_assert(test_close(values[1], acc, 1e-6, 1e-6), "eval accuracy %.9g, host %.9g", values[1], acc);
    /* A second load starts a fresh tally. */
    TEST_OK(ctx, td_evaluator_load(e, t));
    TEST_OK(ctx, td_evaluator_result(e, 2, values, &examples));
    cr_assert(examples == 0 && values[0] == 0.0f, "load did not reset the tally (%g examples)", examples);
    td_evaluator_destroy(e);
    td_context_destroy(ctx);
}

Test(train_features, pmap_plans_are_not_training)
{
    td_context *ctx = test_context(0);
    net n;
    build_net(ctx, &n, 4, true);
    td_program *p = test_compile(ctx, n.g, test_mesh(ctx, "cpu:2"), 1, &n.loss);
    cr_assert(!td_program_plan(p)->training, "a td_pmap_compile plan is marked training");
    td_context_destroy(ctx);
}

Test(train_features, bad_arguments_are_refused_with_the_value)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    net n;
    build_net(ctx, &n, 4, true);
    td_trainer_options o;
    TEST_OK(ctx, td_trainer_options_init(&o));
    cr_assert_eq(o.accumulate_steps, 1u);
    td_trainer *t = NULL;
    o.accumulate_steps = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "accumulate_steps 0", td_trainer_create(n.g, mesh, n.loss, NP, n.params, &o, &t));
    o.accumulate_steps = 1;
    td_node vector_metric = n.per_example;
    o.n_metrics = 1;
    o.metrics = &vector_metric;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "metrics[0]", td_trainer_create(n.g, mesh, n.loss, NP, n.params, &o, &t));
    o.metrics = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "metrics is NULL", td_trainer_create(n.g, mesh, n.loss, NP, n.params, &o, &t));
    o.n_metrics = 1;
    o.metrics = &n.acc_metric;
    TEST_OK(ctx, td_trainer_create(n.g, mesh, n.loss, NP, n.params, &o, &t));
    float v[1];
    TEST_FAILS(ctx, TD_ERR_STATE, "td_trainer_metrics", td_trainer_metrics(t, 1, v));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "capacity 0", td_trainer_metrics(t, 0, v));

    td_node out, wrong_mask;
    int64_t five = 5;
    TEST_OK(ctx, td_graph_input(n.g, "mask5", TD_F32, 1, &five, TD_SHARDED, &wrong_mask));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "expected [4]", td_graph_masked_mean(n.g, n.per_example, wrong_mask, &out));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "does not exist", td_graph_masked_mean(n.g, n.per_example, n.y + 1000, &out));
    td_evaluator *e = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "mask is node", td_evaluator_create(n.g, mesh, n.x, 1, &n.acc_metric, &e));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "metrics[0]", td_evaluator_create(n.g, mesh, n.mask, 1, &n.per_example, &e));
    td_context_destroy(ctx);
}

static void timing_waits_on(td_trainer_options *o)
{
    o->timing_waits = true;
}

/* td_trainer_timing: refused before a step and for a device outside the
 * mesh; after a step every phase is a duration (>= 0, finite) and together
 * they fit in the step's own time; the update is measured (the owners ran
 * the optimizer) and the split is there for every device, with or without
 * the waits. */
Test(train_features, step_timing_splits_each_device)
{
    td_context *ctx = test_context(30000);
    net n;
    build_net(ctx, &n, 6, true);
    for (int waits = 0; waits < 2; waits++) {
        td_mesh *mesh = test_mesh(ctx, "cpu:3");
        td_trainer *t = make_trainer_with(ctx, mesh, &n, TD_OPTIMIZER_ADAM, 0.1f, 1, waits ? timing_waits_on : NULL);
        td_step_timing tm;
        TEST_FAILS(ctx, TD_ERR_STATE, "td_trainer_timing", td_trainer_timing(t, 0, &tm));
        int64_t xd[2] = {6, F}, yd[2] = {6, 1}, md[1] = {6};
        td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *y = test_tensor(ctx, TD_F32, 2, yd),
                  *m = test_tensor(ctx, TD_F32, 1, md);
        fill_batch(11, 0, 6, x, y, m);
        td_binding b[3] = {{n.x, x}, {n.y, y}, {n.mask, m}};
        TEST_OK(ctx, td_trainer_step(t, 3, b, NULL));
        double step_seconds = 0;
        TEST_OK(ctx, td_trainer_stats(t, &step_seconds, NULL));
        TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "device 3", td_trainer_timing(t, 3, &tm));
        TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "timing is NULL", td_trainer_timing(t, 0, NULL));
        for (uint32_t d = 0; d < 3; d++) {
            TEST_OK(ctx, td_trainer_timing(t, d, &tm));
            const double phases[5] = {tm.upload, tm.compute, tm.allreduce, tm.update, tm.download};
            double sum = 0;
            for (int k = 0; k < 5; k++) {
                cr_assert(isfinite(phases[k]) && phases[k] >= 0, "waits %d device %u phase %d: %g", waits, d, k,
                          phases[k]);
                sum += phases[k];
            }
            cr_assert(sum <= step_seconds + 1e-6, "waits %d device %u: phases sum to %g s, the step took %g s", waits,
                      d, sum, step_seconds);
            cr_assert(tm.compute > 0 && tm.update > 0, "waits %d device %u: compute %g, update %g", waits, d,
                      tm.compute, tm.update);
        }
        td_tensor_destroy(x);
        td_tensor_destroy(y);
        td_tensor_destroy(m);
        td_trainer_destroy(t);
        td_mesh_destroy(mesh);
    }
    td_context_destroy(ctx);
}

typedef struct step_log {
    int calls;
    td_step_report last;
    float metrics[2];
    td_step_timing timing[3];
} step_log;

static void log_step(void *user, const td_step_report *r)
{
    step_log *l = user;
    l->calls++;
    l->last = *r;
    cr_assert_eq(r->n_metrics, 2);
    cr_assert_eq(r->n_devices, 3);
    memcpy(l->metrics, r->metrics, sizeof l->metrics);
    memcpy(l->timing, r->timing, sizeof l->timing);
}

/* td_trainer_on_step: called once per successful step with what the
 * pull calls would return (loss, metrics, timing), the counters and the
 * schedule's rate; not for a failed step; off with NULL. */
Test(train_features, step_callback_reports_each_successful_step)
{
    td_context *ctx = test_context(30000);
    net n;
    build_net(ctx, &n, 6, true);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    td_trainer *t = make_trainer_with(ctx, mesh, &n, TD_OPTIMIZER_SGD, 0.1f, 2, momentum_decay);
    step_log log = {0};
    TEST_OK(ctx, td_trainer_on_step(t, log_step, &log));
    cr_assert_eq(td_trainer_on_step(NULL, log_step, &log), TD_ERR_INVALID_ARGUMENT);
    int64_t xd[2] = {6, F}, yd[2] = {6, 1}, md[1] = {6};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *y = test_tensor(ctx, TD_F32, 2, yd),
              *m = test_tensor(ctx, TD_F32, 1, md);
    td_binding b[3] = {{n.x, x}, {n.y, y}, {n.mask, m}};
    for (int call = 1; call <= 4; call++) {
        fill_batch(7 + (uint64_t)call, 0, 6, x, y, m);
        float loss;
        TEST_OK(ctx, td_trainer_step(t, 3, b, &loss));
        cr_assert_eq(log.calls, call);
        cr_assert_eq(log.last.micro_step, (uint64_t)call);
        cr_assert_eq(log.last.updated, call % 2 == 0, "call %d: accumulate 2 updates every second call", call);
        cr_assert_eq(log.last.updates, (uint64_t)call / 2);
        cr_assert_eq(log.last.loss, loss);
        /* The round's rate: exponential decay 0.1 * 0.5^update, the update being the round's index. */
        const float want_lr = 0.1f * powf(0.5f, (float)((call - 1) / 2));
        cr_assert(fabsf(log.last.learning_rate - want_lr) <= 1e-7f, "call %d: rate %g, expected %g", call,
                  (double)log.last.learning_rate, (double)want_lr);
        float metrics[2];
        TEST_OK(ctx, td_trainer_metrics(t, 2, metrics));
        cr_assert_eq(memcmp(metrics, log.metrics, sizeof metrics), 0);
        for (uint32_t d = 0; d < 3; d++) {
            td_step_timing tm;
            TEST_OK(ctx, td_trainer_timing(t, d, &tm));
            cr_assert_eq(memcmp(&tm, &log.timing[d], sizeof tm), 0, "device %u", d);
        }
        cr_assert(log.last.seconds > 0 && isfinite(log.last.seconds));
    }
    /* A failed step (an unbound input) reports nothing. */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "", td_trainer_step(t, 2, b, NULL));
    cr_assert_eq(log.calls, 4);
    TEST_OK(ctx, td_trainer_on_step(t, NULL, NULL));
    TEST_OK(ctx, td_trainer_step(t, 3, b, NULL));
    cr_assert_eq(log.calls, 4);
    td_tensor_destroy(x);
    td_tensor_destroy(y);
    td_tensor_destroy(m);
    td_context_destroy(ctx);
}
