/* Mixed precision (td_trainer_options.precision = TD_PRECISION_BF16): a
 * CNN trains with every convolution and matrix product in bf16 -- not the
 * fp32 bits, close to them, the loss falling -- to the same parameters
 * bitwise on one host thread or three (the pool splits the GEMMs by rows),
 * in deterministic mode as well; the evaluator follows with
 * td_evaluator_set_precision; values that are not a td_precision are
 * refused by name. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "tandem/eval.h"
#include "tandem/models.h"

enum { STEPS = 3 };

/* Nonzero: the trainer options' struct_size, as an older caller's. */
static size_t options_size;

typedef struct run {
    float losses[STEPS];
    float eval_loss; /* the evaluator's loss on the batch after the steps */
    float *params;
    size_t n_values;
} run;

static td_context *context_with(bool deterministic, uint32_t threads)
{
    td_context_options o;
    td_context_options_init(&o);
    o.deterministic = deterministic;
    o.cpu_threads = threads;
    o.timeout_ms = 60000;
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(&o, &ctx), TD_OK);
    return ctx;
}

/* STEPS Adam steps of the seed CNN on one random batch of B images, then
 * one evaluation of it in the same precision. */
static void train_cnn(const char *spec, int64_t B, td_precision precision, bool deterministic, uint32_t threads,
                      run *out)
{
    td_context *ctx = context_with(deterministic, threads);
    td_mesh *mesh = test_mesh(ctx, spec);
    test_classifier m;
    test_classifier_create(ctx, "cnn", B, 5, 0xB16u, &m);
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.optimizer = TD_OPTIMIZER_ADAM;
    to.precision = precision;
    if (options_size)
        to.struct_size = options_size;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &to, &t));
    td_evaluator *e;
    TEST_OK(ctx, td_evaluator_create(m.g, mesh, m.mask, 1, &m.loss, &e));
    TEST_OK(ctx, td_evaluator_set_precision(e, precision));
    for (int step = 0; step < STEPS; step++)
        TEST_OK(ctx, td_trainer_step(t, 3, m.bindings, &out->losses[step]));
    TEST_OK(ctx, td_evaluator_load(e, t));
    TEST_OK(ctx, td_evaluator_run(e, 3, m.bindings));
    double examples = 0.0;
    TEST_OK(ctx, td_evaluator_result(e, 1, &out->eval_loss, &examples));
    cr_assert_eq(examples, (double)B);
    out->params = test_read_trained(ctx, m.g, t, m.n_params, m.params, 0, &out->n_values);
    test_classifier_destroy(&m);
    td_context_destroy(ctx);
}

static size_t values_differing(const run *a, const run *b)
{
    cr_assert_eq(a->n_values, b->n_values);
    return test_floats_differing(a->params, b->params, a->n_values) +
           test_floats_differing(a->losses, b->losses, STEPS) + test_floats_differing(&a->eval_loss, &b->eval_loss, 1);
}

/* Root mean square of a - b over the root mean square of b. */
static double relative_rms(const run *a, const run *b)
{
    return test_relative_rms(a->params, b->params, a->n_values);
}

/* 32 images: the convolutions' GEMMs have 25088 and 6272 rows, split by
 * the pool into parts of 192 when there are threads to take them. */
Test(precision, bf16_trains_the_cnn_to_the_same_bits_on_one_thread_or_three_and_not_to_fp32s, .timeout = 240)
{
    run fp32, bf16_1, bf16_3;
    train_cnn("cpu:1", 32, TD_PRECISION_FP32, false, 1, &fp32);
    train_cnn("cpu:1", 32, TD_PRECISION_BF16, false, 1, &bf16_1);
    train_cnn("cpu:1", 32, TD_PRECISION_BF16, false, 3, &bf16_3);
    cr_assert_lt(bf16_1.losses[STEPS - 1], bf16_1.losses[0], "the loss should fall: %g then %g",
                 (double)bf16_1.losses[0], (double)bf16_1.losses[STEPS - 1]);
    cr_assert_eq(values_differing(&bf16_1, &bf16_3), 0, "bf16, 1 thread vs 3");
    /* The first loss is the forward pass alone: bf16 rounding moves it by
     * about 2^-9 relative, never by nothing. */
    cr_assert_neq(memcmp(&fp32.losses[0], &bf16_1.losses[0], sizeof(float)), 0, "bf16 gave fp32's first loss");
    cr_assert_lt(fabs((double)fp32.losses[0] - (double)bf16_1.losses[0]), 0.01 * fabs((double)fp32.losses[0]),
                 "first loss fp32 %g, bf16 %g", (double)fp32.losses[0], (double)bf16_1.losses[0]);
    const double apart = relative_rms(&bf16_1, &fp32);
    cr_assert(apart > 0.0 && apart < 0.01, "bf16 parameters %g (relative RMS) from fp32's after %d steps", apart,
              STEPS);
    /* The evaluator ran in bf16 too: it is not the fp32 evaluation's loss. */
    cr_assert_neq(memcmp(&fp32.eval_loss, &bf16_1.eval_loss, sizeof(float)), 0);
    cr_assert(isfinite(bf16_1.eval_loss) && bf16_1.eval_loss < bf16_1.losses[0], "evaluation loss %g",
              (double)bf16_1.eval_loss);
    free(fp32.params);
    free(bf16_1.params);
    free(bf16_3.params);
}

/* Deterministic mode: the portable kernel, the same bits at any thread count. */
Test(precision, deterministic_bf16_gives_the_same_bits_on_one_thread_or_three, .timeout = 240)
{
    run a, b;
    train_cnn("cpu:1", 16, TD_PRECISION_BF16, true, 1, &a);
    train_cnn("cpu:1", 16, TD_PRECISION_BF16, true, 3, &b);
    cr_assert_eq(values_differing(&a, &b), 0, "deterministic bf16, 1 thread vs 3");
    cr_assert_lt(a.losses[STEPS - 1], a.losses[0]);
    free(a.params);
    free(b.params);
}

/* Two devices: each a bf16 plan of its own, the ring's sums in fp32; the
 * same bits on two threads or four. */
Test(precision, two_devices_train_in_bf16_to_the_same_bits_on_two_threads_or_four, .timeout = 240)
{
    run a, b;
    train_cnn("cpu:2", 32, TD_PRECISION_BF16, false, 2, &a);
    train_cnn("cpu:2", 32, TD_PRECISION_BF16, false, 4, &b);
    cr_assert_eq(values_differing(&a, &b), 0, "cpu:2 bf16, 2 threads vs 4");
    free(a.params);
    free(b.params);
}

/* A caller built before td_trainer_options.precision existed passes a
 * smaller struct_size: whatever lies past it, the trainer runs fp32. */
Test(precision, an_older_callers_options_train_in_fp32, .timeout = 240)
{
    run fp32, older;
    train_cnn("cpu:1", 16, TD_PRECISION_FP32, false, 2, &fp32);
    options_size = offsetof(td_trainer_options, precision);
    train_cnn("cpu:1", 16, TD_PRECISION_BF16, false, 2, &older);
    options_size = 0;
    cr_assert_eq(values_differing(&older, &fp32) - (memcmp(&older.eval_loss, &fp32.eval_loss, sizeof(float)) != 0), 0,
                 "an options struct ending before precision trained otherwise than fp32");
    free(fp32.params);
    free(older.params);
}

Test(precision, a_value_that_is_not_a_precision_is_refused_by_name)
{
    td_context *ctx = context_with(false, 1);
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    const int64_t dims[2] = {4, 3};
    td_graph *g;
    td_node x, w, y, loss;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_SHARDED, &x));
    const int64_t wd[2] = {3, 2};
    TEST_OK(ctx, td_graph_param(g, "w", 2, wd, &w));
    TEST_OK(ctx, td_graph_matmul(g, x, w, &y));
    TEST_OK(ctx, td_graph_mean(g, y, 0, NULL, false, &loss));
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.precision = (td_precision)5;
    td_trainer *t = NULL;
    cr_assert_eq(td_trainer_create(g, mesh, loss, 1, &w, &to, &t), TD_ERR_INVALID_ARGUMENT);
    cr_assert_null(t);
    cr_assert(strstr(td_last_error(ctx), "precision 5"), "message: %s", td_last_error(ctx));
    td_node mask;
    const int64_t four = 4;
    TEST_OK(ctx, td_graph_input(g, "mask", TD_F32, 1, &four, TD_SHARDED, &mask));
    td_evaluator *e;
    TEST_OK(ctx, td_evaluator_create(g, mesh, mask, 1, &loss, &e));
    cr_assert_eq(td_evaluator_set_precision(e, (td_precision)-1), TD_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(td_last_error(ctx), "td_evaluator_set_precision: precision -1"), "message: %s",
              td_last_error(ctx));
    TEST_OK(ctx, td_evaluator_set_precision(e, TD_PRECISION_BF16));
    td_context_destroy(ctx);
}
