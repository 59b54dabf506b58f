/* The built-in models (tandem/models.h): the shapes and parameter names
 * the demos and `tandem train` rely on, and bad arguments refused. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine_test_util.h"

static td_context *ctx;
static td_graph *g;
static td_node images;

static void setup(void)
{
    ctx = test_context(0);
    TEST_OK(ctx, td_graph_create(ctx, &g));
    const int64_t dims[4] = {8, 28, 28, 1};
    TEST_OK(ctx, td_graph_input(g, "image", TD_F32, 4, dims, TD_SHARDED, &images));
}

static void teardown(void)
{
    td_context_destroy(ctx);
}

TestSuite(models, .init = setup, .fini = teardown);

static void assert_shape(td_node n, uint32_t rank, const int64_t *dims, const char *what)
{
    uint32_t r;
    int64_t d[TD_MAX_RANK];
    TEST_OK(ctx, td_graph_shape(g, n, &r, d));
    cr_assert_eq(r, rank, "%s: rank %u, expected %u", what, r, rank);
    for (uint32_t i = 0; i < rank; i++)
        cr_assert_eq(d[i], dims[i], "%s: dim %u is %lld, expected %lld", what, i, (long long)d[i], (long long)dims[i]);
}

static void assert_param(const char *name, uint32_t rank, const int64_t *dims)
{
    td_node n;
    TEST_OK(ctx, td_graph_find(g, name, &n));
    assert_shape(n, rank, dims, name);
}

Test(models, mlp_is_784_512_512_10)
{
    td_node logits;
    TEST_OK(ctx, td_model_classifier(g, "mlp", images, NULL, &logits));
    const int64_t ld[2] = {8, 10}, k1[2] = {784, 512}, k2[2] = {512, 512}, k3[2] = {512, 10}, b[1] = {512};
    assert_shape(logits, 2, ld, "logits");
    assert_param("dense1/kernel", 2, k1);
    assert_param("dense1/bias", 1, b);
    assert_param("dense2/kernel", 2, k2);
    assert_param("dense3/kernel", 2, k3);
    uint32_t count;
    TEST_OK(ctx, td_graph_params(g, 0, NULL, &count));
    cr_assert_eq(count, 6, "the MLP has %u parameters, expected 3 kernels and 3 biases", count);
}

Test(models, cnn_is_seed_000s)
{
    td_node logits;
    TEST_OK(ctx, td_model_cnn(g, images, NULL, &logits));
    const int64_t ld[2] = {8, 10}, c1[4] = {3, 3, 1, 32}, c2[4] = {3, 3, 32, 64}, d[2] = {7 * 7 * 64, 10};
    assert_shape(logits, 2, ld, "logits");
    assert_param("conv1/kernel", 4, c1);
    assert_param("conv2/kernel", 4, c2);
    assert_param("dense/kernel", 2, d);
    uint32_t count;
    TEST_OK(ctx, td_graph_params(g, 0, NULL, &count));
    cr_assert_eq(count, 6, "the CNN has %u parameters, expected 3 kernels and 3 biases", count);
}

Test(models, cnn_with_batch_norm_drops_the_conv_biases_and_keeps_running_statistics)
{
    td_model_options o;
    td_model_options_init(&o);
    o.batch_norm = true;
    o.dropout = 0.5f;
    o.classes = 3;
    td_node logits, n;
    TEST_OK(ctx, td_model_cnn(g, images, &o, &logits));
    const int64_t ld[2] = {8, 3}, c[1] = {32};
    assert_shape(logits, 2, ld, "logits");
    assert_param("norm1/mean", 1, c);
    assert_param("norm1/var", 1, c);
    assert_param("norm1/scale", 1, c);
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "conv1/bias", td_graph_find(g, "conv1/bias", &n));
    uint32_t count;
    TEST_OK(ctx, td_graph_params(g, 0, NULL, &count));
    cr_assert_eq(count, 8, "%u trained parameters, expected 3 kernels, 2 x (scale, bias), dense bias", count);
}

Test(models, bad_arguments_are_refused_with_a_message)
{
    td_node logits;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "'resnet'", td_model_classifier(g, "resnet", images, NULL, &logits));
    td_model_options o;
    td_model_options_init(&o);
    o.classes = 0;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "classes 0", td_model_mlp(g, images, &o, &logits));
    td_model_options_init(&o);
    o.dropout = 1.0f;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "dropout 1", td_model_cnn(g, images, &o, &logits));
    const int64_t odd[4] = {8, 30, 30, 1}, flat[2] = {8, 5};
    td_node x30, x2;
    TEST_OK(ctx, td_graph_input(g, "odd", TD_F32, 4, odd, TD_SHARDED, &x30));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "30x30", td_model_cnn(g, x30, NULL, &logits));
    TEST_OK(ctx, td_graph_input(g, "flat", TD_F32, 2, flat, TD_SHARDED, &x2));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "rank 2", td_model_mlp(g, x2, NULL, &logits));
    td_node pred;
    TEST_OK(ctx, td_model_linreg(g, x2, &pred));
    const int64_t pd[2] = {8, 1}, kd[2] = {5, 1};
    assert_shape(pred, 2, pd, "linreg predictions");
    assert_param("linreg/kernel", 2, kd);
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "rank 4", td_model_linreg(g, images, &pred));
}

Test(models, classification_gives_a_masked_loss_and_accuracy_that_train)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    const int64_t xd[4] = {8, 8, 8, 1}, bd[1] = {8};
    td_node x, y, mask, loss, accuracy;
    TEST_OK(ctx, td_graph_input(g, "bytes", TD_U8, 4, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "label", TD_I32, 1, bd, TD_SHARDED, &y));
    TEST_OK(ctx, td_graph_input(g, "mask", TD_F32, 1, bd, TD_SHARDED, &mask));
    td_node wrong;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "expected u8",
               td_model_classification(g, "cnn", images, y, mask, NULL, &wrong, &wrong));
    td_model_options o;
    td_model_options_init(&o);
    o.classes = 2;
    TEST_OK(ctx, td_model_classification(g, "mlp", x, y, mask, &o, &loss, &accuracy));
    td_tensor *xt = test_tensor(ctx, TD_U8, 4, xd), *yt = test_tensor(ctx, TD_I32, 1, bd);
    td_tensor *mt = test_tensor(ctx, TD_F32, 1, bd);
    void *bytes;
    td_tensor_data(xt, &bytes);
    /* Class 1 images are bright, class 0 dark; rows 6 and 7 are padding. */
    for (int i = 0; i < 8; i++) {
        test_i32(yt)[i] = i % 2;
        memset((uint8_t *)bytes + i * 64, i % 2 ? 230 : 20, 64);
        test_f32(mt)[i] = i < 6 ? 1.0f : 0.0f;
    }
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    opts.optimizer = TD_OPTIMIZER_ADAM;
    opts.learning_rate = 1e-2f;
    opts.n_metrics = 1;
    opts.metrics = &accuracy;
    uint32_t n;
    td_node params[8];
    TEST_OK(ctx, td_graph_params(g, 8, params, &n));
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, n, params, &opts, &t));
    td_binding b[3] = {{x, xt}, {y, yt}, {mask, mt}};
    float first = 0, l = 0, acc = 0;
    for (int step = 0; step < 20; step++) {
        TEST_OK(ctx, td_trainer_step(t, 3, b, &l));
        if (step == 0)
            first = l;
    }
    TEST_OK(ctx, td_trainer_metrics(t, 1, &acc));
    cr_assert_lt(l, 0.5f * first, "loss went from %g to %g in 20 steps", (double)first, (double)l);
    cr_assert_eq(acc, 1.0f, "accuracy over the 6 valid rows is %g, expected 1", (double)acc);
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    td_tensor_destroy(mt);
}

/* input_mean / input_std: the classification graph standardizes the
 * bytes as (x / 255 - mean) / std. Checked against the same model fed the
 * host-standardized f32 images: the same loss (same parameters, the
 * initializers being keyed by name and seed). */
Test(models, classification_standardizes_its_inputs)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    const int64_t xd[4] = {4, 8, 8, 1}, bd[1] = {4}, ld[1] = {4};
    td_model_options o;
    td_model_options_init(&o);
    cr_assert_eq(o.input_mean, 0.0f);
    cr_assert_eq(o.input_std, 1.0f);
    o.input_mean = 0.3f;
    o.input_std = 0.4f;
    td_graph *gu;
    td_node x, y, mask, loss, accuracy;
    TEST_OK(ctx, td_graph_create(ctx, &gu));
    TEST_OK(ctx, td_graph_input(gu, "bytes", TD_U8, 4, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(gu, "label", TD_I32, 1, ld, TD_SHARDED, &y));
    TEST_OK(ctx, td_graph_input(gu, "mask", TD_F32, 1, bd, TD_SHARDED, &mask));
    TEST_OK(ctx, td_model_classification(gu, "cnn", x, y, mask, &o, &loss, &accuracy));
    /* The reference: f32 images standardized on the host, the plain model. */
    td_graph *gf;
    td_node fx, fy, logits, ref;
    TEST_OK(ctx, td_graph_create(ctx, &gf));
    TEST_OK(ctx, td_graph_input(gf, "images", TD_F32, 4, xd, TD_SHARDED, &fx));
    TEST_OK(ctx, td_graph_input(gf, "label", TD_I32, 1, ld, TD_SHARDED, &fy));
    TEST_OK(ctx, td_model_cnn(gf, fx, &o, &logits));
    TEST_OK(ctx, td_graph_softmax_cross_entropy(gf, logits, fy, &ref));

    td_tensor *xt = test_tensor(ctx, TD_U8, 4, xd), *yt = test_tensor(ctx, TD_I32, 1, ld),
              *mt = test_tensor(ctx, TD_F32, 1, bd), *ft = test_tensor(ctx, TD_F32, 4, xd);
    uint8_t *bytes;
    td_tensor_data(xt, (void **)&bytes);
    test_rng rng = {99};
    for (int i = 0; i < 4 * 64; i++) {
        bytes[i] = (uint8_t)(test_rng_next(&rng) & 0xff);
        test_f32(ft)[i] = ((float)bytes[i] / 255.0f - 0.3f) / 0.4f;
    }
    for (int i = 0; i < 4; i++) {
        test_i32(yt)[i] = i % 10;
        test_f32(mt)[i] = 1.0f;
    }
    td_program *pu = test_compile(ctx, gu, mesh, 1, &loss), *pf = test_compile(ctx, gf, mesh, 1, &ref);
    td_binding bu[3] = {{x, xt}, {y, yt}, {mask, mt}}, bf[2] = {{fx, ft}, {fy, yt}};
    TEST_OK(ctx, td_program_run(pu, 3, bu));
    TEST_OK(ctx, td_program_run(pf, 2, bf));
    td_tensor *lu = test_read_output(ctx, pu, 0, 0), *lf = test_read_output(ctx, pf, 0, 0);
    cr_assert(test_close(test_f32(lu)[0], test_f32(lf)[0], 1e-5, 1e-6), "standardized in the graph %.7g, on the host %.7g",
              (double)test_f32(lu)[0], (double)test_f32(lf)[0]);
    o.input_std = 0.0f;
    td_node l2, a2;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "input_std", td_model_classification(gu, "cnn", x, y, mask, &o, &l2, &a2));
    td_tensor *all[] = {xt, yt, mt, ft, lu, lf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        td_tensor_destroy(all[i]);
}
