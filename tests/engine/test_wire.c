/* Gradients on a bf16 wire (td_trainer_options.wire = TD_WIRE_BF16): the
 * CNN trains to other bits than fp32's but close to them, with every
 * replica identical, the same bits on either all-reduce path (direct or
 * the ring proper), at any host-pool thread count and with the all-reduce
 * in buckets; one device is unaffected (nothing travels); a linear
 * regression converges; an older caller's options train fp32; a value that
 * is not a td_wire is refused by name. The all-reduce's own rule is tested
 * bitwise in test_ring_wire.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "tandem/models.h"
#include "td_mesh_internal.h"
#include "td_ring.h"

enum { STEPS = 3 };

typedef struct config {
    const char *spec;
    td_wire wire;
    uint32_t threads;
    bool ring_proper;     /* the all-reduce's ring proper instead of the direct path */
    uint64_t bucket_bytes; /* the all-reduce in buckets during backward */
    size_t options_size;  /* nonzero: an older caller's struct_size */
} config;

typedef struct run {
    float losses[STEPS];
    float *params;
    size_t n_values;
} run;

/* STEPS Adam steps of the seed CNN on one random batch of 32 images. */
static void train_cnn(const config *c, run *out)
{
    td_context_options o;
    td_context_options_init(&o);
    o.cpu_threads = c->threads;
    o.timeout_ms = 60000;
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(&o, &ctx), TD_OK);
    td_mesh *mesh = test_mesh(ctx, c->spec);
    if (c->ring_proper) {
        td_ring *ring = NULL;
        TEST_OK(ctx, td_mesh_ring(mesh, &ring));
        td_ring_set_direct(ring, 0);
    }
    test_classifier m;
    test_classifier_create(ctx, "cnn", 32, 5, 0x317Eu, &m);
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.optimizer = TD_OPTIMIZER_ADAM;
    to.wire = c->wire;
    to.overlap_bucket_bytes = c->bucket_bytes;
    if (c->options_size)
        to.struct_size = c->options_size;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &to, &t));
    for (int step = 0; step < STEPS; step++) {
        TEST_OK(ctx, td_trainer_step(t, 3, m.bindings, &out->losses[step]));
        bool identical = false;
        TEST_OK(ctx, td_trainer_replicas_identical(t, &identical));
        cr_assert(identical, "%s wire %d: replicas differ after step %d", c->spec, (int)c->wire, step);
    }
    out->params = test_read_trained(ctx, m.g, t, m.n_params, m.params, 0, &out->n_values);
    test_classifier_destroy(&m);
    td_context_destroy(ctx);
}

static size_t values_differing(const run *a, const run *b)
{
    cr_assert_eq(a->n_values, b->n_values);
    return test_floats_differing(a->params, b->params, a->n_values) +
           test_floats_differing(a->losses, b->losses, STEPS);
}

static double relative_rms(const run *a, const run *b)
{
    return test_relative_rms(a->params, b->params, a->n_values);
}

Test(wire, bf16_trains_the_cnn_near_fp32_and_the_same_on_every_path, .timeout = 300)
{
    run fp32, bf16, proper, threads4, buckets;
    train_cnn(&(config){"cpu:2", TD_WIRE_FP32, 2, false, 0, 0}, &fp32);
    train_cnn(&(config){"cpu:2", TD_WIRE_BF16, 2, false, 0, 0}, &bf16);
    cr_assert_gt(values_differing(&bf16, &fp32), bf16.n_values / 2, "wire bf16 trained fp32's bits");
    const double rel = relative_rms(&bf16, &fp32);
    cr_assert_lt(rel, 1e-2, "wire bf16 parameters %.3g (relative RMS) away from fp32's", rel);
    cr_assert_gt(rel, 0.0);
    train_cnn(&(config){"cpu:2", TD_WIRE_BF16, 2, true, 0, 0}, &proper);
    cr_assert_eq(values_differing(&proper, &bf16), 0, "wire bf16: the ring proper's bits are not the direct path's");
    train_cnn(&(config){"cpu:2", TD_WIRE_BF16, 4, false, 0, 0}, &threads4);
    cr_assert_eq(values_differing(&threads4, &bf16), 0, "wire bf16: 4 threads gave other bits than 2");
    train_cnn(&(config){"cpu:2", TD_WIRE_BF16, 2, false, 64 << 10, 0}, &buckets);
    cr_assert_eq(values_differing(&buckets, &bf16), 0, "wire bf16: the all-reduce in buckets gave other bits");
    free(fp32.params);
    free(bf16.params);
    free(proper.params);
    free(threads4.params);
    free(buckets.params);
}

/* Three devices: the ring proper and the direct path round at the same
 * places (chunks start at different ranks than at two). */
Test(wire, three_devices_give_the_same_bits_on_either_path, .timeout = 300)
{
    run direct, proper;
    train_cnn(&(config){"cpu:3", TD_WIRE_BF16, 2, false, 0, 0}, &direct);
    train_cnn(&(config){"cpu:3", TD_WIRE_BF16, 2, true, 0, 0}, &proper);
    cr_assert_eq(values_differing(&proper, &direct), 0, "cpu:3 wire bf16: ring proper and direct differ");
    free(direct.params);
    free(proper.params);
}

Test(wire, one_device_is_unaffected_and_older_callers_train_fp32, .timeout = 300)
{
    run fp32, bf16, older;
    train_cnn(&(config){"cpu:1", TD_WIRE_FP32, 2, false, 0, 0}, &fp32);
    train_cnn(&(config){"cpu:1", TD_WIRE_BF16, 2, false, 0, 0}, &bf16);
    cr_assert_eq(values_differing(&bf16, &fp32), 0, "cpu:1: wire bf16 changed a run where nothing travels");
    free(fp32.params);
    free(bf16.params);
    train_cnn(&(config){"cpu:2", TD_WIRE_FP32, 2, false, 0, 0}, &fp32);
    train_cnn(&(config){"cpu:2", TD_WIRE_BF16, 2, false, 0, offsetof(td_trainer_options, wire)}, &older);
    cr_assert_eq(values_differing(&older, &fp32), 0, "an options struct ending before wire did not train fp32");
    free(fp32.params);
    free(older.params);
}

/* y = x w* + b-free linear regression on 4 devices: SGD on a bf16 wire
 * still finds w* (the rounding is relative, about 2^-9 per sum). */
Test(wire, linear_regression_converges_on_a_bf16_wire, .timeout = 120)
{
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    const int64_t B = 64, F = 5;
    td_graph *g;
    td_node x, y, w, loss;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    test_linreg_graph(ctx, g, B, F, &x, &y, &w, &loss);
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.learning_rate = 0.1f;
    to.wire = TD_WIRE_BF16;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(g, mesh, loss, 1, &w, &to, &t));
    const int64_t xd[2] = {B, F}, yd[2] = {B, 1};
    td_tensor *xt = test_tensor(ctx, TD_F32, 2, xd), *yt = test_tensor(ctx, TD_F32, 2, yd);
    const float truth[5] = {0.5f, -1.25f, 2.0f, 0.75f, -0.3f};
    test_rng rng = {0x11E};
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 200; step++) {
        for (int64_t i = 0; i < B; i++) {
            float sum = 0.0f;
            for (int64_t f = 0; f < F; f++) {
                const float v = test_rng_normal(&rng);
                test_f32(xt)[i * F + f] = v;
                sum += v * truth[f];
            }
            test_f32(yt)[i] = sum;
        }
        td_binding b[2] = {{x, xt}, {y, yt}};
        TEST_OK(ctx, td_trainer_step(t, 2, b, &last));
        if (step == 0)
            first = last;
    }
    cr_assert_lt(last, first * 1e-3f, "loss %g after 200 steps, %g at the first", (double)last, (double)first);
    size_t n = 0;
    float *learned = test_read_trained(ctx, g, t, 1, &w, 3, &n);
    cr_assert_eq(n, (size_t)F);
    for (int64_t f = 0; f < F; f++)
        cr_assert(fabsf(learned[f] - truth[f]) < 0.02f, "w[%lld] = %g, want %g", (long long)f, (double)learned[f],
                  (double)truth[f]);
    free(learned);
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    td_context_destroy(ctx);
}

Test(wire, a_value_that_is_not_a_wire_is_refused_by_name)
{
    td_context *ctx = test_context(10000);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g;
    td_node x, y, w, loss;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    test_linreg_graph(ctx, g, 4, 3, &x, &y, &w, &loss);
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.wire = (td_wire)9;
    td_trainer *t = NULL;
    cr_assert_eq(td_trainer_create(g, mesh, loss, 1, &w, &to, &t), TD_ERR_INVALID_ARGUMENT);
    cr_assert_null(t);
    cr_assert(strstr(td_last_error(ctx), "wire 9, expected TD_WIRE_FP32 (0) or TD_WIRE_BF16 (1)"), "message: %s",
              td_last_error(ctx));
    td_context_destroy(ctx);
}
