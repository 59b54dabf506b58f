/* tandem's own GEMM (backends/cpu/cpu_gemm_own.c) against its rule: the
 * blocked, packed path and the matrix-vector one give bit for bit the
 * element-by-element sums, for
 * every transpose, padded leading dimensions, edges that cut the MR x NR
 * micro-tiles and the MC / NC / KC blocks, and k spanning several
 * k-blocks; beta == 0 does not read C; k == 0 scales C. The kernel
 * conformance suite checks the same GEMM against the reference within
 * tolerance (TD_CPU_GEMM=own, tests/kernels). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_own.h"
#include "engine_test_util.h"

typedef struct own_case {
    int64_t m, n, k, pad;
    float alpha, beta;
} own_case;

Test(cpu_gemm_own, blocked_is_bitwise_the_unpacked_sums)
{
    static const own_case cases[] = {
        {1, 1, 1, 0, 1.0f, 0.0f},      {7, 17, 5, 3, 1.0f, 0.0f},      {97, 513, 257, 0, 0.5f, 1.0f},
        {200, 70, 600, 5, -1.0f, 0.25f}, {128, 10, 128, 0, 1.0f, 0.0f}, {13, 1100, 31, 2, 2.0f, -1.0f},
        /* One column or one row of C, which skips the blocks (linear
         * regression's forward and kernel gradient, a long k, partial
         * groups of eight). */
        {128, 1, 5, 0, 1.0f, 0.0f},    {5, 1, 128, 0, 1.0f, 0.0f},     {1, 300, 20, 2, 0.5f, 1.0f},
        {1, 1, 900, 3, 1.0f, -0.5f},   {61, 1, 64, 1, 2.0f, 0.0f},     {1, 13, 7, 0, 1.0f, 1.0f},
    };
    test_rng rng = {0x0A11u};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int form = 0; form < 4; form++) {
            const own_case *oc = &cases[t];
            td_gemm_params g = {.trans_a = form & 1, .trans_b = form >> 1, .m = oc->m, .n = oc->n, .k = oc->k,
                                .alpha = oc->alpha, .beta = oc->beta};
            g.lda = (g.trans_a ? g.m : g.k) + oc->pad;
            g.ldb = (g.trans_b ? g.k : g.n) + oc->pad;
            g.ldc = g.n + oc->pad;
            const size_t a_n = (size_t)((g.trans_a ? g.k : g.m) * g.lda);
            const size_t b_n = (size_t)((g.trans_b ? g.n : g.k) * g.ldb), c_n = (size_t)(g.m * g.ldc);
            float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b);
            float *blocked = malloc(c_n * sizeof *blocked), *sums = malloc(c_n * sizeof *sums);
            cr_assert(a && b && blocked && sums);
            test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
            test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
            test_fill_uniform(&rng, blocked, c_n, -1.0f, 1.0f);
            if (g.beta == 0.0f)
                for (size_t i = 0; i < c_n; i++)
                    blocked[i] = NAN; /* must not be read */
            memcpy(sums, blocked, c_n * sizeof *sums);
            td_cpu_gemm_own(&g, blocked, a, b);
            td_cpu_gemm_own_unpacked(&g, sums, a, b);
            for (int64_t r = 0; r < g.m; r++) {
                cr_assert(memcmp(blocked + r * g.ldc, sums + r * g.ldc, (size_t)g.n * sizeof *sums) == 0,
                          "case %zu form %d (%lld x %lld x %lld): row %lld differs", t, form, (long long)g.m,
                          (long long)g.n, (long long)g.k, (long long)r);
                for (int64_t j = 0; j < g.n; j++)
                    cr_assert(isfinite(blocked[r * g.ldc + j]), "case %zu form %d: NaN or inf in C", t, form);
            }
            free(a);
            free(b);
            free(blocked);
            free(sums);
        }
}

Test(cpu_gemm_own, k_zero_scales_c_and_beta_zero_clears_it)
{
    float c[6] = {1, 2, 3, 4, 5, NAN};
    td_gemm_params g = {.m = 2, .n = 3, .k = 0, .lda = 1, .ldb = 3, .ldc = 3, .alpha = 1.0f, .beta = 2.0f};
    td_cpu_gemm_own(&g, c, NULL, NULL);
    cr_assert(c[0] == 2.0f && c[4] == 10.0f && isnan(c[5]));
    g.beta = 0.0f;
    td_cpu_gemm_own(&g, c, NULL, NULL);
    for (int i = 0; i < 6; i++)
        cr_assert(c[i] == 0.0f);
}

/* Random shapes, forms, padding and scalars, beta == 0 one time in three:
 * the whole of C, padding included, must be the unpacked sums' bits (so
 * the blocked path writes nothing outside the m x n it owns). */
Test(cpu_gemm_own, random_shapes_match_the_unpacked_sums_everywhere_in_c)
{
    test_rng rng = {0x5EEDu};
    for (int t = 0; t < 100; t++) {
        td_gemm_params g = {.trans_a = t & 1, .trans_b = (t >> 1) & 1};
        g.m = 1 + (int64_t)(test_rng_next(&rng) % 130);
        g.n = 1 + (int64_t)(test_rng_next(&rng) % 600);
        g.k = (int64_t)(test_rng_next(&rng) % 600);
        const int64_t pad = (int64_t)(test_rng_next(&rng) % 3);
        float scalars[2];
        test_fill_uniform(&rng, scalars, 2, -2.0f, 2.0f);
        g.alpha = scalars[0];
        g.beta = t % 3 == 0 ? 0.0f : scalars[1];
        g.lda = (g.trans_a ? g.m : g.k) + pad + 1;
        g.ldb = (g.trans_b ? g.k : g.n) + pad + 1;
        g.ldc = g.n + pad;
        const size_t a_n = (size_t)((g.trans_a ? g.k : g.m) * g.lda) + 1;
        const size_t b_n = (size_t)((g.trans_b ? g.n : g.k) * g.ldb) + 1, c_n = (size_t)(g.m * g.ldc);
        float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b);
        float *blocked = malloc(c_n * sizeof *blocked), *sums = malloc(c_n * sizeof *sums);
        cr_assert(a && b && blocked && sums);
        test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, blocked, c_n, -1.0f, 1.0f);
        if (g.beta == 0.0f)
            for (size_t i = 0; i < c_n; i++)
                blocked[i] = NAN;
        memcpy(sums, blocked, c_n * sizeof *sums);
        td_cpu_gemm_own(&g, blocked, a, b);
        td_cpu_gemm_own_unpacked(&g, sums, a, b);
        cr_assert(memcmp(blocked, sums, c_n * sizeof *sums) == 0,
                  "case %d (%lld x %lld x %lld, form %d, alpha %g, beta %g) differs", t, (long long)g.m,
                  (long long)g.n, (long long)g.k, t & 3, (double)g.alpha, (double)g.beta);
        free(a);
        free(b);
        free(blocked);
        free(sums);
    }
}
