/* Training a CNN data-parallel: N devices on global batch B end where 1
 * device ends (invariant 2) with replicas bitwise identical (invariant 1),
 * on CPU meshes and (suite cnn_devices) OpenCL, Vulkan and mixed meshes;
 * and a short run on real Fashion-MNIST that must pass an accuracy floor.
 *
 * Tolerance N vs 1: after 6 Adam steps every parameter is within 2e-4 of
 * the 1-device value relative to the parameter's scale. The runs differ in
 * float summation order only (shard means averaged, GEMM blocking per
 * shard); Adam's normalised steps of 1e-2 make a few-ulp gradient
 * difference move parameters by ~1e-6, and GPU GEMM/reduce orders add a
 * few more ulps per step. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"

#define STEPS 6
#define BATCH 12

typedef struct cnn {
    td_graph *g;
    td_node x, y, logits, loss;
    uint32_t n_params;
    td_node params[10];
    uint32_t n_states;
    td_node states[2];
} cnn;

/* 8x8x1 images: conv 3x3 4 + bias, relu, max-pool 2, conv 3x3 6 (VALID),
 * tanh, avg-pool 2 (SAME) to 1x1x6, dense 3. With `regularized`, a
 * synchronized batch norm after the first conv and dropout 0.3 before the
 * dense layer. */
static void build_cnn(td_context *ctx, cnn *m, int64_t batch, bool regularized)
{
    memset(m, 0, sizeof *m);
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    const int64_t xd[4] = {batch, 8, 8, 1}, yd[1] = {batch}, flat[2] = {-1, 6};
    td_node h;
    TEST_OK(ctx, td_graph_input(m->g, "x", TD_F32, 4, xd, TD_SHARDED, &m->x));
    TEST_OK(ctx, td_graph_input(m->g, "y", TD_I32, 1, yd, TD_SHARDED, &m->y));
    /* No bias before batch norm: its gradient is zero up to rounding, which
     * Adam would blow up into full-size steps in arbitrary directions. */
    TEST_OK(ctx, td_layer_conv2d(m->g, "c1", m->x, 4, 3, 3, NULL, !regularized, 7, &h));
    if (regularized) {
        td_batch_norm_options bo;
        td_batch_norm_options_init(&bo);
        bo.sync = true;
        bo.momentum = 0.9f;
        TEST_OK(ctx, td_layer_batch_norm(m->g, "bn", h, &bo, &h));
        TEST_OK(ctx, td_graph_find(m->g, "bn/mean", &m->states[0]));
        TEST_OK(ctx, td_graph_find(m->g, "bn/var", &m->states[1]));
        m->n_states = 2;
    }
    TEST_OK(ctx, td_graph_relu(m->g, h, &h));
    TEST_OK(ctx, td_graph_max_pool2d(m->g, h, NULL, &h));
    td_conv2d_options o;
    td_conv2d_options_init(&o);
    o.padding = TD_PADDING_VALID;
    TEST_OK(ctx, td_layer_conv2d(m->g, "c2", h, 6, 3, 3, &o, true, 7, &h));
    TEST_OK(ctx, td_graph_tanh(m->g, h, &h));
    td_pool2d_options po;
    td_pool2d_options_init(&po);
    po.padding = TD_PADDING_SAME;
    TEST_OK(ctx, td_graph_avg_pool2d(m->g, h, &po, &h));
    TEST_OK(ctx, td_graph_reshape(m->g, h, 2, flat, &h));
    if (regularized)
        TEST_OK(ctx, td_graph_dropout(m->g, h, 0.3f, 5, &h));
    TEST_OK(ctx, td_layer_dense(m->g, "d", h, 3, true, 7, &m->logits));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(m->g, m->logits, m->y, &m->loss));
    TEST_OK(ctx, td_graph_params(m->g, 10, m->params, &m->n_params));
}

/* Trains STEPS Adam steps on fixed batches and returns every parameter
 * and state. */
static float *train(const char *spec, bool skip_when_unavailable, bool regularized, size_t *n_values)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = skip_when_unavailable ? test_mesh_or_skip(ctx, spec) : test_mesh(ctx, spec);
    cnn m;
    build_cnn(ctx, &m, BATCH, regularized);
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.optimizer = TD_OPTIMIZER_ADAM;
    opts.learning_rate = 1e-2f;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &opts, &t));
    const int64_t xd[4] = {BATCH, 8, 8, 1}, yd[1] = {BATCH};
    td_tensor *x = test_tensor(ctx, TD_F32, 4, xd), *y = test_tensor(ctx, TD_I32, 1, yd);
    test_rng rng = {0xC0FFEE};
    float first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        test_fill_uniform(&rng, test_f32(x), BATCH * 64, 0.0f, 1.0f);
        for (int i = 0; i < BATCH; i++)
            test_i32(y)[i] = (int32_t)(test_rng_next(&rng) % 3);
        td_binding b[2] = {{m.x, x}, {m.y, y}};
        TEST_OK(ctx, td_trainer_step(t, 2, b, &last));
        if (step == 0)
            first = last;
    }
    cr_assert(isfinite(first) && isfinite(last), "%s: losses %g, %g", spec, (double)first, (double)last);
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(t, &identical));
    cr_assert(identical, "%s: replicas differ after %d steps", spec, STEPS);
    for (uint32_t i = 0; i < m.n_states; i++)
        m.params[m.n_params++] = m.states[i]; /* compared like the parameters */
    size_t total = 0;
    for (uint32_t i = 0; i < m.n_params; i++) {
        uint32_t rank;
        int64_t dims[4];
        TEST_OK(ctx, td_graph_shape(m.g, m.params[i], &rank, dims));
        int64_t n = 1;
        for (uint32_t k = 0; k < rank; k++)
            n *= dims[k];
        total += (size_t)n;
    }
    float *values = malloc(total * sizeof *values);
    size_t at = 0;
    for (uint32_t i = 0; i < m.n_params; i++) {
        uint32_t rank;
        int64_t dims[4];
        TEST_OK(ctx, td_graph_shape(m.g, m.params[i], &rank, dims));
        td_tensor *v = test_tensor(ctx, TD_F32, rank, dims);
        TEST_OK(ctx, td_trainer_read_param(t, m.params[i], 0, v));
        memcpy(values + at, test_f32(v), test_count(v) * sizeof(float));
        at += test_count(v);
        td_tensor_destroy(v);
    }
    td_tensor_destroy(x);
    td_tensor_destroy(y);
    td_context_destroy(ctx);
    *n_values = total;
    return values;
}

static void check_matches_one_device(const char *spec, bool skip_when_unavailable, bool regularized)
{
    size_t n1, nn;
    float *one = train("cpu:1", false, regularized, &n1);
    float *many = train(spec, skip_when_unavailable, regularized, &nn);
    cr_assert_eq(n1, nn);
    double scale = 0;
    for (size_t i = 0; i < n1; i++)
        scale = fmax(scale, fabs(one[i]));
    for (size_t i = 0; i < n1; i++)
        cr_assert(fabs((double)many[i] - one[i]) <= 2e-4 * fmax(1.0, scale), "%s: parameter value %zu is %g, cpu:1 %g",
                  spec, i, (double)many[i], (double)one[i]);
    free(one);
    free(many);
}

Test(cnn, cpu3_matches_cpu1) { check_matches_one_device("cpu:3", false, false); }
Test(cnn, cpu4_matches_cpu1) { check_matches_one_device("cpu:4", false, false); }
Test(cnn, cpu3_matches_cpu1_with_batch_norm_and_dropout) { check_matches_one_device("cpu:3", false, true); }

Test(cnn_devices, test_devices_match_cpu1, .timeout = 300)
{
    check_matches_one_device(test_devices_spec("cpu:2"), true, false);
}

Test(cnn_devices, test_devices_match_cpu1_with_batch_norm_and_dropout, .timeout = 300)
{
    check_matches_one_device(test_devices_spec("cpu:2"), true, true);
}

/* A steady-state CNN step (conv, pool, their gradients, Adam, the ring)
 * allocates nothing through tandem's allocator -- also on an uneven split,
 * and while auto balance measures the devices (a window longer than the
 * test, so it never re-plans: a re-plan allocates, by design). */
static void check_cnn_steps_allocate_nothing_balanced(const char *spec, bool skip_when_unavailable, bool regularized,
                                                      td_balance balance)
{
    test_alloc_counter counter;
    td_context *ctx = test_counting_context(&counter, 30000);
    td_mesh *mesh = skip_when_unavailable ? test_mesh_or_skip(ctx, spec) : test_mesh(ctx, spec);
    cnn m;
    build_cnn(ctx, &m, BATCH, regularized);
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.optimizer = TD_OPTIMIZER_ADAM;
    const float weights[8] = {1, 2, 3, 1, 2, 3, 1, 2};
    opts.balance = balance;
    opts.balance_weights = weights;
    opts.n_balance_weights = test_mesh_size(mesh);
    opts.balance_warmup = 1000;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &opts, &t));
    const int64_t xd[4] = {BATCH, 8, 8, 1}, yd[1] = {BATCH};
    td_tensor *x = test_tensor(ctx, TD_F32, 4, xd), *y = test_tensor(ctx, TD_I32, 1, yd);
    test_rng rng = {7};
    test_fill_uniform(&rng, test_f32(x), BATCH * 64, 0.0f, 1.0f);
    td_binding b[2] = {{m.x, x}, {m.y, y}};
    float loss;
    TEST_OK(ctx, td_trainer_step(t, 2, b, &loss)); /* warm-up */
    size_t before = counter.allocs;
    for (int step = 0; step < 5; step++)
        TEST_OK(ctx, td_trainer_step(t, 2, b, &loss));
    cr_expect_eq(counter.allocs, before, "%s: %zu host allocations in 5 steady-state CNN steps", spec,
                 counter.allocs - before);
    td_tensor_destroy(x);
    td_tensor_destroy(y);
    td_context_destroy(ctx);
}

static void check_cnn_steps_allocate_nothing(const char *spec, bool skip_when_unavailable, bool regularized)
{
    check_cnn_steps_allocate_nothing_balanced(spec, skip_when_unavailable, regularized, TD_BALANCE_EVEN);
}

Test(cnn, a_steady_state_step_allocates_nothing) { check_cnn_steps_allocate_nothing("cpu:3", false, false); }
Test(cnn, a_steady_state_step_on_an_uneven_or_measured_split_allocates_nothing)
{
    check_cnn_steps_allocate_nothing_balanced("cpu:3", false, true, TD_BALANCE_EXPLICIT);
    check_cnn_steps_allocate_nothing_balanced("cpu:3", false, true, TD_BALANCE_AUTO);
}
Test(cnn, a_steady_state_step_with_batch_norm_and_dropout_allocates_nothing)
{
    check_cnn_steps_allocate_nothing("cpu:3", false, true);
}

Test(cnn_devices, a_steady_state_step_allocates_nothing_on_test_devices, .timeout = 300)
{
    check_cnn_steps_allocate_nothing(test_devices_spec("cpu:2"), true, true);
}

/* ---- a short real run ---- */

Test(cnn_slow, fashion_mnist_subset_passes_an_accuracy_floor, .timeout = 600)
{
    /* 200 Adam steps of 64 on the first 12800 training images (cpu:2),
     * then accuracy on the first 2000 test images. The floor, 0.75, sits
     * well under what this reaches (~0.80 measured) and far above chance
     * (0.10) and above what an untrained or broken gradient gives. */
    if (!getenv("TD_TEST_SLOW"))
        cr_skip_test("a training run: suite 'slow' runs it (TD_TEST_SLOW=1)");
    td_context *ctx = test_context(0);
    td_tensor *images = NULL, *labels = NULL, *test_images = NULL, *test_labels = NULL;
    if (td_data_load_mnist(ctx, TD_FASHION_MNIST_DIR, "train", &images, &labels) != TD_OK ||
        td_data_load_mnist(ctx, TD_FASHION_MNIST_DIR, "t10k", &test_images, &test_labels) != TD_OK) {
        td_context_destroy(ctx);
        cr_skip_test("Fashion-MNIST is not installed in %s (Debian's dataset-fashion-mnist)", TD_FASHION_MNIST_DIR);
    }
    enum { B = 64, STEPS_REAL = 200, TEST_N = 2000 };
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    const int64_t xd[4] = {B, 28, 28, 1}, yd[1] = {B}, flat[2] = {-1, 7 * 7 * 16};
    td_node xu, x, y, h, logits, loss;
    TEST_OK(ctx, td_graph_input(g, "image", TD_U8, 4, xd, TD_SHARDED, &xu));
    TEST_OK(ctx, td_graph_input(g, "label", TD_I32, 1, yd, TD_SHARDED, &y));
    TEST_OK(ctx, td_graph_cast(g, xu, &x));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f / 255.0f, &x));
    TEST_OK(ctx, td_layer_conv2d(g, "conv1", x, 8, 3, 3, NULL, true, 1, &h));
    TEST_OK(ctx, td_graph_relu(g, h, &h));
    TEST_OK(ctx, td_graph_max_pool2d(g, h, NULL, &h));
    TEST_OK(ctx, td_layer_conv2d(g, "conv2", h, 16, 3, 3, NULL, true, 1, &h));
    TEST_OK(ctx, td_graph_relu(g, h, &h));
    TEST_OK(ctx, td_graph_max_pool2d(g, h, NULL, &h));
    TEST_OK(ctx, td_graph_reshape(g, h, 2, flat, &h));
    TEST_OK(ctx, td_layer_dense(g, "dense", h, 10, true, 1, &logits));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(g, logits, y, &loss));
    td_node params[8], am, yf, eq, acc;
    uint32_t n_params;
    TEST_OK(ctx, td_graph_params(g, 8, params, &n_params));
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.optimizer = TD_OPTIMIZER_ADAM;
    opts.learning_rate = 2e-3f;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, n_params, params, &opts, &t));
    TEST_OK(ctx, td_graph_argmax(g, logits, &am));
    TEST_OK(ctx, td_graph_cast(g, y, &yf));
    TEST_OK(ctx, td_graph_equal(g, am, yf, &eq));
    TEST_OK(ctx, td_graph_mean(g, eq, 0, NULL, false, &acc));
    td_program *eval = test_compile(ctx, g, mesh, 1, &acc);
    td_tensor *xb = test_tensor(ctx, TD_U8, 4, xd), *ybt = test_tensor(ctx, TD_I32, 1, yd);
    uint32_t idx[B];
    for (int step = 0; step < STEPS_REAL; step++) {
        for (int i = 0; i < B; i++)
            idx[i] = (uint32_t)(step * B + i);
        TEST_OK(ctx, td_data_gather_batch(ctx, images, idx, B, xb));
        TEST_OK(ctx, td_data_gather_batch(ctx, labels, idx, B, ybt));
        td_binding b[2] = {{xu, xb}, {y, ybt}};
        TEST_OK(ctx, td_trainer_step(t, 2, b, NULL));
    }
    for (uint32_t i = 0; i < n_params; i++) {
        uint32_t rank;
        int64_t dims[4];
        TEST_OK(ctx, td_graph_shape(g, params[i], &rank, dims));
        td_tensor *v = test_tensor(ctx, TD_F32, rank, dims);
        TEST_OK(ctx, td_trainer_read_param(t, params[i], 0, v));
        TEST_OK(ctx, td_program_set_param(eval, params[i], v));
        td_tensor_destroy(v);
    }
    double correct = 0;
    for (int start = 0; start < TEST_N; start += B) {
        for (int i = 0; i < B; i++)
            idx[i] = (uint32_t)(start + i);
        TEST_OK(ctx, td_data_gather_batch(ctx, test_images, idx, B, xb));
        TEST_OK(ctx, td_data_gather_batch(ctx, test_labels, idx, B, ybt));
        td_binding b[2] = {{xu, xb}, {y, ybt}};
        TEST_OK(ctx, td_program_run(eval, 2, b));
        for (uint32_t d = 0; d < 2; d++) {
            td_tensor *a = test_read_output(ctx, eval, 0, d);
            correct += test_f32(a)[0] * (B / 2);
            td_tensor_destroy(a);
        }
    }
    /* 2000 is not a multiple of 64: the last batch reads images 1984..2047,
     * so count exactly the 2048 evaluated. */
    double accuracy = correct / 2048.0;
    cr_log_info("fashion-mnist subset: test accuracy %.4f after %d steps", accuracy, STEPS_REAL);
    cr_assert_geq(accuracy, 0.75, "test accuracy %.4f is under the floor 0.75", accuracy);
    td_tensor_destroy(xb);
    td_tensor_destroy(ybt);
    td_tensor_destroy(images);
    td_tensor_destroy(labels);
    td_tensor_destroy(test_images);
    td_tensor_destroy(test_labels);
    td_context_destroy(ctx);
}
