/* Bad input: every mistake a caller can make returns a status and a message
 * naming the problem; nothing crashes or aborts (invariant 4). */
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

TestSuite(errors, .init = setup, .fini = teardown);

/* ---- batch not divisible ---- */

Test(errors, pmap_batch_not_divisible_names_size_and_devices)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    int64_t xd[2] = {10, 3};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "features", TD_F32, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_scale(g, x, 2.0f, &y));
    td_program *p = (td_program *)&p;
    TEST_FAILS(ctx, TD_ERR_NOT_DIVISIBLE, "10", td_pmap_compile(g, mesh, 1, &y, &p));
    cr_assert(strstr(td_last_error(ctx), "4") != NULL, "%s", td_last_error(ctx));
    cr_assert(strstr(td_last_error(ctx), "features") != NULL, "the input is named: %s", td_last_error(ctx));
    cr_assert_null(p);
    /* The same graph compiles for a mesh it does split over. */
    td_mesh *two = test_mesh(ctx, "cpu:2");
    p = test_compile(ctx, g, two, 1, &y);
    td_program_destroy(p);
}

/* A trainer splits a batch the devices do not divide (3, 3, 2, 2: the
 * shares are weighted, test_balance.c), but not one with fewer examples
 * than devices; a plain pmap program needs even shards. */
Test(errors, trainer_batch_smaller_than_the_mesh)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 3, 3, &x, &y, &w, &loss);
    td_trainer *t = (td_trainer *)&t;
    TEST_FAILS(ctx, TD_ERR_NOT_DIVISIBLE, "3 examples", td_trainer_create(g, mesh, loss, 1, &w, NULL, &t));
    cr_assert(strstr(td_last_error(ctx), "4 devices") != NULL, "%s", td_last_error(ctx));
    cr_assert_null(t);
}

Test(errors, pmap_batch_not_divisible)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    td_node x, y, w, loss;
    test_linreg_graph(ctx, g, 10, 3, &x, &y, &w, &loss);
    td_program *p = (td_program *)&p;
    TEST_FAILS(ctx, TD_ERR_NOT_DIVISIBLE, "10", td_pmap_compile(g, mesh, 1, &loss, &p));
    cr_assert(strstr(td_last_error(ctx), "4 devices") != NULL, "%s", td_last_error(ctx));
    cr_assert_null(p);
}

Test(errors, sharded_scalar_input)
{
    /* Reported where the mistake is made: at graph build. */
    td_node s;
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "'s'", td_graph_input(g, "s", TD_F32, 0, NULL, TD_SHARDED, &s));
}

/* ---- shapes at graph build ---- */

Test(errors, matmul_shape_mismatch_names_both_shapes)
{
    int64_t ad[2] = {3, 4}, bd[2] = {5, 2};
    td_node a, b, y = 12345;
    TEST_OK(ctx, td_graph_param(g, "a", 2, ad, &a));
    TEST_OK(ctx, td_graph_param(g, "b", 2, bd, &b));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "[3, 4]", td_graph_matmul(g, a, b, &y));
    cr_assert(strstr(td_last_error(ctx), "[5, 2]") != NULL, "%s", td_last_error(ctx));
    cr_assert_eq(y, 12345, "out is untouched on failure");
    /* The failed node was not added: the next node gets the next id. */
    td_node c;
    TEST_OK(ctx, td_graph_scale(g, a, 1.0f, &c));
    cr_assert_eq(c, b + 1);
}

Test(errors, matmul_rank_errors)
{
    int64_t v[1] = {4}, m[2] = {4, 2}, t3[3] = {2, 4, 2};
    td_node a, b, c, y;
    TEST_OK(ctx, td_graph_param(g, "v", 1, v, &a));
    TEST_OK(ctx, td_graph_param(g, "m", 2, m, &b));
    TEST_OK(ctx, td_graph_param(g, "t", 3, t3, &c));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_matmul(g, a, b, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_matmul(g, b, c, &y));
}

Test(errors, elementwise_shapes_that_do_not_broadcast)
{
    int64_t ad[2] = {3, 4}, bd[2] = {3, 5}, cd[1] = {3};
    td_node a, b, c, y;
    TEST_OK(ctx, td_graph_param(g, "a", 2, ad, &a));
    TEST_OK(ctx, td_graph_param(g, "b", 2, bd, &b));
    TEST_OK(ctx, td_graph_param(g, "c", 1, cd, &c));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "[3, 5]", td_graph_add(g, a, b, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_sub(g, a, c, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_mul(g, c, a, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_mse(g, a, b, &y));
}

Test(errors, reshape_errors)
{
    int64_t ad[2] = {2, 3}, bad[2] = {4, 2}, inferred_bad[2] = {4, -1}, neg[1] = {-2}, ok[2] = {3, -1};
    td_node a, y;
    TEST_OK(ctx, td_graph_param(g, "a", 2, ad, &a));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_reshape(g, a, 2, bad, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_reshape(g, a, 2, inferred_bad, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_reshape(g, a, 1, neg, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_reshape(g, a, 5, ad, &y));
    TEST_OK(ctx, td_graph_reshape(g, a, 2, ok, &y));
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    TEST_OK(ctx, td_graph_shape(g, y, &rank, dims));
    cr_assert(rank == 2 && dims[0] == 3 && dims[1] == 2);
}

Test(errors, reshape_with_two_inferred_dims_is_rejected)
{
    /* [-1, -1, -1] of 6 elements: only one dimension may be inferred. */
    int64_t ad[2] = {2, 3}, two[3] = {-1, -1, -1};
    td_node a, y = 0;
    TEST_OK(ctx, td_graph_param(g, "a", 2, ad, &a));
    td_status s = td_graph_reshape(g, a, 3, two, &y);
    uint32_t rank = 0;
    int64_t dims[TD_MAX_RANK] = {0};
    if (s == TD_OK)
        td_graph_shape(g, y, &rank, dims);
    cr_assert(s == TD_ERR_INVALID_ARGUMENT || s == TD_ERR_SHAPE_MISMATCH,
              "reshape to [-1, -1, -1] returned %s with shape [%lld, %lld, %lld]", td_status_name(s),
              (long long)dims[0], (long long)dims[1], (long long)dims[2]);
}

Test(errors, reduce_axis_out_of_range)
{
    int64_t ad[2] = {2, 3};
    int32_t axis2[1] = {2}, axis_m3[1] = {-3};
    td_node a, y;
    TEST_OK(ctx, td_graph_param(g, "a", 2, ad, &a));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "axis 2", td_graph_sum(g, a, 1, axis2, false, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "-3", td_graph_mean(g, a, 1, axis_m3, true, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_sum(g, a, 1, NULL, false, &y));
}

Test(errors, softmax_cross_entropy_operand_errors)
{
    int64_t ld[2] = {4, 3}, labd[1] = {5}, l3[3] = {4, 3, 1};
    td_node logits, labels, flabels, logits3, y;
    TEST_OK(ctx, td_graph_param(g, "logits", 2, ld, &logits));
    TEST_OK(ctx, td_graph_input(g, "labels", TD_I32, 1, labd, TD_REPLICATED, &labels));
    TEST_OK(ctx, td_graph_input(g, "flabels", TD_F32, 1, labd, TD_REPLICATED, &flabels));
    TEST_OK(ctx, td_graph_param(g, "logits3", 3, l3, &logits3));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_softmax_cross_entropy(g, logits, labels, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "f32", td_graph_softmax_cross_entropy(g, logits, flabels, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_softmax_cross_entropy(g, logits3, labels, &y));
    /* i32 values cannot enter float ops. */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "i32", td_graph_scale(g, labels, 2.0f, &y));
}

Test(errors, all_gather_of_a_scalar_and_bad_broadcast_root)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_node c, y, b;
    TEST_OK(ctx, td_graph_constant(g, 1.0f, &c));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "all_gather", td_graph_all_gather(g, c, &y));
    TEST_OK(ctx, td_graph_broadcast(g, c, 2, &b)); /* the mesh is not known yet */
    td_program *p = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "root 2", td_pmap_compile(g, mesh, 1, &b, &p));
    cr_assert_null(p);
}

Test(errors, input_dtypes_and_placements)
{
    int64_t d[1] = {4};
    td_node x;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "dtype is f16, expected f32, i32 or u8", td_graph_input(g, "h", TD_F16, 1, d, TD_REPLICATED, &x));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_input(g, "x", TD_F32, 1, d, (td_placement)7, &x));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_input(g, "x", TD_F32, 1, (int64_t[]){-1}, TD_SHARDED, &x));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_input(g, "x", TD_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, TD_SHARDED, &x));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_input(g, "x", TD_F32, 2, NULL, TD_SHARDED, &x));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_param(g, "p", 1, (int64_t[]){-3}, &x));
}

/* ---- invalid node ids ---- */

Test(errors, node_ids_that_do_not_exist)
{
    int64_t d[1] = {4};
    td_node a, y;
    TEST_OK(ctx, td_graph_param(g, "a", 1, d, &a));
    const td_node bogus = 999;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_add(g, a, bogus, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_matmul(g, bogus, a, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_relu(g, bogus, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_sum(g, bogus, 0, NULL, false, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_reshape(g, bogus, 1, d, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_psum(g, bogus, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_broadcast(g, bogus, 0, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_mse(g, bogus, a, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_softmax_cross_entropy(g, bogus, a, &y));
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_shape(g, bogus, &rank, dims));
    td_node grad;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_graph_value_and_grad(g, bogus, 1, &a, &grad));
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    td_program *p = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "999", td_pmap_compile(g, mesh, 1, &bogus, &p));
}

Test(errors, value_and_grad_misuse)
{
    int64_t d[1] = {4};
    td_node a, x, y, s, grad;
    TEST_OK(ctx, td_graph_param(g, "a", 1, d, &a));
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, d, TD_REPLICATED, &x));
    TEST_OK(ctx, td_graph_mul(g, a, x, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "scalar", td_graph_value_and_grad(g, y, 1, &a, &grad));
    TEST_OK(ctx, td_graph_sum(g, y, 0, NULL, false, &s));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "not a parameter", td_graph_value_and_grad(g, s, 1, &x, &grad));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_value_and_grad(g, s, 1, NULL, &grad));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_value_and_grad(g, s, 1, &a, NULL));
    /* all_gather has no gradient: a clear status, not a wrong answer. */
    td_node gathered, total;
    TEST_OK(ctx, td_graph_all_gather(g, y, &gathered));
    TEST_OK(ctx, td_graph_sum(g, gathered, 0, NULL, false, &total));
    TEST_FAILS(ctx, TD_ERR_UNSUPPORTED, "differentiable", td_graph_value_and_grad(g, total, 1, &a, &grad));
}

/* ---- bindings at run time ---- */

typedef struct run_fixture {
    td_mesh *mesh;
    td_node x, labels, logits, loss;
    td_program *p;
} run_fixture;

static run_fixture make_xent_program(void)
{
    run_fixture f;
    f.mesh = test_mesh(ctx, "cpu:2");
    int64_t xd[2] = {4, 3}, ld[1] = {4}, wd[2] = {3, 5};
    td_node w;
    TEST_OK(ctx, td_graph_input(g, "pixels", TD_F32, 2, xd, TD_SHARDED, &f.x));
    TEST_OK(ctx, td_graph_input(g, "digits", TD_I32, 1, ld, TD_SHARDED, &f.labels));
    TEST_OK(ctx, td_graph_param(g, "w", 2, wd, &w));
    TEST_OK(ctx, td_graph_matmul(g, f.x, w, &f.logits));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(g, f.logits, f.labels, &f.loss));
    f.p = test_compile(ctx, g, f.mesh, 1, &f.loss);
    return f;
}

Test(errors, binding_wrong_shape_or_dtype_names_the_input)
{
    run_fixture f = make_xent_program();
    int64_t wrong[2] = {4, 4}, right[2] = {4, 3}, ld[1] = {4};
    td_tensor *bad_shape = test_tensor(ctx, TD_F32, 2, wrong), *good = test_tensor(ctx, TD_F32, 2, right);
    td_tensor *labels = test_tensor(ctx, TD_I32, 1, ld), *float_labels = test_tensor(ctx, TD_F32, 1, ld);
    td_binding b[2] = {{f.x, bad_shape}, {f.labels, labels}};
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "pixels", td_program_run(f.p, 2, b));
    cr_assert(strstr(td_last_error(ctx), "[4,4]") != NULL && strstr(td_last_error(ctx), "[4,3]") != NULL, "%s",
              td_last_error(ctx));
    b[0].value = good;
    b[1].value = float_labels;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "digits", td_program_run(f.p, 2, b));
    cr_assert(strstr(td_last_error(ctx), "i32") != NULL, "%s", td_last_error(ctx));
    b[1].value = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "digits", td_program_run(f.p, 2, b));
    /* After the errors the program still runs. */
    b[1].value = labels;
    TEST_OK(ctx, td_program_run(f.p, 2, b));
    td_tensor_destroy(bad_shape);
    td_tensor_destroy(good);
    td_tensor_destroy(labels);
    td_tensor_destroy(float_labels);
}

Test(errors, unbound_twice_bound_and_non_input_bindings)
{
    run_fixture f = make_xent_program();
    int64_t xd[2] = {4, 3}, ld[1] = {4};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *labels = test_tensor(ctx, TD_I32, 1, ld);
    td_binding only_x = {f.x, x};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "digits", td_program_run(f.p, 1, &only_x));
    cr_assert(strstr(td_last_error(ctx), "not bound") != NULL, "%s", td_last_error(ctx));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "pixels", td_program_run(f.p, 0, NULL));
    td_binding twice[3] = {{f.x, x}, {f.labels, labels}, {f.x, x}};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "twice", td_program_run(f.p, 3, twice));
    td_binding not_input[2] = {{f.x, x}, {f.logits, x}};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "not an input", td_program_run(f.p, 2, not_input));
    td_binding bogus[2] = {{f.x, x}, {4242, labels}};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "4242", td_program_run(f.p, 2, bogus));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_run(f.p, 2, NULL));
    td_tensor_destroy(x);
    td_tensor_destroy(labels);
}

Test(errors, label_out_of_range_names_the_label)
{
    run_fixture f = make_xent_program();
    int64_t xd[2] = {4, 3}, ld[1] = {4};
    td_tensor *x = test_tensor(ctx, TD_F32, 2, xd), *labels = test_tensor(ctx, TD_I32, 1, ld);
    const int32_t values[4] = {0, 4, 5, 1}; /* 5 classes: 5 is out of range */
    memcpy(test_i32(labels), values, sizeof values);
    td_binding b[2] = {{f.x, x}, {f.labels, labels}};
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "label 5", td_program_run(f.p, 2, b));
    cr_assert(strstr(td_last_error(ctx), "digits") != NULL, "%s", td_last_error(ctx));
    test_i32(labels)[2] = -1;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "label -1", td_program_run(f.p, 2, b));
    test_i32(labels)[2] = 2;
    TEST_OK(ctx, td_program_run(f.p, 2, b));
    td_tensor *loss = test_read_output(ctx, f.p, 0, 1);
    cr_assert_float_eq(test_f32(loss)[0], logf(5.0f), 1e-6, "zero weights: uniform softmax");
    td_tensor_destroy(loss);
    td_tensor_destroy(x);
    td_tensor_destroy(labels);
}

Test(errors, reading_outputs_and_params_wrongly)
{
    run_fixture f = make_xent_program();
    int64_t wrong[1] = {2};
    td_tensor *scalar = test_tensor(ctx, TD_F32, 0, NULL), *vec = test_tensor(ctx, TD_F32, 1, wrong);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_read_output(f.p, 1, 0, scalar));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "device 2", td_program_read_output(f.p, 0, 2, scalar));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_program_read_output(f.p, 0, 0, vec));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_read_output(f.p, 0, 0, NULL));
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_output_shape(f.p, 3, &rank, dims));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_output_shape(f.p, 0, NULL, dims));
    /* Parameters: a non-parameter node, a wrong shape, a device outside the mesh. */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "not a parameter", td_program_set_param(f.p, f.x, vec));
    td_node w = 2; /* made third in make_xent_program */
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "'w'", td_program_set_param(f.p, w, vec));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_set_param(f.p, w, NULL));
    int64_t wd[2] = {3, 5};
    td_tensor *tw = test_tensor(ctx, TD_F32, 2, wd);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "device 9", td_program_read_param(f.p, w, 9, tw));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_program_read_param(f.p, 777, 0, tw));
    TEST_OK(ctx, td_program_read_param(f.p, w, 1, tw));
    td_tensor_destroy(scalar);
    td_tensor_destroy(vec);
    td_tensor_destroy(tw);
}

/* ---- trainer options ---- */

Test(errors, trainer_options_are_validated)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    int64_t d[1] = {3};
    td_node w, s;
    TEST_OK(ctx, td_graph_param(g, "w", 1, d, &w));
    TEST_OK(ctx, td_graph_sum(g, w, 0, NULL, false, &s));
    td_trainer_options o;
    TEST_OK(ctx, td_trainer_options_init(&o));
    cr_assert_eq(o.optimizer, TD_OPTIMIZER_SGD);
    cr_assert_eq(o.learning_rate, 0.0f); /* the optimizer's default */
    td_trainer *t = NULL;
    o.learning_rate = NAN;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "learning_rate", td_trainer_create(g, mesh, s, 1, &w, &o, &t));
    o.learning_rate = -1.0f;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "learning_rate", td_trainer_create(g, mesh, s, 1, &w, &o, &t));
    o.learning_rate = INFINITY;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "learning_rate", td_trainer_create(g, mesh, s, 1, &w, &o, &t));
    o.learning_rate = 0.1f;
    o.optimizer = (td_optimizer_kind)9;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "optimizer", td_trainer_create(g, mesh, s, 1, &w, &o, &t));
    cr_assert_null(t);
    cr_assert_eq(td_trainer_options_init(NULL), TD_ERR_INVALID_ARGUMENT);
}

/* A struct_size too small to hold the fields of the first layout is a
 * caller's mistake, not an older caller: refused, naming the size. */
Test(errors, options_structs_too_small_to_hold_their_fields_are_refused)
{
    td_context_options co;
    td_context_options_init(&co);
    co.struct_size = 3;
    td_context *other = NULL;
    cr_assert_eq(td_context_create(&co, &other), TD_ERR_INVALID_ARGUMENT);
    cr_assert_null(other);

    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    int64_t d[1] = {3};
    td_node w, s;
    TEST_OK(ctx, td_graph_param(g, "w", 1, d, &w));
    TEST_OK(ctx, td_graph_sum(g, w, 0, NULL, false, &s));
    td_trainer_options o;
    TEST_OK(ctx, td_trainer_options_init(&o));
    o.struct_size = 3;
    td_trainer *t = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "td_trainer_options.struct_size is 3, expected 0 or at least",
               td_trainer_create(g, mesh, s, 1, &w, &o, &t));
    cr_assert_null(t);
    o.struct_size = 0; /* the current size */
    TEST_OK(ctx, td_trainer_create(g, mesh, s, 1, &w, &o, &t));

    td_text_options to;
    TEST_OK(ctx, td_text_options_init(&to));
    to.struct_size = 3;
    td_text *text = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "td_text_options.struct_size is 3", td_text_open(ctx, "/nonexistent-text", &to, &text));
    cr_assert_null(text);
}

/* ---- NULL everywhere ---- */

Test(errors, null_pointers_give_statuses)
{
    td_node n = 0;
    int64_t d[1] = {2};
    /* Graph builders with a NULL graph or a NULL out. */
    cr_assert_eq(td_graph_create(NULL, &g), TD_ERR_INVALID_ARGUMENT);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_create(ctx, NULL));
    cr_assert_eq(td_graph_input(NULL, "x", TD_F32, 1, d, TD_SHARDED, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_param(NULL, "w", 1, d, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_constant(NULL, 1.0f, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_matmul(NULL, 0, 0, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_add(NULL, 0, 0, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_relu(NULL, 0, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_sum(NULL, 0, 0, NULL, false, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_reshape(NULL, 0, 1, d, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_mse(NULL, 0, 0, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_softmax_cross_entropy(NULL, 0, 0, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_axis_index(NULL, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_broadcast(NULL, 0, 0, &n), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_graph_value_and_grad(NULL, 0, 0, NULL, NULL), TD_ERR_INVALID_ARGUMENT);
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    cr_assert_eq(td_graph_shape(NULL, 0, &rank, dims), TD_ERR_INVALID_ARGUMENT);
    TEST_OK(ctx, td_graph_param(g, NULL, 1, d, &n)); /* a NULL name is allowed */
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_param(g, "w", 1, d, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_add(g, n, n, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_axis_index(g, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_graph_shape(g, n, NULL, dims));
    td_graph_destroy(NULL);

    /* pmap and programs. */
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    td_program *p = NULL;
    cr_assert_eq(td_pmap_compile(NULL, mesh, 1, &n, &p), TD_ERR_INVALID_ARGUMENT);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "mesh", td_pmap_compile(g, NULL, 1, &n, &p));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_pmap_compile(g, mesh, 1, &n, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "outputs", td_pmap_compile(g, mesh, 1, NULL, &p));
    td_tensor *t = test_tensor(ctx, TD_F32, 1, d);
    cr_assert_eq(td_program_run(NULL, 0, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_program_read_output(NULL, 0, 0, t), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_program_output_shape(NULL, 0, &rank, dims), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_program_set_param(NULL, n, t), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_program_read_param(NULL, n, 0, t), TD_ERR_INVALID_ARGUMENT);
    td_program_destroy(NULL);

    /* Trainer. */
    td_trainer *tr = NULL;
    cr_assert_eq(td_trainer_create(NULL, mesh, 0, 0, NULL, NULL, &tr), TD_ERR_INVALID_ARGUMENT);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_trainer_create(g, NULL, 0, 1, &n, NULL, &tr));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_trainer_create(g, mesh, 0, 1, NULL, NULL, &tr));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_trainer_create(g, mesh, 0, 1, &n, NULL, NULL));
    bool same;
    double secs;
    uint64_t steps;
    cr_assert_eq(td_trainer_step(NULL, 0, NULL, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_trainer_set_param(NULL, n, t), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_trainer_read_param(NULL, n, 0, t), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_trainer_replicas_identical(NULL, &same), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_trainer_stats(NULL, &secs, &steps), TD_ERR_INVALID_ARGUMENT);
    td_trainer_destroy(NULL);

    /* Tensors. */
    td_tensor *nt = (td_tensor *)&nt;
    void *data;
    size_t count;
    td_dtype dt;
    cr_assert_eq(td_tensor_create(NULL, TD_F32, 1, d, &nt), TD_ERR_INVALID_ARGUMENT);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_tensor_create(ctx, TD_F32, 1, d, NULL));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_tensor_create(ctx, TD_F32, 1, NULL, &nt));
    cr_assert_null(nt);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_tensor_create(ctx, (td_dtype)99, 1, d, &nt));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_tensor_create(ctx, TD_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, &nt));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_tensor_create(ctx, TD_F32, 1, (int64_t[]){-1}, &nt));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, NULL, td_tensor_create(ctx, TD_F32, 2, (int64_t[]){INT64_MAX, INT64_MAX}, &nt));
    cr_assert_eq(td_tensor_data(NULL, &data), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_tensor_data(t, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_tensor_count(NULL, &count), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_tensor_shape(NULL, &rank, dims), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_tensor_dtype(NULL, &dt), TD_ERR_INVALID_ARGUMENT);
    td_tensor_destroy(NULL);
    td_tensor_destroy(t);
}

Test(errors, tensors_and_dtypes)
{
    size_t bytes = 0;
    cr_assert_eq(td_dtype_size(TD_F32, &bytes), TD_OK);
    cr_assert_eq(bytes, 4);
    cr_assert_eq(td_dtype_size(TD_I32, &bytes), TD_OK);
    cr_assert_eq(bytes, 4);
    cr_assert_eq(td_dtype_size(TD_F16, &bytes), TD_OK);
    cr_assert_eq(bytes, 2);
    cr_assert_eq(td_dtype_size(TD_U8, &bytes), TD_OK);
    cr_assert_eq(bytes, 1);
    cr_assert_eq(td_dtype_size(TD_DTYPE_COUNT, &bytes), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_dtype_size(TD_F32, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(td_dtype_name(TD_F32), "f32");
    cr_assert_str_eq(td_dtype_name(TD_I32), "i32");
    cr_assert_str_eq(td_dtype_name((td_dtype)-1), "unknown");
    /* rank 0 is a scalar; a 0 dimension is an empty tensor; data is zeroed and 64-byte aligned. */
    td_tensor *s = test_tensor(ctx, TD_F32, 0, NULL);
    cr_assert_eq(test_count(s), 1);
    cr_assert_eq(test_f32(s)[0], 0.0f);
    cr_assert_eq((uintptr_t)test_f32(s) % 64, 0);
    td_tensor *e = test_tensor(ctx, TD_I32, 2, (int64_t[]){0, 5});
    cr_assert_eq(test_count(e), 0);
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    cr_assert_eq(td_tensor_shape(e, &rank, dims), TD_OK);
    cr_assert(rank == 2 && dims[0] == 0 && dims[1] == 5);
    td_dtype dt;
    cr_assert_eq(td_tensor_dtype(e, &dt), TD_OK);
    cr_assert_eq(dt, TD_I32);
    td_tensor_destroy(s);
    td_tensor_destroy(e);
}
