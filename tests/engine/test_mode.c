/* Ops that differ between training and evaluation programs: dropout, the
 * by-mode choice, batch norm, and the state updates a trainer applies.
 *
 * Dropout's mask must be a function of the example, not of the mesh: the
 * same sharded batch gives bitwise the same output on 1 and 3 devices (the
 * suite mode_devices repeats that on the test devices, mixed meshes
 * included). Batch norm is checked against a host computation of its
 * formula, per device and synchronized, and by finite differences in a
 * training program (h = 1e-2 on a loss of size ~1: |analytic - numeric| <=
 * 2e-3 + 2e-2 |numeric|, the tolerance test_gradients.c derives). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"

static td_context *ctx;

static void setup(void)
{
    ctx = test_context(0);
}

static void teardown(void)
{
    td_context_destroy(ctx);
}

TestSuite(mode, .init = setup, .fini = teardown);
TestSuite(mode_devices, .init = setup, .fini = teardown);

/* ---- dropout ---- */

#define DROP_ROWS 12
#define DROP_COLS 50

/* out = dropout(x, 0.5, seed 7) of a sharded [12, 50] x of ones + a
 * column ramp, run at `step` in a training (or evaluation) program. */
static float *dropout_output(const char *spec, bool skip, bool training, uint64_t step)
{
    td_mesh *mesh = skip ? test_mesh_or_skip(ctx, spec) : test_mesh(ctx, spec);
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    const int64_t dims[2] = {DROP_ROWS, DROP_COLS};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_dropout(g, x, 0.5f, 7, &y));
    td_program *p = NULL;
    TEST_OK(ctx, training ? td_pmap_compile_training(g, mesh, 1, &y, &p) : td_pmap_compile(g, mesh, 1, &y, &p));
    TEST_OK(ctx, td_program_set_step(p, step));
    td_tensor *xt = test_tensor(ctx, TD_F32, 2, dims);
    for (int i = 0; i < DROP_ROWS * DROP_COLS; i++)
        test_f32(xt)[i] = 1.0f + (float)(i % DROP_COLS) / 64.0f;
    td_binding b = {x, xt};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    uint32_t n = test_mesh_size(mesh);
    float *all = malloc(sizeof *all * DROP_ROWS * DROP_COLS);
    size_t per = (size_t)DROP_ROWS / n * DROP_COLS;
    for (uint32_t d = 0; d < n; d++) {
        td_tensor *o = test_read_output(ctx, p, 0, d);
        memcpy(all + per * d, test_f32(o), per * sizeof(float));
        td_tensor_destroy(o);
    }
    for (int i = 0; i < DROP_ROWS * DROP_COLS; i++) {
        float xi = test_f32(xt)[i];
        if (training)
            cr_assert(all[i] == 0.0f || all[i] == xi * 2.0f, "%s: element %d is %g, expected 0 or 2 x %g", spec, i,
                      (double)all[i], (double)xi);
        else
            cr_assert_eq(all[i], xi, "%s: evaluation element %d is %g, expected x = %g", spec, i, (double)all[i],
                         (double)xi);
    }
    td_tensor_destroy(xt);
    td_program_destroy(p);
    td_graph_destroy(g);
    td_mesh_destroy(mesh);
    return all;
}

Test(mode, dropout_is_the_identity_in_evaluation)
{
    free(dropout_output("cpu:2", false, false, 3));
}

static void check_dropout_mesh_invariant(const char *spec, bool skip)
{
    float *one = dropout_output("cpu:1", false, true, 5);
    float *many = dropout_output(spec, skip, true, 5);
    int kept = 0;
    for (int i = 0; i < DROP_ROWS * DROP_COLS; i++) {
        cr_assert_eq(many[i], one[i], "%s: dropout element %d is %g, cpu:1 gives %g", spec, i, (double)many[i],
                     (double)one[i]);
        kept += one[i] != 0.0f;
    }
    /* 600 fair coins: 300 +- 3.5 sigma. */
    cr_assert(kept > 257 && kept < 343, "kept %d of 600 elements at rate 0.5", kept);
    free(one);
    free(many);
}

Test(mode, dropout_masks_do_not_depend_on_the_mesh) { check_dropout_mesh_invariant("cpu:3", false); }

Test(mode_devices, dropout_masks_on_the_test_devices_match_cpu1, .timeout = 120)
{
    check_dropout_mesh_invariant(test_devices_spec("cpu:2"), true);
}

Test(mode, dropout_masks_change_with_the_step)
{
    float *a = dropout_output("cpu:1", false, true, 5), *b = dropout_output("cpu:1", false, true, 6);
    float *c = dropout_output("cpu:1", false, true, 5);
    int differ = 0;
    for (int i = 0; i < DROP_ROWS * DROP_COLS; i++) {
        differ += (a[i] == 0.0f) != (b[i] == 0.0f);
        cr_assert_eq(a[i], c[i], "step 5 twice: element %d differs", i);
    }
    cr_assert_gt(differ, 200, "steps 5 and 6 share all but %d of 600 mask bits", differ);
    free(a);
    free(b);
    free(c);
}

Test(mode, dropout_gradient_is_the_same_mask)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    const int64_t dims[2] = {8, 16};
    td_node p, w, y, wy, loss, grad;
    TEST_OK(ctx, td_graph_param(g, "p", 2, dims, &p));
    TEST_OK(ctx, td_graph_input(g, "w", TD_F32, 2, dims, TD_REPLICATED, &w));
    TEST_OK(ctx, td_graph_dropout(g, p, 0.25f, 11, &y));
    TEST_OK(ctx, td_graph_mul(g, y, w, &wy));
    TEST_OK(ctx, td_graph_sum(g, wy, 0, NULL, false, &loss));
    TEST_OK(ctx, td_graph_value_and_grad(g, loss, 1, &p, &grad));
    const td_node outs[3] = {loss, y, grad};
    td_program *prog = NULL;
    TEST_OK(ctx, td_pmap_compile_training(g, mesh, 3, outs, &prog));
    td_tensor *pv = test_tensor(ctx, TD_F32, 2, dims), *wv = test_tensor(ctx, TD_F32, 2, dims);
    test_rng rng = {99};
    for (int i = 0; i < 128; i++) {
        test_f32(pv)[i] = test_rng_signed_away_from_zero(&rng, 0.5f, 1.5f);
        test_f32(wv)[i] = test_rng_uniform(&rng, 0.5f, 1.5f);
    }
    TEST_OK(ctx, td_program_set_param(prog, p, pv));
    td_binding b = {w, wv};
    TEST_OK(ctx, td_program_run(prog, 1, &b));
    td_tensor *yo = test_read_output(ctx, prog, 1, 0), *go = test_read_output(ctx, prog, 2, 0);
    const float scale = 1.0f / 0.75f;
    for (int i = 0; i < 128; i++) {
        bool kept = test_f32(yo)[i] != 0.0f;
        float want = kept ? scale * test_f32(wv)[i] : 0.0f;
        cr_assert(test_close(test_f32(go)[i], want, 1e-6, 0), "gradient %d is %g, expected %g (kept %d)", i,
                  (double)test_f32(go)[i], (double)want, kept);
    }
    /* Finite differences: at a fixed step the loss is linear in p. */
    td_tensor *scalar = test_tensor(ctx, TD_F32, 0, NULL);
    for (int i = 0; i < 128; i += 7) {
        float orig = test_f32(pv)[i];
        test_f32(pv)[i] = orig + 1e-2f;
        TEST_OK(ctx, td_program_set_param(prog, p, pv));
        TEST_OK(ctx, td_program_run(prog, 1, &b));
        TEST_OK(ctx, td_program_read_output(prog, 0, 0, scalar));
        double up = test_f32(scalar)[0];
        test_f32(pv)[i] = orig - 1e-2f;
        TEST_OK(ctx, td_program_set_param(prog, p, pv));
        TEST_OK(ctx, td_program_run(prog, 1, &b));
        TEST_OK(ctx, td_program_read_output(prog, 0, 0, scalar));
        double numeric = (up - test_f32(scalar)[0]) / 2e-2;
        test_f32(pv)[i] = orig;
        cr_assert(test_close(test_f32(go)[i], numeric, 2e-2, 2e-3), "gradient %d is %g, finite difference %g", i,
                  (double)test_f32(go)[i], numeric);
    }
    td_tensor_destroy(scalar);
    td_tensor_destroy(yo);
    td_tensor_destroy(go);
    td_tensor_destroy(pv);
    td_tensor_destroy(wv);
}

Test(mode, dropout_refuses_bad_rates_and_scalars)
{
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    const int64_t dims[2] = {4, 4};
    td_node x, s, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, dims, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_constant(g, 1.0f, &s));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "rate -0.1", td_graph_dropout(g, x, -0.1f, 1, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "rate 1", td_graph_dropout(g, x, 1.0f, 1, &y));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "rate nan", td_graph_dropout(g, x, NAN, 1, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "scalar", td_graph_dropout(g, s, 0.5f, 1, &y));
    TEST_OK(ctx, td_graph_dropout(g, x, 0.0f, 1, &y));
    cr_assert_eq(y, x, "rate 0 must return x itself");
}

Test(mode, by_mode_picks_by_the_program)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    td_node a, b, y;
    TEST_OK(ctx, td_graph_constant(g, 2.0f, &a));
    TEST_OK(ctx, td_graph_constant(g, 5.0f, &b));
    TEST_OK(ctx, td_graph_by_mode(g, a, b, &y));
    td_program *train = NULL, *eval = NULL;
    TEST_OK(ctx, td_pmap_compile_training(g, mesh, 1, &y, &train));
    TEST_OK(ctx, td_pmap_compile(g, mesh, 1, &y, &eval));
    TEST_OK(ctx, td_program_run(train, 0, NULL));
    TEST_OK(ctx, td_program_run(eval, 0, NULL));
    td_tensor *t = test_read_output(ctx, train, 0, 1), *e = test_read_output(ctx, eval, 0, 1);
    cr_assert_eq(test_f32(t)[0], 2.0f, "training program gives %g", (double)test_f32(t)[0]);
    cr_assert_eq(test_f32(e)[0], 5.0f, "evaluation program gives %g", (double)test_f32(e)[0]);
    td_tensor_destroy(t);
    td_tensor_destroy(e);
    const int64_t d2[1] = {2};
    td_node v;
    TEST_OK(ctx, td_graph_input(g, "v", TD_F32, 1, d2, TD_REPLICATED, &v));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_by_mode(g, a, v, &y));
}

/* ---- batch norm ---- */

#define BN_N 8
#define BN_HW 2
#define BN_C 3
#define BN_ROW (BN_HW * BN_HW * BN_C)

/* y of batch norm over rows [lo, hi) of x (each BN_ROW floats), with the
 * statistics of rows [slo, shi), or of the given mean/var when mean is set. */
static void host_batch_norm(const float *x, int lo, int hi, int slo, int shi, const float *mean, const float *var,
                            const float *scale, const float *bias, float *y)
{
    double m[BN_C] = {0}, v[BN_C] = {0};
    int count = (shi - slo) * BN_HW * BN_HW;
    for (int c = 0; c < BN_C; c++) {
        if (mean) {
            m[c] = mean[c];
            v[c] = var[c];
            continue;
        }
        for (int r = slo; r < shi; r++)
            for (int k = 0; k < BN_HW * BN_HW; k++)
                m[c] += x[r * BN_ROW + k * BN_C + c];
        m[c] /= count;
        for (int r = slo; r < shi; r++)
            for (int k = 0; k < BN_HW * BN_HW; k++) {
                double d = x[r * BN_ROW + k * BN_C + c] - m[c];
                v[c] += d * d;
            }
        v[c] /= count;
    }
    for (int r = lo; r < hi; r++)
        for (int k = 0; k < BN_HW * BN_HW; k++)
            for (int c = 0; c < BN_C; c++) {
                int i = r * BN_ROW + k * BN_C + c;
                y[i] = (float)((x[i] - m[c]) / sqrt(v[c] + 1e-5) * scale[c] + bias[c]);
            }
}

typedef struct bn_model {
    td_graph *g;
    td_node x, y, scale, bias, mean, var;
} bn_model;

static void build_bn(bn_model *m, bool sync)
{
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    const int64_t dims[4] = {BN_N, BN_HW, BN_HW, BN_C};
    TEST_OK(ctx, td_graph_input(m->g, "x", TD_F32, 4, dims, TD_SHARDED, &m->x));
    td_batch_norm_options o;
    td_batch_norm_options_init(&o);
    o.sync = sync;
    TEST_OK(ctx, td_layer_batch_norm(m->g, "bn", m->x, &o, &m->y));
    td_node params[4];
    uint32_t n = 0;
    TEST_OK(ctx, td_graph_params(m->g, 4, params, &n));
    cr_assert_eq(n, 2, "td_graph_params lists %u nodes, expected scale and bias only (states are not trained)", n);
    m->scale = params[0];
    m->bias = params[1];
    TEST_OK(ctx, td_graph_find(m->g, "bn/mean", &m->mean));
    TEST_OK(ctx, td_graph_find(m->g, "bn/var", &m->var));
}

static void fill_bn_input(float *x, uint64_t seed)
{
    test_rng rng = {seed};
    for (int i = 0; i < BN_N * BN_ROW; i++)
        x[i] = test_rng_uniform(&rng, -1.0f, 3.0f) + (float)(i % BN_C);
}

static void check_bn_forward(bool training, bool sync)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    bn_model m;
    build_bn(&m, sync);
    td_program *p = NULL;
    TEST_OK(ctx, training ? td_pmap_compile_training(m.g, mesh, 1, &m.y, &p) : td_pmap_compile(m.g, mesh, 1, &m.y, &p));
    const float scale[BN_C] = {1.5f, 0.5f, -1.0f}, bias[BN_C] = {0.1f, -0.2f, 0.3f};
    const float mean[BN_C] = {0.5f, 1.5f, 2.5f}, var[BN_C] = {1.2f, 0.8f, 2.0f};
    const int64_t cd[1] = {BN_C}, xd[4] = {BN_N, BN_HW, BN_HW, BN_C};
    td_tensor *t;
    t = test_tensor_f32(ctx, 1, cd, scale);
    TEST_OK(ctx, td_program_set_param(p, m.scale, t));
    td_tensor_destroy(t);
    t = test_tensor_f32(ctx, 1, cd, bias);
    TEST_OK(ctx, td_program_set_param(p, m.bias, t));
    td_tensor_destroy(t);
    t = test_tensor_f32(ctx, 1, cd, mean);
    TEST_OK(ctx, td_program_set_param(p, m.mean, t));
    td_tensor_destroy(t);
    t = test_tensor_f32(ctx, 1, cd, var);
    TEST_OK(ctx, td_program_set_param(p, m.var, t));
    td_tensor_destroy(t);
    td_tensor *x = test_tensor(ctx, TD_F32, 4, xd);
    fill_bn_input(test_f32(x), 3);
    td_binding b = {m.x, x};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    float want[BN_N * BN_ROW];
    const int half = BN_N / 2;
    for (int d = 0; d < 2; d++) {
        int lo = d * half, hi = lo + half;
        host_batch_norm(test_f32(x), lo, hi, sync ? 0 : lo, sync ? BN_N : hi, training ? NULL : mean, var, scale, bias,
                        want);
        td_tensor *o = test_read_output(ctx, p, 0, (uint32_t)d);
        for (int i = 0; i < half * BN_ROW; i++)
            cr_assert(test_close(test_f32(o)[i], want[lo * BN_ROW + i], 1e-4, 1e-4),
                      "%s %s: device %d y[%d] = %g, expected %g", training ? "training" : "evaluation",
                      sync ? "sync" : "per-device", d, i, (double)test_f32(o)[i], (double)want[lo * BN_ROW + i]);
        td_tensor_destroy(o);
    }
    td_tensor_destroy(x);
}

Test(mode, batch_norm_training_uses_each_devices_batch_statistics) { check_bn_forward(true, false); }
Test(mode, batch_norm_sync_uses_the_global_batch_statistics) { check_bn_forward(true, true); }
Test(mode, batch_norm_evaluation_uses_the_running_statistics) { check_bn_forward(false, false); }

/* d loss / d (x, scale, bias) of loss = sum(bn(x) * w) in a training
 * program, against central differences. */
Test(mode, batch_norm_gradients_match_finite_differences)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    td_graph *g;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    const int64_t xd[2] = {5, BN_C}, cd[1] = {BN_C};
    td_node x, scale, bias, mean, var, y, w, wy, loss;
    td_initializer ones;
    td_initializer_ones(&ones);
    TEST_OK(ctx, td_graph_param(g, "x", 2, xd, &x));
    TEST_OK(ctx, td_graph_param(g, "scale", 1, cd, &scale));
    TEST_OK(ctx, td_graph_param(g, "bias", 1, cd, &bias));
    TEST_OK(ctx, td_graph_state(g, "mean", 1, cd, NULL, &mean));
    TEST_OK(ctx, td_graph_state(g, "var", 1, cd, &ones, &var));
    td_batch_norm_options o;
    td_batch_norm_options_init(&o);
    o.epsilon = 1e-3f;
    TEST_OK(ctx, td_graph_batch_norm(g, x, scale, bias, mean, var, &o, &y));
    TEST_OK(ctx, td_graph_input(g, "w", TD_F32, 2, xd, TD_REPLICATED, &w));
    TEST_OK(ctx, td_graph_mul(g, y, w, &wy));
    TEST_OK(ctx, td_graph_sum(g, wy, 0, NULL, false, &loss));
    const td_node params[3] = {x, scale, bias};
    td_node grads[3];
    TEST_OK(ctx, td_graph_value_and_grad(g, loss, 3, params, grads));
    const td_node outs[4] = {loss, grads[0], grads[1], grads[2]};
    td_program *p = NULL;
    TEST_OK(ctx, td_pmap_compile_training(g, mesh, 4, outs, &p));
    test_rng rng = {123};
    td_tensor *vals[3] = {test_tensor(ctx, TD_F32, 2, xd), test_tensor(ctx, TD_F32, 1, cd),
                          test_tensor(ctx, TD_F32, 1, cd)};
    for (int k = 0; k < 3; k++) {
        test_fill_uniform(&rng, test_f32(vals[k]), test_count(vals[k]), -1.5f, 1.5f);
        TEST_OK(ctx, td_program_set_param(p, params[k], vals[k]));
    }
    td_tensor *wv = test_tensor(ctx, TD_F32, 2, xd);
    test_fill_uniform(&rng, test_f32(wv), test_count(wv), 0.5f, 1.5f);
    td_binding b = {w, wv};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    td_tensor *scalar = test_tensor(ctx, TD_F32, 0, NULL);
    for (int k = 0; k < 3; k++) {
        td_tensor *an = test_read_output(ctx, p, 1 + (uint32_t)k, 0);
        float *v = test_f32(vals[k]);
        for (size_t j = 0; j < test_count(vals[k]); j++) {
            float orig = v[j];
            v[j] = orig + 1e-2f;
            double up_at = v[j];
            TEST_OK(ctx, td_program_set_param(p, params[k], vals[k]));
            TEST_OK(ctx, td_program_run(p, 1, &b));
            TEST_OK(ctx, td_program_read_output(p, 0, 0, scalar));
            double up = test_f32(scalar)[0];
            v[j] = orig - 1e-2f;
            double down_at = v[j];
            TEST_OK(ctx, td_program_set_param(p, params[k], vals[k]));
            TEST_OK(ctx, td_program_run(p, 1, &b));
            TEST_OK(ctx, td_program_read_output(p, 0, 0, scalar));
            double numeric = (up - test_f32(scalar)[0]) / (up_at - down_at);
            v[j] = orig;
            TEST_OK(ctx, td_program_set_param(p, params[k], vals[k]));
            cr_assert(test_close(test_f32(an)[j], numeric, 2e-2, 2e-3),
                      "d loss / d %s[%zu] = %.6g, finite difference %.6g", k == 0 ? "x" : k == 1 ? "scale" : "bias", j,
                      (double)test_f32(an)[j], numeric);
        }
        td_tensor_destroy(an);
    }
    td_tensor_destroy(scalar);
    td_tensor_destroy(wv);
    for (int k = 0; k < 3; k++)
        td_tensor_destroy(vals[k]);
}

/* One SGD step on cpu:2: the running statistics become momentum x old +
 * (1 - momentum) x the batch statistics, averaged over the devices, on
 * every device and in the trainer's copy. */
static void check_running_statistics(bool sync)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    bn_model m;
    build_bn(&m, sync);
    td_node loss;
    TEST_OK(ctx, td_graph_mean(m.g, m.y, 0, NULL, false, &loss));
    const td_node params[2] = {m.scale, m.bias};
    td_trainer_options opts;
    td_trainer_options_init(&opts);
    td_trainer *t = NULL;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, loss, 2, params, &opts, &t));
    const int64_t xd[4] = {BN_N, BN_HW, BN_HW, BN_C}, cd[1] = {BN_C};
    td_tensor *x = test_tensor(ctx, TD_F32, 4, xd);
    fill_bn_input(test_f32(x), 5);
    td_binding b = {m.x, x};
    float l;
    TEST_OK(ctx, td_trainer_step(t, 1, &b, &l));
    /* The batch statistics: each half's (per device), or the whole batch's. */
    double want_mean[BN_C] = {0}, want_var[BN_C] = {0};
    const int half = BN_N / 2, per = half * BN_HW * BN_HW;
    for (int d = 0; d < 2; d++) {
        int lo = sync ? 0 : d * half, hi = sync ? BN_N : lo + half, count = sync ? 2 * per : per;
        for (int c = 0; c < BN_C; c++) {
            double mu = 0, var = 0;
            for (int r = lo; r < hi; r++)
                for (int k = 0; k < BN_HW * BN_HW; k++)
                    mu += test_f32(x)[r * BN_ROW + k * BN_C + c];
            mu /= count;
            for (int r = lo; r < hi; r++)
                for (int k = 0; k < BN_HW * BN_HW; k++) {
                    double dd = test_f32(x)[r * BN_ROW + k * BN_C + c] - mu;
                    var += dd * dd;
                }
            var /= count;
            want_mean[c] += 0.5 * (0.01 * mu);
            want_var[c] += 0.5 * (0.99 + 0.01 * var);
        }
    }
    td_tensor *got = test_tensor(ctx, TD_F32, 1, cd);
    for (uint32_t d = 0; d < 2; d++) {
        TEST_OK(ctx, td_trainer_read_param(t, m.mean, d, got));
        for (int c = 0; c < BN_C; c++)
            cr_assert(test_close(test_f32(got)[c], want_mean[c], 1e-5, 1e-6), "device %u running mean[%d] = %g, expected %g",
                      d, c, (double)test_f32(got)[c], want_mean[c]);
        TEST_OK(ctx, td_trainer_read_param(t, m.var, d, got));
        for (int c = 0; c < BN_C; c++)
            cr_assert(test_close(test_f32(got)[c], want_var[c], 1e-5, 1e-6), "device %u running var[%d] = %g, expected %g",
                      d, c, (double)test_f32(got)[c], want_var[c]);
    }
    td_tensor_destroy(got);
    td_tensor_destroy(x);
}

Test(mode, a_trainer_step_updates_the_running_statistics) { check_running_statistics(false); }
Test(mode, a_trainer_step_updates_the_synchronized_running_statistics) { check_running_statistics(true); }

Test(mode, states_are_not_trained_and_updates_are_checked)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:1");
    bn_model m;
    build_bn(&m, false);
    td_node loss;
    TEST_OK(ctx, td_graph_mean(m.g, m.y, 0, NULL, false, &loss));
    const td_node with_state[3] = {m.scale, m.bias, m.mean};
    td_trainer *t = NULL;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "bn/mean", td_trainer_create(m.g, mesh, loss, 3, with_state, NULL, &t));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "already has an update", td_graph_state_update(m.g, m.mean, m.var));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "not a state", td_graph_state_update(m.g, m.scale, m.bias));
    const int64_t d2[1] = {2};
    td_node s2, v3;
    TEST_OK(ctx, td_graph_state(m.g, "s2", 1, d2, NULL, &s2));
    TEST_OK(ctx, td_graph_constant(m.g, 1.0f, &v3));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, NULL, td_graph_state_update(m.g, s2, v3));
    /* Batch norm's running statistics must be states of the features' shape. */
    td_node y;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "must be a state",
               td_graph_batch_norm(m.g, m.x, m.scale, m.bias, m.scale, m.var, NULL, &y));
    TEST_FAILS(ctx, TD_ERR_SHAPE_MISMATCH, "must be [3]",
               td_graph_batch_norm(m.g, m.x, m.scale, m.bias, s2, m.var, NULL, &y));
    td_batch_norm_options o;
    td_batch_norm_options_init(&o);
    o.momentum = 1.0f;
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "momentum 1",
               td_graph_batch_norm(m.g, m.x, m.scale, m.bias, m.mean, m.var, &o, &y));
}
