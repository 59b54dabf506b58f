/* One rule for each kind of bad argument, checked across the whole API:
 *   - a dtype a call does not take is TD_ERR_INVALID_ARGUMENT naming the
 *     function, the operand, the dtype and what was expected;
 *   - a float parameter that is NaN or +-inf is TD_ERR_INVALID_ARGUMENT
 *     naming the field and the value;
 *   - the builders refuse the bad shapes the issue lists, with the values.
 * Each table row is one call; a new function that takes a dtype or a float
 * gets a row here. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine_test_util.h"

static td_context *ctx;
static td_graph *g;

static void setup(void)
{
    ctx = test_context(5000);
    TEST_OK(ctx, td_graph_create(ctx, &g));
}

static void teardown(void)
{
    td_context_destroy(ctx);
}

TestSuite(validation, .init = setup, .fini = teardown);

/* The dtype rule: the status, the function's name and the bad dtype's. */
static void expect_dtype_refused(td_status s, const char *call, const char *fn, const char *dtype)
{
    cr_assert_eq(s, TD_ERR_INVALID_ARGUMENT, "%s returned %s (%s), expected TD_ERR_INVALID_ARGUMENT", call,
                 td_status_name(s), td_last_error(ctx));
    char head[96], is[48];
    snprintf(head, sizeof head, "%s: ", fn);
    snprintf(is, sizeof is, " is %s", dtype);
    cr_assert(strncmp(td_last_error(ctx), head, strlen(head)) == 0, "%s: the message does not start with '%s': %s",
              call, head, td_last_error(ctx));
    cr_assert(strstr(td_last_error(ctx), is) != NULL && strstr(td_last_error(ctx), ", expected ") != NULL,
              "%s: the message does not say '%s, expected ...': %s", call, is, td_last_error(ctx));
}

#define EXPECT_DTYPE(call, fn, dtype) expect_dtype_refused((call), #call, (fn), (dtype))

/* Nodes of each dtype, shaped so that only the dtype is wrong. */
typedef struct dtype_nodes {
    td_node f, i, u;          /* f32, i32, u8 [4, 3] */
    td_node fvec, ivec, uvec; /* [4] */
    td_node iscalar;          /* i32 [] */
    td_node f4, i4;           /* [2, 3, 3, 2] NHWC */
    td_node k4, table;        /* conv kernel [2, 2, 2, 1], table [5, 3] */
} dtype_nodes;

static dtype_nodes make_nodes(void)
{
    dtype_nodes n;
    const int64_t m[2] = {4, 3}, v[1] = {4}, img[4] = {2, 3, 3, 2}, k[4] = {2, 2, 2, 1}, t[2] = {5, 3};
    TEST_OK(ctx, td_graph_input(g, "f", TD_F32, 2, m, TD_SHARDED, &n.f));
    TEST_OK(ctx, td_graph_input(g, "i", TD_I32, 2, m, TD_SHARDED, &n.i));
    TEST_OK(ctx, td_graph_input(g, "u", TD_U8, 2, m, TD_SHARDED, &n.u));
    TEST_OK(ctx, td_graph_input(g, "fvec", TD_F32, 1, v, TD_SHARDED, &n.fvec));
    TEST_OK(ctx, td_graph_input(g, "ivec", TD_I32, 1, v, TD_SHARDED, &n.ivec));
    TEST_OK(ctx, td_graph_input(g, "uvec", TD_U8, 1, v, TD_SHARDED, &n.uvec));
    TEST_OK(ctx, td_graph_input(g, "iscalar", TD_I32, 0, NULL, TD_REPLICATED, &n.iscalar));
    TEST_OK(ctx, td_graph_input(g, "f4", TD_F32, 4, img, TD_SHARDED, &n.f4));
    TEST_OK(ctx, td_graph_input(g, "i4", TD_I32, 4, img, TD_SHARDED, &n.i4));
    TEST_OK(ctx, td_graph_param(g, "k4", 4, k, &n.k4));
    TEST_OK(ctx, td_graph_param(g, "table", 2, t, &n.table));
    return n;
}

Test(validation, a_bad_dtype_is_one_status_with_one_message_in_graph_builders)
{
    dtype_nodes n = make_nodes();
    td_node y;
    const int64_t v[1] = {4};
    const int32_t last = -1;
    /* Reserved dtypes, and values outside td_dtype. */
    EXPECT_DTYPE(td_graph_input(g, "h", TD_F16, 1, v, TD_SHARDED, &y), "td_graph_input", "f16");
    EXPECT_DTYPE(td_graph_input(g, "h", TD_BF16, 1, v, TD_SHARDED, &y), "td_graph_input", "bf16");
    EXPECT_DTYPE(td_graph_input(g, "h", (td_dtype)42, 1, v, TD_SHARDED, &y), "td_graph_input", "42");
    EXPECT_DTYPE(td_graph_input(g, "h", (td_dtype)-3, 1, v, TD_SHARDED, &y), "td_graph_input", "-3");
    /* An i32 or u8 operand where f32 is needed. */
    EXPECT_DTYPE(td_graph_add(g, n.i, n.f, &y), "td_graph_add", "i32");
    EXPECT_DTYPE(td_graph_mul(g, n.f, n.u, &y), "td_graph_mul", "u8");
    EXPECT_DTYPE(td_graph_equal(g, n.f, n.i, &y), "td_graph_equal", "i32");
    EXPECT_DTYPE(td_graph_relu(g, n.u, &y), "td_graph_relu", "u8");
    EXPECT_DTYPE(td_graph_gelu(g, n.i, true, &y), "td_graph_gelu", "i32");
    EXPECT_DTYPE(td_graph_scale(g, n.i, 2.0f, &y), "td_graph_scale", "i32");
    EXPECT_DTYPE(td_graph_matmul(g, n.i, n.table, &y), "td_graph_matmul", "i32");
    EXPECT_DTYPE(td_graph_transpose(g, n.i, 2, (int32_t[]){1, 0}, &y), "td_graph_transpose", "i32");
    EXPECT_DTYPE(td_graph_sum(g, n.u, 0, NULL, false, &y), "td_graph_sum", "u8");
    EXPECT_DTYPE(td_graph_mean(g, n.i, 1, &last, true, &y), "td_graph_mean", "i32");
    EXPECT_DTYPE(td_graph_softmax(g, n.i, &y), "td_graph_softmax", "i32");
    EXPECT_DTYPE(td_graph_log_softmax(g, n.u, &y), "td_graph_log_softmax", "u8");
    EXPECT_DTYPE(td_graph_argmax(g, n.i, &y), "td_graph_argmax", "i32");
    EXPECT_DTYPE(td_graph_conv2d(g, n.i4, n.k4, NULL, &y), "td_graph_conv2d", "i32");
    EXPECT_DTYPE(td_graph_max_pool2d(g, n.i4, NULL, &y), "td_graph_max_pool2d", "i32");
    EXPECT_DTYPE(td_graph_avg_pool2d(g, n.i4, NULL, &y), "td_graph_avg_pool2d", "i32");
    EXPECT_DTYPE(td_graph_layer_norm(g, n.i, TD_NO_NODE, TD_NO_NODE, 1e-6f, &y), "td_graph_layer_norm", "i32");
    EXPECT_DTYPE(td_graph_psum(g, n.i, &y), "td_graph_psum", "i32");
    EXPECT_DTYPE(td_graph_pmean(g, n.u, &y), "td_graph_pmean", "u8");
    EXPECT_DTYPE(td_graph_all_gather(g, n.i, &y), "td_graph_all_gather", "i32");
    EXPECT_DTYPE(td_graph_broadcast(g, n.u, 0, &y), "td_graph_broadcast", "u8");
    EXPECT_DTYPE(td_graph_mse(g, n.i, n.f, &y), "td_graph_mse", "i32");
    EXPECT_DTYPE(td_graph_mse(g, n.f, n.u, &y), "td_graph_mse", "u8");
    EXPECT_DTYPE(td_graph_masked_mean(g, n.fvec, n.uvec, &y), "td_graph_masked_mean", "u8");
    /* The integer operands: u8 or f32 where i32 is declared. */
    EXPECT_DTYPE(td_graph_softmax_cross_entropy(g, n.f, n.uvec, &y), "td_graph_softmax_cross_entropy", "u8");
    EXPECT_DTYPE(td_graph_softmax_cross_entropy(g, n.f, n.fvec, &y), "td_graph_softmax_cross_entropy", "f32");
    EXPECT_DTYPE(td_graph_softmax_cross_entropy(g, n.i, n.ivec, &y), "td_graph_softmax_cross_entropy", "i32");
    EXPECT_DTYPE(td_graph_embedding(g, n.table, n.fvec, &y), "td_graph_embedding", "f32");
    EXPECT_DTYPE(td_graph_embedding(g, n.table, n.uvec, &y), "td_graph_embedding", "u8");
    EXPECT_DTYPE(td_graph_cast(g, n.f, &y), "td_graph_cast", "f32");
    EXPECT_DTYPE(td_graph_value_and_grad(g, n.iscalar, 1, &n.table, &y), "td_graph_value_and_grad", "i32");
    EXPECT_DTYPE(td_graph_softmax_cross_entropy_per_example(g, n.f, n.uvec, &y),
                 "td_graph_softmax_cross_entropy_per_example", "u8");
    /* The train/evaluate ops. */
    td_node st;
    TEST_OK(ctx, td_graph_state(g, "st", 2, (int64_t[]){4, 3}, NULL, &st));
    EXPECT_DTYPE(td_graph_dropout(g, n.i, 0.5f, 1, &y), "td_graph_dropout", "i32");
    EXPECT_DTYPE(td_graph_by_mode(g, n.f, n.u, &y), "td_graph_by_mode", "u8");
    EXPECT_DTYPE(td_graph_state_update(g, st, n.i), "td_graph_state_update", "i32");
    EXPECT_DTYPE(td_graph_batch_norm(g, n.i4, TD_NO_NODE, TD_NO_NODE, TD_NO_NODE, TD_NO_NODE, NULL, &y),
                 "td_graph_batch_norm", "i32");
    EXPECT_DTYPE(td_layer_batch_norm(g, "bn", n.u, NULL, &y), "td_layer_batch_norm", "u8");
    td_model_options mo;
    td_model_options_init(&mo);
    EXPECT_DTYPE(td_model_mlp(g, n.i4, &mo, &y), "td_model_mlp", "i32");
    /* Layers. */
    EXPECT_DTYPE(td_layer_dense(g, "d", n.i, 2, true, 1, &y), "td_layer_dense", "i32");
    EXPECT_DTYPE(td_layer_conv2d(g, "c", n.i4, 2, 1, 1, NULL, true, 1, &y), "td_layer_conv2d", "i32");
    EXPECT_DTYPE(td_layer_layer_norm(g, "n", n.u, 1e-6f, &y), "td_layer_layer_norm", "u8");
    uint32_t params = 0;
    TEST_OK(ctx, td_graph_params(g, 0, NULL, &params));
    cr_assert_eq(params, 2, "a refused layer adds no parameter (%u)", params);
    td_node found;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "bn/mean", td_graph_find(g, "bn/mean", &found));
    /* Reshape keeps the dtype, so the check downstream still sees it. */
    td_node flat;
    TEST_OK(ctx, td_graph_reshape(g, n.u, 1, (int64_t[]){-1}, &flat));
    EXPECT_DTYPE(td_graph_relu(g, flat, &y), "td_graph_relu", "u8");
}

Test(validation, a_bad_dtype_is_one_status_with_one_message_in_tensors_programs_trainers_and_data)
{
    const int64_t m[2] = {4, 3}, v[1] = {4}, w[2] = {3, 1};
    td_tensor *t = (td_tensor *)&t;
    EXPECT_DTYPE(td_tensor_create(ctx, (td_dtype)9, 1, v, &t), "td_tensor_create", "9");
    cr_assert_null(t);

    /* logits = x w, labels i32 [4], mask f32 [4], a u8 input. */
    td_node x, labels, mask, raw, wn, logits, xent, loss, ilabel;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, m, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "labels", TD_I32, 1, v, TD_SHARDED, &labels));
    TEST_OK(ctx, td_graph_input(g, "mask", TD_F32, 1, v, TD_SHARDED, &mask));
    TEST_OK(ctx, td_graph_input(g, "raw", TD_U8, 1, v, TD_SHARDED, &raw));
    TEST_OK(ctx, td_graph_param(g, "w", 2, w, &wn));
    TEST_OK(ctx, td_graph_matmul(g, x, wn, &logits));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(g, logits, labels, &xent));
    TEST_OK(ctx, td_graph_scale(g, xent, 1.0f, &loss));
    TEST_OK(ctx, td_graph_input(g, "ilabel", TD_I32, 0, NULL, TD_REPLICATED, &ilabel));
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_program *p = (td_program *)&p;
    EXPECT_DTYPE(td_pmap_compile(g, mesh, 1, &raw, &p), "td_pmap_compile", "u8");
    cr_assert_null(p);
    p = test_compile(ctx, g, mesh, 1, &loss);

    td_tensor *xf = test_tensor(ctx, TD_F32, 2, m), *xi = test_tensor(ctx, TD_I32, 2, m);
    td_tensor *li = test_tensor(ctx, TD_I32, 1, v), *lu = test_tensor(ctx, TD_U8, 1, v), *lf = test_tensor(ctx, TD_F32, 1, v);
    td_tensor *mf = test_tensor(ctx, TD_F32, 1, v), *mu = test_tensor(ctx, TD_U8, 1, v);
    td_tensor *wf = test_tensor(ctx, TD_F32, 2, w), *wi = test_tensor(ctx, TD_I32, 2, w);
    td_tensor *scalar_i = test_tensor(ctx, TD_I32, 0, NULL), *scalar_f = test_tensor(ctx, TD_F32, 0, NULL);
    TEST_OK(ctx, td_data_batch_mask(ctx, mf, 4));
    /* u8 labels where i32 is declared, an i32 batch, a u8 mask. */
    EXPECT_DTYPE(td_program_run(p, 3, (td_binding[]){{x, xf}, {labels, lu}, {mask, mf}}), "td_program_run", "u8");
    cr_assert(strstr(td_last_error(ctx), "'labels'") != NULL, "the input is named: %s", td_last_error(ctx));
    EXPECT_DTYPE(td_program_run(p, 3, (td_binding[]){{x, xf}, {labels, lf}, {mask, mf}}), "td_program_run", "f32");
    EXPECT_DTYPE(td_program_run(p, 3, (td_binding[]){{x, xi}, {labels, li}, {mask, mf}}), "td_program_run", "i32");
    EXPECT_DTYPE(td_program_run(p, 3, (td_binding[]){{x, xf}, {labels, li}, {mask, mu}}), "td_program_run", "u8");
    TEST_OK(ctx, td_program_run(p, 3, (td_binding[]){{x, xf}, {labels, li}, {mask, mf}}));
    EXPECT_DTYPE(td_program_read_output(p, 0, 0, scalar_i), "td_program_read_output", "i32");
    EXPECT_DTYPE(td_program_set_param(p, wn, wi), "td_program_set_param", "i32");
    EXPECT_DTYPE(td_program_read_param(p, wn, 1, wi), "td_program_read_param", "i32");
    TEST_OK(ctx, td_program_read_output(p, 0, 0, scalar_f));

    td_trainer_options o;
    td_trainer_options_init(&o);
    o.n_metrics = 1;
    o.metrics = &ilabel;
    td_trainer *tr = (td_trainer *)&tr;
    EXPECT_DTYPE(td_trainer_create(g, mesh, loss, 1, &wn, &o, &tr), "td_trainer_create", "i32");
    cr_assert_null(tr);
    EXPECT_DTYPE(td_trainer_create(g, mesh, ilabel, 1, &wn, NULL, &tr), "td_graph_value_and_grad", "i32");
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, 1, &wn, NULL, &tr));
    EXPECT_DTYPE(td_trainer_set_param(tr, wn, wi), "td_trainer_set_param", "i32");
    EXPECT_DTYPE(td_trainer_read_param(tr, wn, 0, wi), "td_trainer_read_param", "i32");
    EXPECT_DTYPE(td_trainer_step(tr, 3, (td_binding[]){{x, xf}, {labels, lu}, {mask, mf}}, NULL), "td_trainer_step",
                 "u8");
    TEST_OK(ctx, td_trainer_step(tr, 3, (td_binding[]){{x, xf}, {labels, li}, {mask, mf}}, NULL));

    td_evaluator *e = (td_evaluator *)&e;
    EXPECT_DTYPE(td_evaluator_create(g, mesh, raw, 1, &loss, &e), "td_evaluator_create", "u8");
    EXPECT_DTYPE(td_evaluator_create(g, mesh, labels, 1, &loss, &e), "td_evaluator_create", "i32");
    EXPECT_DTYPE(td_evaluator_create(g, mesh, mask, 1, &ilabel, &e), "td_evaluator_create", "i32");
    cr_assert_null(e);
    TEST_OK(ctx, td_evaluator_create(g, mesh, mask, 1, &loss, &e));
    EXPECT_DTYPE(td_evaluator_run(e, 3, (td_binding[]){{x, xf}, {labels, li}, {mask, mu}}), "td_evaluator_run", "u8");

    uint32_t idx[2] = {0, 1};
    EXPECT_DTYPE(td_data_gather_batch(ctx, xf, idx, 2, xi), "td_data_gather_batch", "i32");
    EXPECT_DTYPE(td_data_batch_mask(ctx, li, 2), "td_data_batch_mask", "i32");

    td_tensor *all[] = {xf, xi, li, lu, lf, mf, mu, wf, wi, scalar_i, scalar_f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        td_tensor_destroy(all[i]);
}

/* ---- floats: NaN and +-inf are refused wherever a float parametrizes ---- */

static const float non_finite[3] = {NAN, INFINITY, -INFINITY};

static void expect_float_refused(td_status s, const char *call, const char *field, float value)
{
    cr_assert_eq(s, TD_ERR_INVALID_ARGUMENT, "%s with %s = %g returned %s (%s)", call, field, (double)value,
                 td_status_name(s), td_last_error(ctx));
    cr_assert(strstr(td_last_error(ctx), field) != NULL, "%s: the message does not name %s: %s", call, field,
              td_last_error(ctx));
    char shown[16];
    snprintf(shown, sizeof shown, "%g", (double)value);
    cr_assert(strstr(td_last_error(ctx), shown) != NULL, "%s: the message does not show %s: %s", call, shown,
              td_last_error(ctx));
}

Test(validation, every_trainer_float_must_be_finite_whatever_the_optimizer)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    td_node w, s;
    TEST_OK(ctx, td_graph_param(g, "w", 1, (int64_t[]){3}, &w));
    TEST_OK(ctx, td_graph_sum(g, w, 0, NULL, false, &s));
    const char *names[] = {"learning_rate", "momentum", "b1", "b2", "eps", "weight_decay", "decay", "max_norm"};
    for (int kind = TD_OPTIMIZER_SGD; kind <= TD_OPTIMIZER_RMSPROP; kind++)
        for (size_t f = 0; f < sizeof names / sizeof names[0]; f++)
            for (int v = 0; v < 3; v++) {
                td_trainer_options o;
                td_trainer_options_init(&o);
                o.optimizer = (td_optimizer_kind)kind;
                float *fields[] = {&o.learning_rate, &o.momentum, &o.b1, &o.b2, &o.eps, &o.weight_decay, &o.decay,
                                   &o.max_norm};
                *fields[f] = non_finite[v];
                td_trainer *t = (td_trainer *)&t;
                expect_float_refused(td_trainer_create(g, mesh, s, 1, &w, &o, &t), "td_trainer_create", names[f],
                                     non_finite[v]);
                cr_assert_null(t);
            }
}

Test(validation, schedule_values_must_be_finite)
{
    for (int v = 0; v < 3; v++) {
        const float bad = non_finite[v];
        td_schedule base;
        memset(&base, 0, sizeof base);
        base.init_value = 0.1f;
        base.peak_value = 0.2f;
        base.end_value = 0.01f;
        base.decay_rate = 0.5f;
        base.transition_steps = 10;
        base.decay_steps = 100;
        base.warmup_steps = 10;
        base.alpha = 0.1f;
        struct {
            td_schedule_kind kind;
            const char *field;
            float *slot;
        } rows[] = {
            {TD_SCHEDULE_CONSTANT, "init_value", &base.init_value},
            {TD_SCHEDULE_EXPONENTIAL_DECAY, "init_value", &base.init_value},
            {TD_SCHEDULE_EXPONENTIAL_DECAY, "decay_rate", &base.decay_rate},
            {TD_SCHEDULE_EXPONENTIAL_DECAY, "end_value", &base.end_value},
            {TD_SCHEDULE_COSINE_DECAY, "init_value", &base.init_value},
            {TD_SCHEDULE_COSINE_DECAY, "alpha", &base.alpha},
            {TD_SCHEDULE_WARMUP_COSINE_DECAY, "init_value", &base.init_value},
            {TD_SCHEDULE_WARMUP_COSINE_DECAY, "peak_value", &base.peak_value},
            {TD_SCHEDULE_WARMUP_COSINE_DECAY, "end_value", &base.end_value},
        };
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            const float keep = *rows[r].slot;
            base.kind = rows[r].kind;
            base.has_end_value = true;
            *rows[r].slot = bad;
            float lr = -1.0f;
            expect_float_refused(td_schedule_value(ctx, &base, 3, &lr), "td_schedule_value", rows[r].field, bad);
            cr_assert_eq(lr, -1.0f);
            *rows[r].slot = keep;
        }
    }
}

Test(validation, a_schedule_that_overflows_later_is_refused_when_it_does)
{
    /* optax lets an exponential "decay" grow; its value eventually passes
     * float's range, and inf would write NaN into every parameter. */
    td_schedule grow;
    memset(&grow, 0, sizeof grow);
    grow.kind = TD_SCHEDULE_EXPONENTIAL_DECAY;
    grow.init_value = 1e-3f;
    grow.decay_rate = 1e20f;
    grow.transition_steps = 1;
    float lr = 0;
    TEST_OK(ctx, td_schedule_value(ctx, &grow, 1, &lr));
    cr_assert_float_eq(lr, 1e17f, 1e11f);
    TEST_OK(ctx, td_schedule_value(ctx, &grow, 2, &lr)); /* 1e37 < FLT_MAX */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "the value at step 3 overflows", td_schedule_value(ctx, &grow, 3, &lr));
    grow.has_end_value = true;
    grow.end_value = 5.0f;
    TEST_OK(ctx, td_schedule_value(ctx, &grow, 1000, &lr));
    cr_assert_eq(lr, 5.0f, "capped at end_value");

    /* The trainer: the first two updates run, the third fails before any
     * parameter changes, and so does every later one. */
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.schedule = grow;
    o.schedule.has_end_value = false;
    o.schedule.decay_rate = 1e38f;
    o.schedule.init_value = 1e-30f;
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, 1, &w, &o, &t));
    td_tensor *xv = test_tensor(ctx, TD_F32, 2, (int64_t[]){4, 3}), *yv = test_tensor(ctx, TD_F32, 2, (int64_t[]){4, 1});
    td_binding b[2] = {{x, xv}, {y, yv}};
    TEST_OK(ctx, td_trainer_step(t, 2, b, NULL)); /* lr 1e-30 */
    TEST_OK(ctx, td_trainer_step(t, 2, b, NULL)); /* lr 1e8 (a zero gradient) */
    td_tensor *before = test_tensor(ctx, TD_F32, 2, (int64_t[]){3, 1}), *after = test_tensor(ctx, TD_F32, 2, (int64_t[]){3, 1});
    TEST_OK(ctx, td_trainer_read_param(t, w, 1, before));
    for (int i = 0; i < 2; i++)
        TEST_FAILS(ctx, TD_ERR_STATE, "learning rate at update 2 is inf", td_trainer_step(t, 2, b, NULL));
    TEST_OK(ctx, td_trainer_read_param(t, w, 1, after));
    cr_assert_arr_eq(test_f32(before), test_f32(after), 3 * sizeof(float));
    td_train_progress progress = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(t, &progress));
    cr_assert_eq(progress.updates, 2);
    td_tensor_destroy(xv);
    td_tensor_destroy(yv);
    td_tensor_destroy(before);
    td_tensor_destroy(after);
}

Test(validation, initializer_and_op_floats_must_be_finite)
{
    const int64_t d[1] = {3};
    td_node p, x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, (int64_t[]){2, 3}, TD_SHARDED, &x));
    for (int v = 0; v < 3; v++) {
        const float bad = non_finite[v];
        td_initializer init;
        td_initializer_constant(bad, &init);
        expect_float_refused(td_graph_param_init(g, "c", 1, d, &init, &p), "constant", "constant value", bad);
        td_initializer_normal(bad, 1, &init);
        expect_float_refused(td_graph_param_init(g, "n", 1, d, &init, &p), "normal", "stddev", bad);
        td_initializer_truncated_normal(bad, 1, &init);
        expect_float_refused(td_graph_param_init(g, "t", 1, d, &init, &p), "truncated", "stddev", bad);
        td_initializer_uniform(bad, 1.0f, 1, &init);
        expect_float_refused(td_graph_param_init(g, "u", 1, d, &init, &p), "uniform a", "uniform bounds", bad);
        td_initializer_uniform(-1.0f, bad, 1, &init);
        expect_float_refused(td_graph_param_init(g, "u", 1, d, &init, &p), "uniform b", "uniform bounds", bad);
        td_initializer_variance_scaling(bad, TD_FAN_IN, TD_DIST_NORMAL, 1, &init);
        expect_float_refused(td_graph_param_init(g, "v", 1, d, &init, &p), "variance_scaling", "scale", bad);
        expect_float_refused(td_graph_scale(g, x, bad, &y), "td_graph_scale", "factor", bad);
        expect_float_refused(td_graph_layer_norm(g, x, TD_NO_NODE, TD_NO_NODE, bad, &y), "td_graph_layer_norm",
                             "epsilon", bad);
        expect_float_refused(td_layer_layer_norm(g, "ln", x, bad, &y), "td_layer_layer_norm", "epsilon", bad);
        expect_float_refused(td_graph_dropout(g, x, bad, 1, &y), "td_graph_dropout", "rate", bad);
        td_batch_norm_options bn;
        td_batch_norm_options_init(&bn);
        bn.momentum = bad;
        expect_float_refused(td_graph_batch_norm(g, x, TD_NO_NODE, TD_NO_NODE, x, x, &bn, &y), "td_graph_batch_norm",
                             "momentum", bad);
        expect_float_refused(td_layer_batch_norm(g, "bn", x, &bn, &y), "td_layer_batch_norm", "momentum", bad);
        td_batch_norm_options_init(&bn);
        bn.epsilon = bad;
        expect_float_refused(td_graph_batch_norm(g, x, TD_NO_NODE, TD_NO_NODE, x, x, &bn, &y), "td_graph_batch_norm",
                             "epsilon", bad);
        expect_float_refused(td_layer_batch_norm(g, "bn", x, &bn, &y), "td_layer_batch_norm", "epsilon", bad);
        td_model_options mo;
        td_model_options_init(&mo);
        mo.dropout = bad;
        expect_float_refused(td_model_classifier(g, "mlp", x, &mo, &y), "td_model_classifier", "dropout", bad);
    }
    uint32_t params = 9;
    TEST_OK(ctx, td_graph_params(g, 0, NULL, &params));
    cr_assert_eq(params, 0, "refused calls add no parameter (%u)", params);
    td_node found;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "bn/var", td_graph_find(g, "bn/var", &found));
    /* A constant is data: inf is a legitimate value. */
    TEST_OK(ctx, td_graph_constant(g, -INFINITY, &y));
}

/* ---- the builders and the list of bad input ---- */

Test(validation, bad_shapes_and_arguments_name_the_values)
{
    const int64_t img[4] = {2, 5, 5, 3}, kd[4] = {3, 3, 3, 4}, vec[1] = {4}, tab[2] = {6, 3};
    td_node x, k, ids, table, y, v;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 4, img, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_param(g, "k", 4, kd, &k));
    TEST_OK(ctx, td_graph_input(g, "ids", TD_I32, 1, vec, TD_SHARDED, &ids));
    TEST_OK(ctx, td_graph_input(g, "v", TD_F32, 1, vec, TD_SHARDED, &v));
    TEST_OK(ctx, td_graph_param(g, "table", 2, tab, &table));
    td_conv2d_options co;
    td_conv2d_options_init(&co);
    td_pool2d_options po;
    td_pool2d_options_init(&po);
    /* Windows: zero, and a stride of 0 on each axis. */
    po.window[1] = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "window[1] is 0", td_graph_max_pool2d(g, x, &po, &y));
    td_pool2d_options_init(&po);
    po.stride[1] = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "stride[1] is 0", td_graph_max_pool2d(g, x, &po, &y));
    co.stride[0] = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "stride[0] is 0", td_graph_conv2d(g, x, k, &co, &y));
    td_conv2d_options_init(&co);
    co.padding = (td_padding_kind)7;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "padding 7", td_graph_conv2d(g, x, k, &co, &y));
    /* A kernel larger than the explicitly padded input: 5 + 1 < 7. */
    td_node big;
    TEST_OK(ctx, td_graph_param(g, "big", 4, (int64_t[]){7, 1, 3, 4}, &big));
    td_conv2d_options_init(&co);
    co.padding = TD_PADDING_EXPLICIT;
    co.pad[0] = 1;
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "larger than the padded input", td_graph_conv2d(g, x, big, &co, &y));
    co.pad[1] = 1;
    TEST_OK(ctx, td_graph_conv2d(g, x, big, &co, &y)); /* 5 + 2 = 7 fits */
    /* Ranks: the layer, the conv kernel, the ops over the last axis. */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "rank 1", td_layer_conv2d(g, "c", v, 4, 3, 3, NULL, true, 1, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "features 0", td_layer_conv2d(g, "c", x, 0, 3, 3, NULL, true, 1, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "kernel has rank 2", td_graph_conv2d(g, x, table, NULL, &y));
    td_node scalar;
    TEST_OK(ctx, td_graph_constant(g, 1.0f, &scalar));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "argmax needs rank >= 1", td_graph_argmax(g, scalar, &y));
    /* Embedding: a table that is not [V, D], ids of rank 4. */
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "embedding expects a table [V, D]", td_graph_embedding(g, v, ids, &y));
    td_node ids4;
    TEST_OK(ctx, td_graph_input(g, "ids4", TD_I32, 4, (int64_t[]){2, 1, 1, 2}, TD_SHARDED, &ids4));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "ids of rank < 4", td_graph_embedding(g, table, ids4, &y));
    /* Out-of-range node ids and NULL arguments in the newer builders. */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "node 999", td_graph_embedding(g, table, 999, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "node 999", td_graph_cast(g, 999, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "node 999", td_graph_conv2d(g, x, 999, NULL, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "node 999", td_graph_layer_norm(g, x, 999, TD_NO_NODE, 1e-6f, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "out is NULL", td_graph_conv2d(g, x, k, NULL, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "out is NULL", td_graph_max_pool2d(g, x, NULL, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "out is NULL", td_graph_embedding(g, table, ids, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "out is NULL", td_graph_softmax(g, v, NULL));
    cr_assert_eq(td_graph_conv2d(NULL, x, k, NULL, &y), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_embedding(NULL, table, ids, &y), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_masked_mean(NULL, v, v, &y), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_layer_conv2d(NULL, "c", x, 4, 3, 3, NULL, true, 1, &y), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_conv2d_options_init(NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_pool2d_options_init(NULL), TD_ERR_INVALID_ARGUMENT);
}

Test(validation, ids_outside_the_table_give_nan_rows_and_no_gradient)
{
    /* Documented behaviour (jnp.take's fill mode): a NaN row forward, the
     * row's gradient dropped backward; never a read outside the table. */
    td_node table, ids, rows, loss, grad;
    TEST_OK(ctx, td_graph_param(g, "table", 2, (int64_t[]){3, 2}, &table));
    TEST_OK(ctx, td_graph_input(g, "ids", TD_I32, 1, (int64_t[]){3}, TD_REPLICATED, &ids));
    TEST_OK(ctx, td_graph_embedding(g, table, ids, &rows));
    TEST_OK(ctx, td_graph_sum(g, rows, 1, (int32_t[]){1}, false, &loss));
    td_node total;
    TEST_OK(ctx, td_graph_sum(g, loss, 0, NULL, false, &total));
    TEST_OK(ctx, td_graph_value_and_grad(g, total, 1, &table, &grad));
    td_program *p = test_compile(ctx, g, test_mesh(ctx, "cpu:1"), 2, (td_node[]){rows, grad});
    td_tensor *tv = test_tensor_f32(ctx, 2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6});
    TEST_OK(ctx, td_program_set_param(p, table, tv));
    td_tensor *iv = test_tensor(ctx, TD_I32, 1, (int64_t[]){3});
    memcpy(test_i32(iv), (int32_t[]){2, 3, -1}, 3 * sizeof(int32_t));
    TEST_OK(ctx, td_program_run(p, 1, &(td_binding){ids, iv}));
    td_tensor *r = test_read_output(ctx, p, 0, 0), *gr = test_read_output(ctx, p, 1, 0);
    cr_assert(test_f32(r)[0] == 5.0f && test_f32(r)[1] == 6.0f);
    for (int i = 2; i < 6; i++)
        cr_assert(isnan(test_f32(r)[i]), "row of an id outside [0, 3): element %d is %g", i, (double)test_f32(r)[i]);
    const float want[6] = {0, 0, 0, 0, 1, 1};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(test_f32(gr)[i], want[i], "gradient %d is %g", i, (double)test_f32(gr)[i]);
    td_tensor_destroy(tv);
    td_tensor_destroy(iv);
    td_tensor_destroy(r);
    td_tensor_destroy(gr);
}

Test(validation, a_graph_without_parameters_trains_as_a_loss_only_step)
{
    /* No parameter in the graph at all (not merely none listed): the step
     * computes the loss on every device and touches no ring. */
    td_node x, y, loss;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, (int64_t[]){6, 2}, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "y", TD_F32, 2, (int64_t[]){6, 2}, TD_SHARDED, &y));
    TEST_OK(ctx, td_graph_mse(g, x, y, &loss));
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    td_tensor *xv = test_tensor_f32(ctx, 2, (int64_t[]){6, 2}, (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    td_tensor *yv = test_tensor(ctx, TD_F32, 2, (int64_t[]){6, 2});
    td_binding b[2] = {{x, xv}, {y, yv}};
    const double want = (1 + 4 + 9 + 16 + 25 + 36 + 49 + 64 + 81 + 100 + 121 + 144) / 12.0;
    td_trainer_options variants[3];
    for (int i = 0; i < 3; i++)
        td_trainer_options_init(&variants[i]);
    variants[1].optimizer = TD_OPTIMIZER_ADAM;
    variants[1].max_norm = 1.0f;
    variants[2].accumulate_steps = 2;
    for (int i = 0; i < 3; i++) {
        td_trainer *t = NULL;
        TEST_OK(ctx, td_trainer_create(g, mesh, loss, 0, NULL, &variants[i], &t));
        for (int step = 0; step < 3; step++) {
            float l = -1.0f;
            TEST_OK(ctx, td_trainer_step(t, 2, b, &l));
            cr_assert(test_close(l, want, 1e-6, 0), "variant %d step %d: loss %g, expected %g", i, step, (double)l,
                      want);
        }
        bool same = false;
        TEST_OK(ctx, td_trainer_replicas_identical(t, &same));
        cr_assert(same);
        td_trainer_destroy(t);
    }
    td_tensor_destroy(xv);
    td_tensor_destroy(yv);
}
