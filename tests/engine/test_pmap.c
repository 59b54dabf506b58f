/* pmap semantics: sharded and replicated inputs, and the collectives psum,
 * pmean, all_gather, broadcast and axis_index, each compared with the same
 * computation done sequentially on the host from the per-device inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"

enum {
    OUT_SLICE,      /* scale(x, 1): the device's slice of x */
    OUT_INPUT,      /* x itself */
    OUT_REPLICATED, /* scale(z, 1) */
    OUT_PSUM,
    OUT_PMEAN,
    OUT_GATHER,
    OUT_BCAST_FIRST,
    OUT_BCAST_LAST,
    OUT_AXIS_INDEX,
    OUT_PSUM_REPLICATED, /* psum(scale(z, 1)) */
    OUT_COUNT
};

/* |got - want| bound for a float sum of n terms whose magnitudes sum to
 * `magnitude`: n roundings of at most 2^-24 each, times 2 for headroom. */
static double sum_tolerance(uint32_t n, double magnitude)
{
    return 2.0 * n * 5.96e-8 * magnitude + 1e-30;
}

static const float *out_data(td_tensor *const *outs, int which)
{
    return test_f32(outs[which]);
}

/* One compiled program computes every collective on x [N*rows, 2] sharded
 * and z [rows, 2] replicated; each collective gets its own operand so that
 * one cannot disturb another. */
static void check_collectives(const char *spec, bool skip_when_unavailable, int64_t rows, uint64_t seed)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = skip_when_unavailable ? test_mesh_or_skip(ctx, spec) : test_mesh(ctx, spec);
    const uint32_t n = test_mesh_size(mesh);
    const int64_t cols = 2, per = rows * cols;
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[2] = {(int64_t)n * rows, cols}, zd[2] = {rows, cols};
    td_node x, z, out[OUT_COUNT], operand;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "z", TD_F32, 2, zd, TD_REPLICATED, &z));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &out[OUT_SLICE]));
    out[OUT_INPUT] = x;
    TEST_OK(ctx, td_graph_scale(g, z, 1.0f, &out[OUT_REPLICATED]));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &operand));
    TEST_OK(ctx, td_graph_psum(g, operand, &out[OUT_PSUM]));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &operand));
    TEST_OK(ctx, td_graph_pmean(g, operand, &out[OUT_PMEAN]));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &operand));
    TEST_OK(ctx, td_graph_all_gather(g, operand, &out[OUT_GATHER]));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &operand));
    TEST_OK(ctx, td_graph_broadcast(g, operand, 0, &out[OUT_BCAST_FIRST]));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &operand));
    TEST_OK(ctx, td_graph_broadcast(g, operand, n - 1, &out[OUT_BCAST_LAST]));
    TEST_OK(ctx, td_graph_axis_index(g, &out[OUT_AXIS_INDEX]));
    TEST_OK(ctx, td_graph_scale(g, z, 1.0f, &operand));
    TEST_OK(ctx, td_graph_psum(g, operand, &out[OUT_PSUM_REPLICATED]));
    td_program *p = test_compile(ctx, g, mesh, OUT_COUNT, out);

    /* Per-device shapes. */
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    TEST_OK(ctx, td_program_output_shape(p, OUT_SLICE, &rank, dims));
    cr_assert(rank == 2 && dims[0] == rows && dims[1] == cols);
    TEST_OK(ctx, td_program_output_shape(p, OUT_GATHER, &rank, dims));
    cr_assert(rank == 2 && dims[0] == (int64_t)n * rows && dims[1] == cols, "all_gather shape [%lld, %lld]",
              (long long)dims[0], (long long)dims[1]);
    TEST_OK(ctx, td_program_output_shape(p, OUT_AXIS_INDEX, &rank, dims));
    cr_assert_eq(rank, 0);

    td_tensor *tx = test_tensor(ctx, TD_F32, 2, xd), *tz = test_tensor(ctx, TD_F32, 2, zd);
    test_rng rng = {seed};
    /* Two runs with different data: nothing of the first may leak into the second. */
    for (int run = 0; run < 2; run++) {
        float *xs = test_f32(tx), *zs = test_f32(tz);
        test_fill_uniform(&rng, xs, (size_t)(n * per), -10.0f, 10.0f);
        test_fill_uniform(&rng, zs, (size_t)per, -10.0f, 10.0f);
        td_binding b[2] = {{x, tx}, {z, tz}};
        TEST_OK(ctx, td_program_run(p, 2, b));

        td_tensor *first[OUT_COUNT] = {0};
        for (uint32_t d = 0; d < n; d++) {
            td_tensor *o[OUT_COUNT];
            for (int k = 0; k < OUT_COUNT; k++)
                o[k] = test_read_output(ctx, p, (uint32_t)k, d);
            const float *slice = xs + (size_t)d * (size_t)per;
            for (int64_t i = 0; i < per; i++) {
                cr_assert_eq(out_data(o, OUT_SLICE)[i], slice[i], "%s rows %lld: device %u slice[%lld] = %g, x has %g",
                             spec, (long long)rows, d, (long long)i, (double)out_data(o, OUT_SLICE)[i],
                             (double)slice[i]);
                cr_assert_eq(out_data(o, OUT_INPUT)[i], slice[i], "device %u input element %lld", d, (long long)i);
                cr_assert_eq(out_data(o, OUT_REPLICATED)[i], zs[i], "device %u replicated element %lld", d,
                             (long long)i);
                double sum = 0.0, magnitude = 0.0;
                for (uint32_t e = 0; e < n; e++) {
                    sum += xs[(size_t)e * (size_t)per + (size_t)i];
                    magnitude += fabs(xs[(size_t)e * (size_t)per + (size_t)i]);
                }
                double tol = sum_tolerance(n, magnitude);
                cr_assert(fabs(out_data(o, OUT_PSUM)[i] - sum) <= tol, "%s: device %u psum[%lld] = %.9g, host %.9g",
                          spec, d, (long long)i, (double)out_data(o, OUT_PSUM)[i], sum);
                cr_assert(fabs(out_data(o, OUT_PMEAN)[i] - sum / n) <= tol / n + 6e-8 * fabs(sum / n),
                          "%s: device %u pmean[%lld] = %.9g, host %.9g", spec, d, (long long)i,
                          (double)out_data(o, OUT_PMEAN)[i], sum / n);
                cr_assert_eq(out_data(o, OUT_BCAST_FIRST)[i], xs[i], "device %u broadcast(root 0)[%lld]", d,
                             (long long)i);
                cr_assert_eq(out_data(o, OUT_BCAST_LAST)[i], xs[(size_t)(n - 1) * (size_t)per + (size_t)i],
                             "device %u broadcast(root %u)[%lld]", d, n - 1, (long long)i);
                double zsum = (double)zs[i] * n;
                cr_assert(fabs(out_data(o, OUT_PSUM_REPLICATED)[i] - zsum) <= sum_tolerance(n, fabs(zsum)),
                          "device %u psum(replicated)[%lld] = %g, host %g", d, (long long)i,
                          (double)out_data(o, OUT_PSUM_REPLICATED)[i], zsum);
            }
            cr_assert(memcmp(out_data(o, OUT_GATHER), xs, (size_t)(n * per) * sizeof(float)) == 0,
                      "%s rows %lld: device %u all_gather differs from the concatenated inputs", spec,
                      (long long)rows, d);
            cr_assert_eq(out_data(o, OUT_AXIS_INDEX)[0], (float)d);
            /* Collectives leave every device with bitwise the same values. */
            if (d == 0) {
                memcpy(first, o, sizeof o);
                continue;
            }
            const int same[] = {OUT_PSUM, OUT_PMEAN, OUT_PSUM_REPLICATED};
            for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
                cr_assert(memcmp(out_data(o, same[k]), out_data(first, same[k]), (size_t)per * sizeof(float)) == 0,
                          "%s: output %d on device %u is not bitwise that of device 0", spec, same[k], d);
            for (int k = 0; k < OUT_COUNT; k++)
                td_tensor_destroy(o[k]);
        }
        for (int k = 0; k < OUT_COUNT; k++)
            td_tensor_destroy(first[k]);
    }
    td_tensor_destroy(tx);
    td_tensor_destroy(tz);
    td_context_destroy(ctx);
}

static const int64_t awkward_rows[] = {1, 3, 7, 1009};

static void check_collectives_all_sizes(const char *spec)
{
    for (size_t i = 0; i < sizeof awkward_rows / sizeof awkward_rows[0]; i++)
        check_collectives(spec, false, awkward_rows[i], 100 + i);
}

Test(pmap, collectives_cpu1) { check_collectives_all_sizes("cpu:1"); }
Test(pmap, collectives_cpu2) { check_collectives_all_sizes("cpu:2"); }
Test(pmap, collectives_cpu3) { check_collectives_all_sizes("cpu:3"); }
Test(pmap, collectives_cpu4) { check_collectives_all_sizes("cpu:4"); }
Test(pmap, collectives_cpu8) { check_collectives_all_sizes("cpu:8"); }

Test(pmap_devices, collectives_on_test_devices)
{
    const char *spec = test_devices_spec("cpu:3");
    check_collectives(spec, true, 1, 7);
    check_collectives(spec, true, 7, 8);
    check_collectives(spec, true, 1009, 9);
}

/* ---- exact values ---- */

Test(pmap, psum_of_small_integers_is_exact)
{
    /* Integers below 2^24 add exactly in any order. */
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[1] = {8};
    td_node x, s, m;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, xd, TD_SHARDED, &x));
    /* pmean(4 x) is the sum too. (4 x is computed before psum(x) runs and
     * is nobody else's operand: see psum_leaves_its_operand_intact for why
     * reading a collective's operand afterwards fails today.) */
    td_node x4;
    TEST_OK(ctx, td_graph_scale(g, x, 4.0f, &x4));
    TEST_OK(ctx, td_graph_psum(g, x, &s));
    TEST_OK(ctx, td_graph_pmean(g, x4, &m));
    td_node outs[2] = {s, m};
    td_program *p = test_compile(ctx, g, mesh, 2, outs);
    const float xs[8] = {1, 2, 10, 20, 100, 200, 1000, 2000};
    td_tensor *tx = test_tensor_f32(ctx, 1, xd, xs);
    td_binding b = {x, tx};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 4; d++) {
        td_tensor *o = test_read_output(ctx, p, 0, d), *mo = test_read_output(ctx, p, 1, d);
        cr_assert_eq(test_f32(o)[0], 1111.0f, "device %u psum[0] = %g", d, (double)test_f32(o)[0]);
        cr_assert_eq(test_f32(o)[1], 2222.0f, "device %u psum[1] = %g", d, (double)test_f32(o)[1]);
        cr_assert_eq(test_f32(mo)[0], 1111.0f, "device %u pmean[0] = %g", d, (double)test_f32(mo)[0]);
        cr_assert_eq(test_f32(mo)[1], 2222.0f, "device %u pmean[1] = %g", d, (double)test_f32(mo)[1]);
        td_tensor_destroy(o);
        td_tensor_destroy(mo);
    }
    td_tensor_destroy(tx);
    td_context_destroy(ctx);
}

Test(pmap, axis_index_in_arithmetic)
{
    /* y = x + axis_index * 100 on each device's slice. */
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[2] = {3, 2};
    td_node x, ai, scaled, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_axis_index(g, &ai));
    TEST_OK(ctx, td_graph_scale(g, ai, 100.0f, &scaled));
    TEST_OK(ctx, td_graph_add(g, x, scaled, &y));
    td_program *p = test_compile(ctx, g, mesh, 1, &y);
    const float xs[6] = {1, 2, 3, 4, 5, 6};
    td_tensor *tx = test_tensor_f32(ctx, 2, xd, xs);
    td_binding b = {x, tx};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 3; d++) {
        td_tensor *o = test_read_output(ctx, p, 0, d);
        cr_assert_eq(test_f32(o)[0], xs[2 * d] + 100.0f * (float)d);
        cr_assert_eq(test_f32(o)[1], xs[2 * d + 1] + 100.0f * (float)d);
        td_tensor_destroy(o);
    }
    td_tensor_destroy(tx);
    td_context_destroy(ctx);
}

Test(pmap, collectives_feed_later_ops_and_each_other)
{
    /* local = x * 2; total = psum(local); centred = local - pmean(local);
     * gathered = all_gather(centred): the sum of `gathered` is 0 on every
     * device, and total is twice the column sums. */
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[2] = {8, 3};
    td_node x, local, local2, total, mean, centred, gathered;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_scale(g, x, 2.0f, &local));
    TEST_OK(ctx, td_graph_scale(g, x, 2.0f, &local2));
    TEST_OK(ctx, td_graph_psum(g, local, &total));
    TEST_OK(ctx, td_graph_pmean(g, local2, &mean));
    TEST_OK(ctx, td_graph_scale(g, x, 2.0f, &local));
    TEST_OK(ctx, td_graph_sub(g, local, mean, &centred));
    TEST_OK(ctx, td_graph_all_gather(g, centred, &gathered));
    td_node outs[2] = {total, gathered};
    td_program *p = test_compile(ctx, g, mesh, 2, outs);
    float xs[24];
    for (int i = 0; i < 24; i++)
        xs[i] = (float)(i * 3 % 7); /* small integers: everything exact */
    td_tensor *tx = test_tensor_f32(ctx, 2, xd, xs);
    td_binding b = {x, tx};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 4; d++) {
        td_tensor *t = test_read_output(ctx, p, 0, d), *ga = test_read_output(ctx, p, 1, d);
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) {
                float want = 0;
                for (int e = 0; e < 4; e++)
                    want += 2.0f * xs[(e * 2 + r) * 3 + c];
                cr_assert_eq(test_f32(t)[r * 3 + c], want, "device %u total[%d,%d]", d, r, c);
                float column = 0;
                for (int e = 0; e < 4; e++)
                    column += test_f32(ga)[(e * 2 + r) * 3 + c];
                cr_assert_float_eq(column, 0.0f, 1e-5, "device %u: centred values sum to %g", d, (double)column);
            }
        td_tensor_destroy(t);
        td_tensor_destroy(ga);
    }
    td_tensor_destroy(tx);
    td_context_destroy(ctx);
}

/* ---- a collective's operand must survive the collective ---- */

static void check_operand_survives(bool mean)
{
    /* a = x * 1 is both the psum's operand and an output (and is used again
     * after the collective): it must still hold the device's slice. */
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[1] = {16};
    td_node x, a, s, after;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_scale(g, x, 1.0f, &a));
    TEST_OK(ctx, (mean ? td_graph_pmean : td_graph_psum)(g, a, &s));
    TEST_OK(ctx, td_graph_add(g, a, s, &after));
    td_node outs[3] = {a, s, after};
    td_program *p = test_compile(ctx, g, mesh, 3, outs);
    float xs[16];
    for (int i = 0; i < 16; i++)
        xs[i] = (float)(i + 1);
    td_tensor *tx = test_tensor_f32(ctx, 1, xd, xs);
    td_binding b = {x, tx};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t d = 0; d < 4; d++) {
        td_tensor *ta = test_read_output(ctx, p, 0, d), *ts = test_read_output(ctx, p, 1, d),
                  *tafter = test_read_output(ctx, p, 2, d);
        for (int i = 0; i < 4; i++) {
            float sum = 0;
            for (int e = 0; e < 4; e++)
                sum += xs[e * 4 + i];
            float want_s = mean ? sum / 4.0f : sum;
            cr_assert_eq(test_f32(ts)[i], want_s, "device %u collective[%d] = %g", d, i, (double)test_f32(ts)[i]);
            cr_assert_eq(test_f32(ta)[i], xs[d * 4 + i],
                         "device %u: the %s operand a[%d] is %g after the collective, expected its slice value %g",
                         d, mean ? "pmean" : "psum", i, (double)test_f32(ta)[i], (double)xs[d * 4 + i]);
            cr_assert_eq(test_f32(tafter)[i], xs[d * 4 + i] + want_s, "device %u: a + collective [%d]", d, i);
        }
        td_tensor_destroy(ta);
        td_tensor_destroy(ts);
        td_tensor_destroy(tafter);
    }
    td_tensor_destroy(tx);
    td_context_destroy(ctx);
}

Test(pmap, psum_leaves_its_operand_intact) { check_operand_survives(false); }
Test(pmap, pmean_leaves_its_operand_intact) { check_operand_survives(true); }

/* ---- programs and parameters ---- */

Test(pmap, params_start_at_zero_and_set_param_reaches_every_device)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t wd[2] = {2, 3};
    td_node w, y;
    TEST_OK(ctx, td_graph_param(g, "w", 2, wd, &w));
    TEST_OK(ctx, td_graph_scale(g, w, 3.0f, &y));
    td_program *p = test_compile(ctx, g, mesh, 1, &y);
    td_tensor *t = test_tensor(ctx, TD_F32, 2, wd);
    for (uint32_t d = 0; d < 3; d++) {
        TEST_OK(ctx, td_program_read_param(p, w, d, t));
        for (int i = 0; i < 6; i++)
            cr_assert_eq(test_f32(t)[i], 0.0f, "device %u w[%d] before set", d, i);
    }
    const float values[6] = {1, -2, 3.5f, 4, 5, -6};
    td_tensor *v = test_tensor_f32(ctx, 2, wd, values);
    TEST_OK(ctx, td_program_set_param(p, w, v));
    TEST_OK(ctx, td_program_run(p, 0, NULL));
    for (uint32_t d = 0; d < 3; d++) {
        TEST_OK(ctx, td_program_read_param(p, w, d, t));
        cr_assert(memcmp(test_f32(t), values, sizeof values) == 0, "device %u", d);
        td_tensor *o = test_read_output(ctx, p, 0, d);
        for (int i = 0; i < 6; i++)
            cr_assert_eq(test_f32(o)[i], 3.0f * values[i]);
        td_tensor_destroy(o);
    }
    td_tensor_destroy(t);
    td_tensor_destroy(v);
    td_context_destroy(ctx);
}

Test(pmap, graph_may_be_destroyed_after_compile)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[1] = {4};
    td_node x, y;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_psum(g, x, &y));
    td_program *p = test_compile(ctx, g, mesh, 1, &y);
    td_graph_destroy(g);
    const float xs[4] = {1, 2, 3, 4};
    td_tensor *tx = test_tensor_f32(ctx, 1, xd, xs);
    td_binding b = {x, tx};
    TEST_OK(ctx, td_program_run(p, 1, &b));
    td_tensor *o = test_read_output(ctx, p, 0, 1);
    cr_assert_eq(test_f32(o)[0], 4.0f);
    cr_assert_eq(test_f32(o)[1], 6.0f);
    td_tensor_destroy(o);
    td_tensor_destroy(tx);
    td_program_destroy(p);
    td_context_destroy(ctx);
}

Test(pmap, two_programs_on_one_mesh)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g = NULL;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    int64_t xd[1] = {2};
    td_node x, s, m;
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, xd, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_psum(g, x, &s));
    TEST_OK(ctx, td_graph_all_gather(g, x, &m));
    td_program *p1 = test_compile(ctx, g, mesh, 1, &s), *p2 = test_compile(ctx, g, mesh, 1, &m);
    const float xs[2] = {5, 7};
    td_tensor *tx = test_tensor_f32(ctx, 1, xd, xs);
    td_binding b = {x, tx};
    for (int i = 0; i < 3; i++) {
        TEST_OK(ctx, td_program_run(p1, 1, &b));
        TEST_OK(ctx, td_program_run(p2, 1, &b));
    }
    td_tensor *o1 = test_read_output(ctx, p1, 0, 0), *o2 = test_read_output(ctx, p2, 0, 1);
    cr_assert_eq(test_f32(o1)[0], 12.0f);
    cr_assert_eq(test_f32(o2)[0], 5.0f);
    cr_assert_eq(test_f32(o2)[1], 7.0f);
    td_tensor_destroy(o1);
    td_tensor_destroy(o2);
    td_tensor_destroy(tx);
    td_context_destroy(ctx);
}
