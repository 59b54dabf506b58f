/* tandem's own FMA GEMM (backends/cpu/cpu_gemm_own_fma.c) against its
 * rule, acc = fmaf(a, b, acc) over k in order, then alpha * acc (+ beta *
 * C): every path this CPU runs (AVX-512, AVX2 + FMA, the matrix-vector
 * chains, the portable one)
 * gives bit for bit the triple loop written here, for every transpose,
 * padded leading dimensions, edges that cut micro-tiles and the MC / NC
 * blocks, and k over several k-blocks; beta == 0 does not read C; the
 * padding of C is not written. Then that it really fuses (its bits are not
 * the deterministic GEMM's), and the engine rule of cpu_gemm.c. The
 * cancel tiles and host-pool parts of this engine are in
 * test_cpu_cancel.c, the kernel conformance suite runs it as the CPU
 * backend's default GEMM on CPUs with FMA. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "cpu_gemm_own.h"
#include "cpu_gemm_own_fma.h"
#include "engine_test_util.h"

typedef struct fma_case {
    int64_t m, n, k, pad;
    float alpha, beta;
} fma_case;

static float op_a(const td_gemm_params *g, const float *a, int64_t i, int64_t p)
{
    return g->trans_a ? a[p * g->lda + i] : a[i * g->lda + p];
}

static float op_b(const td_gemm_params *g, const float *b, int64_t p, int64_t j)
{
    return g->trans_b ? b[j * g->ldb + p] : b[p * g->ldb + j];
}

#ifdef _WIN32
/* a*b + c rounded once, without the C library: mingw-w64's fmaf is not a
 * fused multiply-add (under wine it disagreed with the FMA instruction on
 * a quarter of random operands, where glibc's never does). The product of
 * two floats is exact in a double (48 bits); their sum with c is rounded to
 * odd in double (a round-to-nearest sum, its exact error by TwoSum, and
 * the last bit set when that error is nonzero), and a double rounded to
 * odd with 53 >= 24 + 2 bits rounds to the correctly rounded float. */
static float fused_multiply_add(float a, float b, float c)
{
    const double p = (double)a * (double)b, q = (double)c;
    const double s = p + q;
    const double bb = s - p;
    const double err = (p - (s - bb)) + (q - bb);
    if (err == 0.0 || s != s || s - s != 0.0)
        return (float)s;
    uint64_t bits;
    memcpy(&bits, &s, sizeof bits);
    if ((bits & 1u) == 0)
        bits += ((err > 0.0) == (s > 0.0)) ? 1 : (uint64_t)-1;
    double odd;
    memcpy(&odd, &bits, sizeof odd);
    return (float)odd;
}
#else
#define fused_multiply_add fmaf
#endif

/* The rule, written out again here rather than taken from the file under test. */
static void rule(const td_gemm_params *g, float *c, const float *a, const float *b)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < g->k; p++)
                acc = fused_multiply_add(op_a(g, a, i, p), op_b(g, b, p, j), acc);
            float *cij = &c[i * g->ldc + j];
            const float scaled = g->alpha * acc;
            *cij = g->beta == 0.0f ? scaled : scaled + g->beta * *cij;
        }
}

typedef struct operands {
    td_gemm_params g;
    float *a, *b, *c0;
    size_t c_n;
} operands;

static operands make_operands(test_rng *rng, const fma_case *fc, int form)
{
    operands o = {.g = {.trans_a = form & 1, .trans_b = form >> 1, .m = fc->m, .n = fc->n, .k = fc->k,
                        .alpha = fc->alpha, .beta = fc->beta}};
    td_gemm_params *g = &o.g;
    g->lda = (g->trans_a ? g->m : g->k) + fc->pad;
    g->ldb = (g->trans_b ? g->k : g->n) + fc->pad;
    g->ldc = g->n + fc->pad;
    const size_t a_n = (size_t)((g->trans_a ? g->k : g->m) * g->lda);
    const size_t b_n = (size_t)((g->trans_b ? g->n : g->k) * g->ldb);
    o.c_n = (size_t)(g->m * g->ldc);
    o.a = malloc(a_n * sizeof *o.a);
    o.b = malloc(b_n * sizeof *o.b);
    o.c0 = malloc(o.c_n * sizeof *o.c0);
    cr_assert(o.a && o.b && o.c0);
    test_fill_uniform(rng, o.a, a_n, -1.0f, 1.0f);
    test_fill_uniform(rng, o.b, b_n, -1.0f, 1.0f);
    test_fill_uniform(rng, o.c0, o.c_n, -1.0f, 1.0f);
    if (g->beta == 0.0f)
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++)
                o.c0[i * g->ldc + j] = NAN; /* must not be read */
    return o;
}

static void free_operands(operands *o)
{
    free(o->a);
    free(o->b);
    free(o->c0);
}

Test(cpu_gemm_own_fma, every_path_is_bitwise_the_rule)
{
    /* Micro-tile edges (12 x 32 and 6 x 16), MC = 192 and NC = 256 edges,
     * k in one, two and three blocks of at most 512, the MLP head's n = 10,
     * a 3x3 convolution's k = 9 and its kernel gradient's m = 9. */
    static const fma_case cases[] = {
        {1, 1, 1, 0, 1.0f, 0.0f},         {7, 17, 5, 3, 1.0f, 0.0f},       {97, 513, 257, 0, 0.5f, 1.0f},
        {200, 70, 600, 5, -1.0f, 0.25f},  {128, 10, 128, 0, 1.0f, 0.0f},   {13, 300, 1100, 2, 2.0f, -1.0f},
        {385, 64, 9, 0, 1.0f, 0.0f},      {9, 32, 1500, 1, 1.0f, 0.0f},    {24, 96, 512, 0, 1.0f, 1.0f},
        /* B of exactly one panel (32 columns on AVX-512, 16 on AVX2),
         * unpadded: read in place, over several k-blocks. */
        {9, 32, 1500, 0, 1.0f, 0.0f},     {50, 32, 700, 0, 0.5f, 1.0f},    {30, 16, 1100, 0, 1.0f, 0.0f},
        /* Narrow C and k over several blocks: blocks of more than MC rows. */
        {1700, 40, 600, 3, 1.0f, 0.5f},
        /* A conv's kernel gradient (288 x 64 over a long k): with A
         * transposed the kernel prefetches A's lines ahead of k, past the
         * block's and the matrix's end at the last steps. */
        {288, 64, 1100, 0, 1.0f, 0.0f},   {300, 64, 530, 4, 1.0f, 0.5f},
        /* One column or one row of C: eight chains in the lanes of a
         * vector, the last one partly empty, operands side by side or
         * gathered (linear regression's forward and kernel gradient; a
         * long k; a C too long to gather, which takes the blocked path). */
        {128, 1, 5, 0, 1.0f, 0.0f},       {5, 1, 128, 0, 1.0f, 0.0f},      {1, 300, 20, 2, 0.5f, 1.0f},
        {1, 1, 900, 3, 1.0f, -0.5f},      {61, 1, 64, 1, 2.0f, 0.0f},      {200, 1, 16, 0, 1.0f, 0.0f},
        {1, 13, 7, 0, 1.0f, 1.0f},
    };
    static const td_gemm_fma_isa isas[] = {TD_GEMM_FMA_PORTABLE, TD_GEMM_FMA_AVX2, TD_GEMM_FMA_AVX512};
    int paths = 0;
    for (size_t v = 0; v < sizeof isas / sizeof isas[0]; v++) {
        if (!td_cpu_gemm_own_fma_isa_runs(isas[v])) {
            cr_log_warn("this CPU cannot run the %s path: not compared", td_cpu_gemm_own_fma_isa_name(isas[v]));
            continue;
        }
        paths++;
        test_rng rng = {0xF3A1u};
        for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
            for (int form = 0; form < 4; form++) {
                operands o = make_operands(&rng, &cases[t], form);
                const td_gemm_params *g = &o.g;
                float *got = malloc(o.c_n * sizeof *got), *want = malloc(o.c_n * sizeof *want);
                cr_assert(got && want);
                memcpy(got, o.c0, o.c_n * sizeof *got);
                memcpy(want, o.c0, o.c_n * sizeof *want);
                cr_assert(td_cpu_gemm_own_fma_on(isas[v], g, got, o.a, o.b));
                rule(g, want, o.a, o.b);
                for (int64_t r = 0; r < g->m; r++) {
                    cr_assert(memcmp(got + r * g->ldc, want + r * g->ldc, (size_t)g->n * sizeof *got) == 0,
                              "%s path, case %zu form %d (%lld x %lld x %lld): row %lld differs",
                              td_cpu_gemm_own_fma_isa_name(isas[v]), t, form, (long long)g->m, (long long)g->n,
                              (long long)g->k, (long long)r);
                    for (int64_t j = 0; j < g->n; j++)
                        cr_assert(isfinite(got[r * g->ldc + j]), "%s path, case %zu form %d: NaN or inf in C",
                                  td_cpu_gemm_own_fma_isa_name(isas[v]), t, form);
                    /* The padding after each row is left alone. */
                    cr_assert(memcmp(got + r * g->ldc + g->n, o.c0 + r * g->ldc + g->n,
                                     (size_t)(g->ldc - g->n) * sizeof *got) == 0,
                              "case %zu form %d: padding of row %lld written", t, form, (long long)r);
                }
                free(got);
                free(want);
                free_operands(&o);
            }
    }
    cr_assert_geq(paths, 1);
}

/* The fused sums are not the deterministic GEMM's: with one rounding per
 * product saved, a 700-long sum differs somewhere in a 64 x 64 block. This
 * fails if the paths above ever compute a multiply and an add apart (the
 * rule's fmaf would then disagree too, but only where the test's C library
 * fuses). Both are close to the double-precision sums. */
Test(cpu_gemm_own_fma, fuses_and_stays_accurate)
{
    const fma_case fc = {64, 64, 700, 0, 1.0f, 0.0f};
    test_rng rng = {0xACC5u};
    operands o = make_operands(&rng, &fc, 0);
    const td_gemm_params *g = &o.g;
    float *fused = malloc(o.c_n * sizeof *fused), *apart = malloc(o.c_n * sizeof *apart);
    cr_assert(fused && apart);
    td_cpu_gemm_own_fma(g, fused, o.a, o.b);
    td_cpu_gemm_own(g, apart, o.a, o.b);
    int64_t differ = 0;
    double err_fused = 0, err_apart = 0, norm = 0;
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double exact = 0;
            for (int64_t p = 0; p < g->k; p++)
                exact += (double)op_a(g, o.a, i, p) * (double)op_b(g, o.b, p, j);
            const float f = fused[i * g->ldc + j], s = apart[i * g->ldc + j];
            differ += memcmp(&f, &s, sizeof f) != 0;
            err_fused += ((double)f - exact) * ((double)f - exact);
            err_apart += ((double)s - exact) * ((double)s - exact);
            norm += exact * exact;
        }
    cr_assert_gt(differ, 0, "the FMA GEMM gave the deterministic GEMM's bits everywhere: not fused?");
    cr_assert_lt(err_fused / norm, 1e-12, "FMA GEMM: normalised squared error %g", err_fused / norm);
    cr_assert_lt(err_apart / norm, 1e-12, "own GEMM: normalised squared error %g", err_apart / norm);
    free(fused);
    free(apart);
    free_operands(&o);
}

/* cpu_gemm.c's rule: TD_CPU_GEMM names an engine; unset (or not a name),
 * the FMA engine on a CPU with AVX-512F or AVX2 + FMA, else CBLAS where
 * the build has it, else the own GEMM. */
Test(cpu_gemm_own_fma, engine_rule)
{
    test_set_env("TD_CPU_GEMM", "own");
    cr_assert_eq(td_cpu_gemm_engine_chosen(), TD_CPU_GEMM_OWN);
    test_set_env("TD_CPU_GEMM", "own-fma");
    cr_assert_eq(td_cpu_gemm_engine_chosen(), TD_CPU_GEMM_OWN_FMA);
    const bool fma_cpu = td_cpu_gemm_own_fma_isa_runs(TD_GEMM_FMA_AVX512) ||
                         td_cpu_gemm_own_fma_isa_runs(TD_GEMM_FMA_AVX2);
#ifdef TD_HAVE_CBLAS
    const td_cpu_gemm_engine fallback = TD_CPU_GEMM_CBLAS;
    test_set_env("TD_CPU_GEMM", "cblas");
    cr_assert_eq(td_cpu_gemm_engine_chosen(), TD_CPU_GEMM_CBLAS);
#else
    const td_cpu_gemm_engine fallback = TD_CPU_GEMM_OWN;
#endif
    const td_cpu_gemm_engine by_default = fma_cpu ? TD_CPU_GEMM_OWN_FMA : fallback;
    test_set_env("TD_CPU_GEMM", NULL);
    cr_assert_eq(td_cpu_gemm_engine_chosen(), by_default, "default engine %s",
                 td_cpu_gemm_engine_name(td_cpu_gemm_engine_chosen()));
    test_set_env("TD_CPU_GEMM", "fastest");
    cr_assert_eq(td_cpu_gemm_engine_chosen(), by_default);
    test_set_env("TD_CPU_GEMM", NULL);
    cr_assert_str_eq(td_cpu_gemm_engine_name(TD_CPU_GEMM_OWN_FMA), "own-fma");
    cr_assert_eq(td_cpu_gemm_own_fma_best_isa() != TD_GEMM_FMA_PORTABLE, fma_cpu);
}
