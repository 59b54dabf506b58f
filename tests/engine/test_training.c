/* Data-parallel training: N devices on global batch B must match 1 device on
 * the same B and data order (invariant 2), the replicas must be bitwise
 * identical after every step (invariant 1), and the loss must go down.
 *
 * Tolerance for N vs 1 device: after 20 steps every parameter satisfies
 * |p_N - p_1| <= 1e-5 * max(1, max |p_1|). The two runs differ only in the
 * order of float sums (per-shard means averaged over devices vs one mean),
 * a few ulps per step, which 20 steps of SGD do not amplify past ~1e-6. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"

#define STEPS 20
#define MAX_PARAMS 4
#define PARAM_TOLERANCE 1e-5

typedef enum { MODEL_LINREG, MODEL_MLP } model_kind;

enum { FEATURES = 5, HIDDEN = 8, CLASSES = 3 };

typedef struct model {
    model_kind kind;
    int64_t batch;
    td_graph *g;
    td_node x, target, loss;
    uint32_t n_params;
    td_node params[MAX_PARAMS];
    td_tensor *init[MAX_PARAMS];
} model;

typedef struct train_result {
    float losses[STEPS];
    size_t n_values;
    float *values; /* every parameter, concatenated, after the last step */
} train_result;

static td_node add_param(td_context *ctx, model *m, const char *name, uint32_t rank, const int64_t *dims,
                         test_rng *rng, float scale)
{
    td_node n;
    TEST_OK(ctx, td_graph_param(m->g, name, rank, dims, &n));
    td_tensor *t = test_tensor(ctx, TD_F32, rank, dims);
    for (size_t i = 0; i < test_count(t); i++)
        test_f32(t)[i] = scale * test_rng_normal(rng);
    m->params[m->n_params] = n;
    m->init[m->n_params++] = t;
    return n;
}

static void build(td_context *ctx, model *m, model_kind kind, int64_t batch)
{
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->batch = batch;
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    test_rng rng = {0x1417 + (uint64_t)kind};
    int64_t xd[2] = {batch, FEATURES};
    TEST_OK(ctx, td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x));
    if (kind == MODEL_LINREG) {
        int64_t yd[2] = {batch, 1}, wd[2] = {FEATURES, 1}, bd[1] = {1};
        TEST_OK(ctx, td_graph_input(m->g, "y", TD_F32, 2, yd, TD_SHARDED, &m->target));
        td_node w = add_param(ctx, m, "w", 2, wd, &rng, 0.1f), b = add_param(ctx, m, "b", 1, bd, &rng, 0.1f);
        td_node xw, pred;
        TEST_OK(ctx, td_graph_matmul(m->g, m->x, w, &xw));
        TEST_OK(ctx, td_graph_add(m->g, xw, b, &pred));
        TEST_OK(ctx, td_graph_mse(m->g, pred, m->target, &m->loss));
    } else {
        int64_t ld[1] = {batch}, w1d[2] = {FEATURES, HIDDEN}, b1d[1] = {HIDDEN}, w2d[2] = {HIDDEN, CLASSES},
                b2d[1] = {CLASSES};
        TEST_OK(ctx, td_graph_input(m->g, "labels", TD_I32, 1, ld, TD_SHARDED, &m->target));
        td_node w1 = add_param(ctx, m, "w1", 2, w1d, &rng, 0.5f), b1 = add_param(ctx, m, "b1", 1, b1d, &rng, 0.1f);
        td_node w2 = add_param(ctx, m, "w2", 2, w2d, &rng, 0.5f), b2 = add_param(ctx, m, "b2", 1, b2d, &rng, 0.1f);
        td_node h, hb, hr, o, logits;
        TEST_OK(ctx, td_graph_matmul(m->g, m->x, w1, &h));
        TEST_OK(ctx, td_graph_add(m->g, h, b1, &hb));
        TEST_OK(ctx, td_graph_relu(m->g, hb, &hr));
        TEST_OK(ctx, td_graph_matmul(m->g, hr, w2, &o));
        TEST_OK(ctx, td_graph_add(m->g, o, b2, &logits));
        TEST_OK(ctx, td_graph_softmax_cross_entropy(m->g, logits, m->target, &m->loss));
    }
}

/* The batch of step `step`: the same on every run. Regression targets are
 * a fixed linear function plus noise; class labels are the argmax of a fixed
 * linear map, so both are learnable. */
static void make_batch(const model *m, int step, td_tensor *x, td_tensor *target)
{
    test_rng rng = {0xDA7A0000ull + (uint64_t)step};
    static const float true_w[FEATURES] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
    static const float class_map[FEATURES][CLASSES] = {
        {1, 0, -1}, {0, 1, 0.5f}, {-1, 0.5f, 1}, {0.5f, -1, 0}, {0, 0.25f, -0.5f}};
    float *xs = test_f32(x);
    for (int64_t i = 0; i < m->batch; i++) {
        float y = 0.3f, score[CLASSES] = {0};
        for (int j = 0; j < FEATURES; j++) {
            xs[i * FEATURES + j] = test_rng_uniform(&rng, -1.0f, 1.0f);
            y += true_w[j] * xs[i * FEATURES + j];
            for (int c = 0; c < CLASSES; c++)
                score[c] += class_map[j][c] * xs[i * FEATURES + j];
        }
        if (m->kind == MODEL_LINREG) {
            test_f32(target)[i] = y + 0.05f * test_rng_normal(&rng);
        } else {
            int best = 0;
            for (int c = 1; c < CLASSES; c++)
                best = score[c] > score[best] ? c : best;
            test_i32(target)[i] = best;
        }
    }
}

/* The threads the next train() gives its context (0: the machine's). */
static uint32_t train_cpu_threads;

static void train(const char *spec, bool skip_when_unavailable, model_kind kind, int64_t batch, float lr,
                  train_result *out)
{
    td_context *ctx = test_context_threads(30000, train_cpu_threads);
    td_mesh *mesh = skip_when_unavailable ? test_mesh_or_skip(ctx, spec) : test_mesh(ctx, spec);
    model m;
    build(ctx, &m, kind, batch);
    td_trainer_options opts;
    TEST_OK(ctx, td_trainer_options_init(&opts));
    opts.learning_rate = lr;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &opts, &t));
    for (uint32_t i = 0; i < m.n_params; i++)
        TEST_OK(ctx, td_trainer_set_param(t, m.params[i], m.init[i]));
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(t, &identical));
    cr_assert(identical, "%s: replicas differ right after set_param", spec);

    int64_t xd[2] = {batch, FEATURES}, yd[2] = {batch, 1};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd);
    td_tensor *target = kind == MODEL_LINREG ? test_tensor(ctx, TD_F32, 2, yd) : test_tensor(ctx, TD_I32, 1, &batch);
    td_binding b[2] = {{m.x, x}, {m.target, target}};
    for (int step = 0; step < STEPS; step++) {
        make_batch(&m, step, x, target);
        TEST_OK(ctx, td_trainer_step(t, 2, b, &out->losses[step]));
        cr_assert(isfinite(out->losses[step]), "%s step %d: loss %g", spec, step, (double)out->losses[step]);
        TEST_OK(ctx, td_trainer_replicas_identical(t, &identical));
        cr_assert(identical, "%s: replicas are not bitwise identical after step %d", spec, step);
    }
    double seconds = -1;
    uint64_t steps = 0;
    TEST_OK(ctx, td_trainer_stats(t, &seconds, &steps));
    cr_assert_eq(steps, STEPS);
    cr_assert_gt(seconds, 0.0);

    out->n_values = 0;
    for (uint32_t i = 0; i < m.n_params; i++)
        out->n_values += test_count(m.init[i]);
    out->values = malloc(out->n_values * sizeof(float));
    size_t at = 0;
    uint32_t devices = test_mesh_size(mesh);
    for (uint32_t i = 0; i < m.n_params; i++) {
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        cr_assert_eq(td_tensor_shape(m.init[i], &rank, dims), TD_OK);
        td_tensor *p = test_tensor(ctx, TD_F32, rank, dims);
        TEST_OK(ctx, td_trainer_read_param(t, m.params[i], devices - 1, p));
        memcpy(out->values + at, test_f32(p), test_count(p) * sizeof(float));
        at += test_count(p);
        td_tensor_destroy(p);
        td_tensor_destroy(m.init[i]);
    }
    td_tensor_destroy(x);
    td_tensor_destroy(target);
    td_context_destroy(ctx);
}

static void check_matches_one_device(const char *spec, bool skip_when_unavailable, model_kind kind, int64_t batch,
                                     float lr)
{
    train_result one, many;
    train(spec, skip_when_unavailable, kind, batch, lr, &many);
    train("cpu:1", false, kind, batch, lr, &one);
    cr_assert_eq(one.n_values, many.n_values);
    double scale = 1.0;
    for (size_t i = 0; i < one.n_values; i++)
        scale = fmax(scale, fabs(one.values[i]));
    double worst = 0.0;
    for (size_t i = 0; i < one.n_values; i++)
        worst = fmax(worst, fabs((double)many.values[i] - one.values[i]));
    cr_assert_leq(worst, PARAM_TOLERANCE * scale, "%s vs cpu:1: parameters differ by up to %.3g (allowed %.3g)", spec,
                  worst, PARAM_TOLERANCE * scale);
    for (int step = 0; step < STEPS; step++)
        cr_assert(test_close(many.losses[step], one.losses[step], 1e-4, 1e-6), "%s step %d: loss %.7g vs %.7g on cpu:1",
                  spec, step, (double)many.losses[step], (double)one.losses[step]);
    /* Training works at all: the loss falls substantially over 20 steps. */
    float first = many.losses[0], last = many.losses[STEPS - 1];
    cr_assert_lt(last, (kind == MODEL_LINREG ? 0.5f : 0.9f) * first, "%s: loss went from %g to %g", spec,
                 (double)first, (double)last);
    free(one.values);
    free(many.values);
}

/* Four devices on two threads take turns as fibers (engine/core/worker.c);
 * with TD_FIBERS=0 each has a thread. The sums are the ring's either way:
 * losses and parameters bitwise the same. */
Test(training, mlp_on_fibers_is_bitwise_the_threads_result)
{
    if (!td_fiber_available())
        cr_skip_test("no fibers on this system: every device has a thread of its own");
    train_result fibers, threads;
    train_cpu_threads = 2;
    train("cpu:4", false, MODEL_MLP, 24, 0.2f, &fibers);
    test_set_env("TD_FIBERS", "0");
    train("cpu:4", false, MODEL_MLP, 24, 0.2f, &threads);
    test_set_env("TD_FIBERS", NULL);
    train_cpu_threads = 0;
    for (int step = 0; step < STEPS; step++)
        cr_assert_eq(fibers.losses[step], threads.losses[step], "step %d: loss %.9g on fibers, %.9g on threads", step,
                     (double)fibers.losses[step], (double)threads.losses[step]);
    cr_assert_eq(fibers.n_values, threads.n_values);
    cr_assert_eq(memcmp(fibers.values, threads.values, fibers.n_values * sizeof(float)), 0,
                 "the parameters differ between fibers and threads");
    free(fibers.values);
    free(threads.values);
}

Test(training, linreg_cpu2_matches_cpu1) { check_matches_one_device("cpu:2", false, MODEL_LINREG, 12, 0.1f); }
Test(training, linreg_cpu3_matches_cpu1) { check_matches_one_device("cpu:3", false, MODEL_LINREG, 12, 0.1f); }
Test(training, linreg_cpu4_matches_cpu1) { check_matches_one_device("cpu:4", false, MODEL_LINREG, 12, 0.1f); }
Test(training, mlp_cpu2_matches_cpu1) { check_matches_one_device("cpu:2", false, MODEL_MLP, 24, 0.2f); }
Test(training, mlp_cpu3_matches_cpu1) { check_matches_one_device("cpu:3", false, MODEL_MLP, 24, 0.2f); }
Test(training, mlp_cpu4_matches_cpu1) { check_matches_one_device("cpu:4", false, MODEL_MLP, 24, 0.2f); }
Test(training, mlp_cpu8_matches_cpu1) { check_matches_one_device("cpu:8", false, MODEL_MLP, 24, 0.2f); }
Test(training, linreg_mixed_list_matches_cpu1) { check_matches_one_device("cpu:2,cpu:1", false, MODEL_LINREG, 12, 0.1f); }

Test(training_devices, mlp_on_test_devices_matches_cpu1, .timeout = 300)
{
    /* A batch of 840 = 2^3 * 3 * 5 * 7 splits over 1-8 and 10 devices. */
    check_matches_one_device(test_devices_spec("cpu:3"), true, MODEL_MLP, 840, 0.2f);
}

Test(training, loss_reported_is_the_global_batch_mean)
{
    /* With zero parameters the linear model predicts 0, so the first loss is
     * mean(y^2) over the global batch, whatever the mesh. */
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    model m;
    build(ctx, &m, MODEL_LINREG, 8);
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, NULL, &t));
    int64_t xd[2] = {8, FEATURES}, yd[2] = {8, 1};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *y = test_tensor(ctx, TD_F32, 2, yd);
    const float ys[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    memcpy(test_f32(y), ys, sizeof ys);
    td_binding b[2] = {{m.x, x}, {m.target, y}};
    float loss = -1.0f;
    TEST_OK(ctx, td_trainer_step(t, 2, b, &loss));
    cr_assert_float_eq(loss, 60.0f / 8.0f, 1e-6, "loss %g", (double)loss);
    TEST_OK(ctx, td_trainer_step(t, 2, b, NULL)); /* loss may be NULL */
    for (uint32_t i = 0; i < m.n_params; i++)
        td_tensor_destroy(m.init[i]);
    td_tensor_destroy(x);
    td_tensor_destroy(y);
    td_context_destroy(ctx);
}

Test(training, sgd_step_is_exactly_p_minus_lr_times_mean_gradient)
{
    /* loss = mse(x w, y) with x = 1, y = 0, one feature, w = 2: the gradient
     * is 2 (x w - y) x = 4 on every sample, so w' = 2 - 0.25 * 4 = 1 exactly. */
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[2] = {4, 1}, wd[2] = {1, 1};
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 1, &x, &y, &w, &loss);
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.learning_rate = 0.25f;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, 1, &w, &opts, &t));
    td_tensor *tw = test_tensor_f32(ctx, 2, wd, (const float[]){2.0f});
    TEST_OK(ctx, td_trainer_set_param(t, w, tw));
    td_tensor *tx = test_tensor_f32(ctx, 2, xd, (const float[]){1, 1, 1, 1}), *ty = test_tensor(ctx, TD_F32, 2, xd);
    td_binding b[2] = {{x, tx}, {y, ty}};
    float l;
    TEST_OK(ctx, td_trainer_step(t, 2, b, &l));
    cr_assert_eq(l, 4.0f);
    for (uint32_t d = 0; d < 2; d++) {
        TEST_OK(ctx, td_trainer_read_param(t, w, d, tw));
        cr_assert_eq(test_f32(tw)[0], 1.0f, "device %u: w = %g after one step", d, (double)test_f32(tw)[0]);
    }
    td_tensor_destroy(tw);
    td_tensor_destroy(tx);
    td_tensor_destroy(ty);
    td_context_destroy(ctx);
}

/* A steady-state step allocates nothing through tandem's allocator: the plan
 * owns every buffer, staging area and scratch from compile time on. Counted
 * with allocator hooks; the MLP exercises every kernel kind and the ring. */
static void check_no_allocation_in_steady_state(const char *spec, bool skip_when_unavailable)
{
    test_alloc_counter counter;
    td_context *ctx = test_counting_context(&counter, 30000);
    td_mesh *mesh = skip_when_unavailable ? test_mesh_or_skip(ctx, spec) : test_mesh(ctx, spec);
    model m;
    int64_t batch = 24;
    build(ctx, &m, MODEL_MLP, batch);
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.learning_rate = 0.1f;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &opts, &t));
    int64_t xd[2] = {batch, FEATURES};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd);
    td_tensor *labels = test_tensor(ctx, TD_I32, 1, &batch);
    td_binding b[2] = {{m.x, x}, {m.target, labels}};
    float loss;
    make_batch(&m, 0, x, labels);
    TEST_OK(ctx, td_trainer_step(t, 2, b, &loss)); /* warm-up */
    size_t before = counter.allocs;
    for (int step = 1; step <= 10; step++) {
        make_batch(&m, step, x, labels);
        TEST_OK(ctx, td_trainer_step(t, 2, b, &loss));
    }
    cr_expect_eq(counter.allocs, before, "%s: %zu host allocations in 10 steady-state steps", spec,
                 counter.allocs - before);
    td_tensor_destroy(x);
    td_tensor_destroy(labels);
    for (uint32_t i = 0; i < m.n_params; i++)
        td_tensor_destroy(m.init[i]);
    td_context_destroy(ctx);
}

Test(training, no_allocation_in_a_steady_state_step) { check_no_allocation_in_steady_state("cpu:3", false); }

Test(training_devices, no_allocation_in_a_steady_state_step_on_test_devices, .timeout = 300)
{
    check_no_allocation_in_steady_state(test_devices_spec("cpu:2"), true);
}
