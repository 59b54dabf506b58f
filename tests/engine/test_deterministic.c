/* Deterministic mode (td_context_options.deterministic) and what it rests
 * on: tandem's own GEMM computes every element as the plain sum written in
 * cpu_gemm_own.c (k ascending, one accumulator, multiply then add), here
 * against a triple loop of this file's own, directly and through a CPU
 * device that splits the call over 1 or 3 host threads; the own exp, log
 * and erf (kernels/cpu/td_fixed_math.h) stay within 1 ulp of the double C
 * library and give the vectorised elementwise kernel's bits one element at
 * a time; and an MLP trains to the same parameters, bitwise, whatever
 * GEMM engine the environment asks for and at any thread count. The same
 * GEMM source built for other vector sets is tests/engine/
 * test_gemm_isa.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_own.h"
#include "engine_test_util.h"
#include "tandem/models.h"
#include "td_fixed_double.h"
#include "td_fixed_math.h"
#include "td_reference.h"

/* The documented order, written out once more: acc = 0, then acc + a * b
 * for k ascending, then alpha acc (+ beta C). */
static void triple_loop(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < g->k; p++) {
                const float x = g->trans_a ? a[p * g->lda + i] : a[i * g->lda + p];
                const float y = g->trans_b ? b[j * g->ldb + p] : b[p * g->ldb + j];
                const float product = x * y;
                acc = acc + product;
            }
            float *cij = &c[i * g->ldc + j];
            *cij = g->beta == 0.0f ? g->alpha * acc : g->alpha * acc + g->beta * *cij;
        }
}

Test(deterministic, own_gemm_is_the_triple_loop_bitwise_at_awkward_sizes)
{
    /* m, n, k: edges of the 6 x 16 micro-tile, the 96-row and 512-column
     * blocks, and k across several 256-deep k-blocks. */
    static const int64_t shapes[][3] = {{1, 1, 1},    {5, 15, 3},    {7, 17, 257},   {97, 513, 255},
                                        {193, 31, 769}, {6, 16, 1000}, {130, 600, 513}, {1, 700, 2}};
    test_rng rng = {0xD3u};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++)
        for (int form = 0; form < 4; form++) {
            td_gemm_params g = {.trans_a = form & 1, .trans_b = form >> 1, .m = shapes[t][0], .n = shapes[t][1],
                                .k = shapes[t][2], .alpha = t % 2 ? 1.0f : 0.75f, .beta = t % 3 ? 0.0f : -0.5f};
            g.lda = (g.trans_a ? g.m : g.k) + (int64_t)t % 3;
            g.ldb = (g.trans_b ? g.k : g.n) + (int64_t)t % 2;
            g.ldc = g.n + 1;
            const size_t a_n = (size_t)((g.trans_a ? g.k : g.m) * g.lda);
            const size_t b_n = (size_t)((g.trans_b ? g.n : g.k) * g.ldb), c_n = (size_t)(g.m * g.ldc);
            float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b);
            float *own = malloc(c_n * sizeof *own), *loop = malloc(c_n * sizeof *loop);
            cr_assert(a && b && own && loop);
            test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
            test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
            test_fill_uniform(&rng, own, c_n, -1.0f, 1.0f);
            memcpy(loop, own, c_n * sizeof *loop);
            td_cpu_gemm_own(&g, own, a, b);
            triple_loop(&g, loop, a, b);
            for (int64_t r = 0; r < g.m; r++)
                cr_assert(memcmp(own + r * g.ldc, loop + r * g.ldc, (size_t)g.n * sizeof *own) == 0,
                          "%lld x %lld x %lld, trans_a %d trans_b %d: row %lld differs from the triple loop",
                          (long long)g.m, (long long)g.n, (long long)g.k, g.trans_a, g.trans_b, (long long)r);
            free(a);
            free(b);
            free(own);
            free(loop);
        }
}

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

/* 500 rows of C are three parts of the host pool's split (192, 192, 116
 * rows) when there are threads to take them. */
Test(deterministic, cpu_device_gemm_is_the_triple_loop_on_one_thread_or_three, .timeout = 120)
{
    const int64_t M = 500, K = 300, N = 70;
    test_rng rng = {0xBEEFu};
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *loop = malloc(sizeof(float) * M * N);
    cr_assert(a && b && loop);
    test_fill_uniform(&rng, a, (size_t)(M * K), -1.0f, 1.0f);
    test_fill_uniform(&rng, b, (size_t)(K * N), -1.0f, 1.0f);
    for (int form = 0; form < 4; form++) {
        const bool ta = form & 1, tb = form >> 1;
        /* The same values of op(A) and op(B) whatever the form: stored
         * transposed when the form says so. */
        const int64_t a_dims[3] = {1, ta ? K : M, ta ? M : K}, b_dims[3] = {1, tb ? N : K, tb ? K : N};
        float *a_stored = malloc(sizeof(float) * M * K), *b_stored = malloc(sizeof(float) * K * N);
        cr_assert(a_stored && b_stored);
        for (int64_t i = 0; i < M; i++)
            for (int64_t p = 0; p < K; p++)
                a_stored[ta ? p * M + i : i * K + p] = a[i * K + p];
        for (int64_t p = 0; p < K; p++)
            for (int64_t j = 0; j < N; j++)
                b_stored[tb ? j * K + p : p * N + j] = b[p * N + j];
        td_gemm_params g = {.trans_a = ta, .trans_b = tb, .m = M, .n = N, .k = K, .lda = ta ? M : K,
                            .ldb = tb ? K : N, .ldc = N, .alpha = 1.0f, .beta = 0.0f};
        triple_loop(&g, loop, a_stored, b_stored);
        for (uint32_t threads = 1; threads <= 3; threads += 2) {
            td_context *ctx = context_with(true, threads);
            td_mesh *mesh = test_mesh(ctx, "cpu:1");
            td_graph *gr;
            td_node na, nb, out;
            TEST_OK(ctx, td_graph_create(ctx, &gr));
            TEST_OK(ctx, td_graph_input(gr, "a", TD_F32, 3, a_dims, TD_REPLICATED, &na));
            TEST_OK(ctx, td_graph_input(gr, "b", TD_F32, 3, b_dims, TD_REPLICATED, &nb));
            TEST_OK(ctx, td_graph_batch_matmul(gr, na, nb, ta, tb, &out));
            td_program *p = test_compile(ctx, gr, mesh, 1, &out);
            td_tensor *ta_t = test_tensor_f32(ctx, 3, a_dims, a_stored);
            td_tensor *tb_t = test_tensor_f32(ctx, 3, b_dims, b_stored);
            td_binding bind[2] = {{na, ta_t}, {nb, tb_t}};
            TEST_OK(ctx, td_program_run(p, 2, bind));
            td_tensor *c = test_read_output(ctx, p, 0, 0);
            cr_assert_eq(test_count(c), (size_t)(M * N));
            size_t differ = 0;
            for (int64_t i = 0; i < M * N; i++)
                differ += memcmp(&test_f32(c)[i], &loop[i], sizeof(float)) != 0;
            cr_assert_eq(differ, 0, "trans_a %d trans_b %d, %u threads: %zu of %lld elements differ", ta, tb,
                         threads, differ, (long long)(M * N));
            td_tensor_destroy(c);
            td_tensor_destroy(ta_t);
            td_tensor_destroy(tb_t);
            td_context_destroy(ctx);
        }
        free(a_stored);
        free(b_stored);
    }
    free(a);
    free(b);
    free(loop);
}

/* ---- tandem's own exp, log and erf ---- */

/* How far f is from the exact value v (the double C library's, whose own
 * error is far below a float ulp), in ulps of float at v. */
static double ulps_from(float f, double v)
{
    /* past FLT_MAX the nearest float is inf: no distance when both say so */
    if (isinf(f) || isinf(v))
        return f == (float)v ? 0.0 : INFINITY;
    int e;
    frexp(v, &e);
    /* a float ulp at |v| in [2^(e-1), 2^e) is 2^(e-24), and never below
     * the subnormal spacing 2^-149 */
    const double ulp = ldexp(1.0, (e - 24 < -149) ? -149 : e - 24);
    return fabs((double)f - v) / ulp;
}

typedef struct sweep {
    double worst;
    float worst_x;
    size_t count, not_nearest;
} sweep;

static void note(sweep *s, float x, float f, double v)
{
    const double u = ulps_from(f, v);
    s->count++;
    s->not_nearest += f != (float)v;
    if (!(u <= s->worst)) {
        s->worst = u;
        s->worst_x = x;
    }
}

#define SWEEP_REPORT(name, s, bound)                                                                             \
    do {                                                                                                         \
        cr_log_info("%s: %zu values, worst %.4f ulp at %.9g, %zu not the nearest float", name, (s).count,        \
                    (s).worst, (double)(s).worst_x, (s).not_nearest);                                            \
        cr_assert((s).worst <= (bound), "%s: %.4f ulp at x = %.9g, expected at most %g", name, (s).worst,        \
                  (double)(s).worst_x, (double)(bound));                                                         \
        /* evaluated to ~1e-14 in double, so nearly always the nearest */                                      \
        cr_assert_leq((s).not_nearest * 1000000, (s).count, "%s: %zu of %zu values not the nearest float", name, \
                      (s).not_nearest, (s).count);                                                               \
    } while (0)

/* Every `stride`-th float of the whole line, both signs, subnormals,
 * infinities and NaNs included (stride odd, so every bit pattern's low
 * bits come up). */
#define FOR_EVERY_FLOAT(x, stride)                                                              \
    for (uint64_t bits_##x = 0; bits_##x <= 0xffffffffu; bits_##x += (stride))                   \
        for (float x, *once_##x = &x; once_##x; once_##x = NULL)                                   \
            if (memcpy(&x, &(uint32_t){(uint32_t)bits_##x}, sizeof x), !isnan(x))

Test(deterministic, own_exp_is_within_one_ulp_of_the_double_library)
{
    sweep s = {0};
    FOR_EVERY_FLOAT(x, 1009)
    note(&s, x, td_fixed_expf(x), exp((double)x));
    /* densely where e^x is finite and not 0, subnormal results included */
    for (float x = -104.0f; x < 89.0f; x += 0.00390625f)
        note(&s, x, td_fixed_expf(x), exp((double)x));
    SWEEP_REPORT("expf", s, 1.0);
    cr_assert_eq(td_fixed_expf(0.0f), 1.0f);
    cr_assert_eq(td_fixed_expf(-0.0f), 1.0f);
    cr_assert_eq(td_fixed_expf(1.0f), 2.71828175f);
    cr_assert(isinf(td_fixed_expf(89.0f)) && isinf(td_fixed_expf(INFINITY)));
    cr_assert_eq(td_fixed_expf(-104.0f), 0.0f);
    cr_assert_eq(td_fixed_expf(-INFINITY), 0.0f);
    cr_assert(isnan(td_fixed_expf(NAN)));
}

Test(deterministic, own_log_is_within_one_ulp_of_the_double_library)
{
    sweep s = {0};
    FOR_EVERY_FLOAT(x, 1009)
    if (x >= 0.0f)
        note(&s, x, td_fixed_logf(x), log((double)x));
    /* and densely around 1, where ln x is small and most sensitive */
    for (float x = 0.9f; x < 1.1f; x = nextafterf(x, 2.0f))
        note(&s, x, td_fixed_logf(x), log((double)x));
    SWEEP_REPORT("logf", s, 1.0);
    cr_assert_eq(td_fixed_logf(1.0f), 0.0f);
    cr_assert(isinf(td_fixed_logf(0.0f)) && td_fixed_logf(0.0f) < 0.0f);
    cr_assert(isinf(td_fixed_logf(-0.0f)) && td_fixed_logf(-0.0f) < 0.0f);
    cr_assert(isinf(td_fixed_logf(INFINITY)) && td_fixed_logf(INFINITY) > 0.0f);
    cr_assert(isnan(td_fixed_logf(-1.0f)) && isnan(td_fixed_logf(NAN)) && isnan(td_fixed_logf(-INFINITY)));
}

Test(deterministic, own_erf_is_within_one_ulp_of_the_double_library)
{
    sweep s = {0};
    FOR_EVERY_FLOAT(x, 1009)
    note(&s, x, td_fixed_erff(x), erf((double)x));
    /* densely where erf x is not yet +-1, the series' joins at 2 and 4 included */
    for (float x = -4.5f; x < 4.5f; x += 0.0001220703125f)
        note(&s, x, td_fixed_erff(x), erf((double)x));
    /* tiny arguments, where erf x is 2x / sqrt(pi) */
    for (float x = 1e-30f; x < 1e-3f; x *= 1.001f)
        note(&s, x, td_fixed_erff(x), erf((double)x));
    SWEEP_REPORT("erff", s, 1.0);
    cr_assert_eq(td_fixed_erff(0.0f), 0.0f);
    cr_assert_eq(td_fixed_erff(INFINITY), 1.0f);
    cr_assert_eq(td_fixed_erff(-INFINITY), -1.0f);
    cr_assert(isnan(td_fixed_erff(NAN)));
}

/* One element at a time, kept scalar (the loop vectoriser off for this
 * function), against the reference elementwise kernel, whose loops the
 * compiler vectorises: the same bits. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void scalar_each(int32_t op, const float *x, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        volatile float v = x[i];
        if (op == TD_EW_EXP)
            out[i] = td_fixed_expf(v);
        else if (op == TD_EW_LOG)
            out[i] = td_fixed_logf(v);
        else /* td_ew_ops.h's GELU_ERF */
            out[i] = 0.5f * v * (1.0f + td_fixed_erff(v * TD_RSQRT2));
    }
}

Test(deterministic, vector_kernels_give_the_scalar_bits)
{
    enum { N = 4099 };
    static float x[N], vec[N], one[N];
    test_rng rng = {0xE1u};
    const int32_t ops[3] = {TD_EW_EXP, TD_EW_LOG, TD_EW_GELU_ERF};
    for (int o = 0; o < 3; o++) {
        for (size_t i = 0; i < N; i++)
            x[i] = ops[o] == TD_EW_LOG ? test_rng_uniform(&rng, 0.0f, 50.0f) : test_rng_uniform(&rng, -20.0f, 20.0f);
        x[7] = 0.0f, x[11] = -0.0f, x[13] = INFINITY, x[17] = NAN, x[19] = 1e-40f, x[23] = -INFINITY;
        td_ew_params p = {.op = ops[o], .dims = {1, 1, 1, N}, .a_strides = {0, 0, 0, 1}};
        td_reference_elementwise(vec, x, NULL, &p);
        scalar_each(ops[o], x, one, N);
        for (size_t i = 0; i < N; i++)
            cr_assert(memcmp(&vec[i], &one[i], sizeof(float)) == 0 || (isnan(vec[i]) && isnan(one[i])),
                      "op %d at %zu (x = %g): %.9g vectorised, %.9g scalar", ops[o], i, (double)x[i], (double)vec[i],
                      (double)one[i]);
    }
}

/* ---- training ---- */

enum { MLP_STEPS = 3 };

typedef struct mlp_run {
    float losses[MLP_STEPS];
    float *params;
    size_t n_values;
} mlp_run;

/* MLP_STEPS Adam steps of the seed MLP (784-512-512-10) on random images,
 * B examples on `spec`: 400 or more rows a device, so its GEMMs split over
 * spare threads. */
static void train_mlp(const char *spec, int64_t B, bool deterministic, uint32_t threads, mlp_run *out)
{
    td_context *ctx = context_with(deterministic, threads);
    td_mesh *mesh = test_mesh(ctx, spec);
    test_classifier m;
    test_classifier_create(ctx, "mlp", B, 7, 0x3A11u, &m);
    td_trainer_options to;
    TEST_OK(ctx, td_trainer_options_init(&to));
    to.optimizer = TD_OPTIMIZER_ADAM;
    td_trainer *t;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, m.n_params, m.params, &to, &t));
    /* one batch, again and again: the loss must fall as it is learnt */
    for (int step = 0; step < MLP_STEPS; step++)
        TEST_OK(ctx, td_trainer_step(t, 3, m.bindings, &out->losses[step]));
    out->params = test_read_trained(ctx, m.g, t, m.n_params, m.params, 0, &out->n_values);
    test_classifier_destroy(&m);
    td_context_destroy(ctx);
}

static size_t params_differing(const mlp_run *a, const mlp_run *b)
{
    cr_assert_eq(a->n_values, b->n_values);
    return test_floats_differing(a->params, b->params, a->n_values) +
           test_floats_differing(a->losses, b->losses, MLP_STEPS);
}

/* Deterministic mode ignores TD_CPU_GEMM (CBLAS where the build has it,
 * the FMA engine) and the thread count: the bits are those of the own
 * GEMM run plainly. */
Test(deterministic, mlp_trains_to_the_same_bits_whatever_gemm_is_asked_and_threads, .timeout = 240)
{
    mlp_run own, det_blas_1, det_blas_3, det_own_3;
    test_set_env("TD_CPU_GEMM", "cblas");
    train_mlp("cpu:1", 400, true, 1, &det_blas_1);
    test_set_env("TD_CPU_GEMM", "own-fma");
    train_mlp("cpu:1", 400, true, 3, &det_blas_3);
    test_set_env("TD_CPU_GEMM", "own");
    train_mlp("cpu:1", 400, false, 1, &own);
    train_mlp("cpu:1", 400, true, 3, &det_own_3);
    test_set_env("TD_CPU_GEMM", NULL);
    cr_assert_lt(own.losses[MLP_STEPS - 1], own.losses[0], "the loss should fall: %g then %g",
                 (double)own.losses[0], (double)own.losses[MLP_STEPS - 1]);
    cr_assert_eq(params_differing(&det_blas_1, &own), 0, "deterministic (CBLAS built in) vs TD_CPU_GEMM=own");
    cr_assert_eq(params_differing(&det_blas_1, &det_blas_3), 0,
                 "deterministic, 1 thread and TD_CPU_GEMM=cblas vs 3 and TD_CPU_GEMM=own-fma");
    cr_assert_eq(params_differing(&det_blas_1, &det_own_3), 0, "deterministic, TD_CPU_GEMM=own, 3 threads");
    free(own.params);
    free(det_blas_1.params);
    free(det_blas_3.params);
    free(det_own_3.params);
}

/* Two devices: the ring's sums have a fixed order too, so the bits do not
 * depend on the threads either. (cpu:2 is not cpu:1's bits: the gradient
 * is summed over the two shards and then across the ring, another order
 * than one device's sum over the whole batch; that is not promised.) */
Test(deterministic, two_devices_train_to_the_same_bits_on_two_threads_or_four, .timeout = 240)
{
    mlp_run a, b;
    train_mlp("cpu:2", 800, true, 2, &a);
    train_mlp("cpu:2", 800, true, 4, &b);
    cr_assert_eq(params_differing(&a, &b), 0, "cpu:2, 2 threads vs 4");
    free(a.params);
    free(b.params);
}

/* ---- the engine's double functions (engine/core/td_fixed_double.h) ---- */

static double relative(double got, long double want)
{
    return want == 0.0L ? fabs(got) : (double)fabsl(((long double)got - want) / want);
}

Test(deterministic, own_double_log_exp_cos_pow_are_near_the_long_double_library)
{
    test_rng rng = {0xD0Bu};
    double worst[5] = {0};
    for (int i = 0; i < 200000; i++) {
        /* x over many binades, y over exp's range, t over a few periods */
        const double x = ldexp(1.0 + test_rng_uniform(&rng, 0.0f, 1.0f), (int)(test_rng_next(&rng) % 200) - 100);
        const double y = (double)test_rng_uniform(&rng, -700.0f, 700.0f) + (double)test_rng_uniform(&rng, 0.0f, 1e-3f);
        const double t = (double)test_rng_uniform(&rng, -8.0f, 8.0f) + (double)test_rng_uniform(&rng, 0.0f, 1e-4f);
        const double b = (double)test_rng_uniform(&rng, 0.5f, 0.9999f);
        const uint64_t n = test_rng_next(&rng) % 100000;
        const double p = (double)test_rng_uniform(&rng, 0.0f, 300.0f);
        const double r[5] = {relative(td_fixed_log(x), logl((long double)x)),
                             relative(td_fixed_exp(y), expl((long double)y)),
                             fabs(td_fixed_cos_pi(t) - (double)cosl(3.14159265358979323846264338327950288L * t)),
                             /* past double's range both are 0 or subnormal: not compared */
                             powl((long double)b, (long double)n) < 1e-300L
                                 ? 0.0
                                 : relative(td_fixed_pow_whole(b, n), powl((long double)b, (long double)n)),
                             relative(td_fixed_pow(b, p), powl((long double)b, (long double)p))};
        for (int k = 0; k < 5; k++)
            worst[k] = r[k] > worst[k] ? r[k] : worst[k];
    }
    cr_log_info("worst relative error: log %.3g, exp %.3g, pow_whole %.3g, pow %.3g; cos_pi absolute %.3g", worst[0],
                worst[1], worst[3], worst[4], worst[2]);
    cr_assert_leq(worst[0], 4e-16, "log: %g relative", worst[0]);
    cr_assert_leq(worst[1], 1e-15, "exp: %g relative", worst[1]);
    cr_assert_leq(worst[2], 1e-15, "cos_pi: %g absolute", worst[2]);
    /* squaring doubles a relative error: b^n carries about n x 1e-16 */
    cr_assert_leq(worst[3], 1e-11, "pow_whole: %g relative", worst[3]);
    cr_assert_leq(worst[4], 2e-13, "pow: %g relative", worst[4]);
    cr_assert_eq(td_fixed_log(1.0), 0.0);
    cr_assert_eq(td_fixed_exp(0.0), 1.0);
    cr_assert_eq(td_fixed_cos_pi(0.0), 1.0);
    cr_assert_eq(td_fixed_cos_pi(1.0), -1.0);
    cr_assert_eq(td_fixed_cos_pi(0.5), 0.0);
    cr_assert_eq(td_fixed_pow_whole(0.9, 0), 1.0);
    cr_assert_eq(td_fixed_pow(0.5, 0.0), 1.0);
    cr_assert(isinf(td_fixed_log(0.0)) && isnan(td_fixed_log(-1.0)));
}
