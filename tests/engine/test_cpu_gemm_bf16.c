/* The CPU backend's bf16 GEMM (backends/cpu/cpu_gemm_bf16.c) against its
 * contract (td_kernel.h): td_bf16_round's rounding; the portable kernel
 * bit for bit the element-by-element rule on rounded inputs; the
 * AVX512_BF16 kernel (where this CPU has it) bitwise the same for any split
 * of the rows of C, within the fp32 GEMM's bound of the rule, and visibly
 * not the fp32 product. The kernel conformance suite holds every backend
 * to the reference the same way (tests/kernels, cases_gemm.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_bf16.h"
#include "cpu_gemm_own.h"
#include "engine_test_util.h"

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

Test(cpu_gemm_bf16, rounding_is_to_nearest_even_on_the_bits)
{
    cr_assert_eq(bits_of(td_bf16_round(1.0f)), 0x3f800000u);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1. */
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x3f808000u))), 0x3f800000u);
    /* 1 + 3 x 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up. */
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x3f818000u))), 0x3f820000u);
    /* just past halfway rounds up, just below rounds down */
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x3f808001u))), 0x3f810000u);
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x3f807fffu))), 0x3f800000u);
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0xbf808001u))), 0xbf810000u, "the sign does not change it");
    /* the largest float rounds past bfloat16's largest value: infinity */
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x7f7fffffu))), 0x7f800000u);
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x7f7f0000u))), 0x7f7f0000u);
    cr_assert_eq(bits_of(td_bf16_round(INFINITY)), 0x7f800000u);
    /* a NaN whose payload lies only in the dropped bits stays a NaN */
    cr_assert(isnan(td_bf16_round(from_bits(0x7f800001u))));
    cr_assert(isnan(td_bf16_round(from_bits(0xffffffffu))));
    /* subnormals round like any other value */
    cr_assert_eq(bits_of(td_bf16_round(from_bits(0x00018000u))), 0x00020000u);
}

typedef struct bf16_case {
    int64_t m, n, k, pad;
    float alpha, beta;
} bf16_case;

/* Shapes that cut the micro-tiles (12 x 32), the blocks (192 x 256, k 384),
 * odd k (a half-empty last pair), several k-blocks, and a 3x3
 * convolution's k = 9 and 288. */
static const bf16_case cases[] = {
    {1, 1, 1, 0, 1.0f, 0.0f},       {7, 17, 5, 3, 1.0f, 0.0f},       {97, 513, 257, 0, 0.5f, 1.0f},
    {200, 70, 801, 5, -1.0f, 0.25f}, {128, 10, 128, 0, 1.0f, 0.0f},   {13, 300, 31, 2, 2.0f, -1.0f},
    {400, 32, 9, 0, 1.0f, 0.0f},     {385, 64, 288, 1, 1.0f, 0.0f},   {288, 64, 1000, 0, 1.0f, 0.0f},
};

typedef struct operands {
    td_gemm_params g;
    float *a, *b, *c0; /* c0: C before the call */
    size_t a_n, b_n, c_n;
} operands;

static operands make_operands(test_rng *rng, const bf16_case *bc, int form)
{
    operands o = {.g = {.trans_a = form & 1, .trans_b = form >> 1, .m = bc->m, .n = bc->n, .k = bc->k,
                        .alpha = bc->alpha, .beta = bc->beta, .precision = TD_GEMM_BF16}};
    td_gemm_params *g = &o.g;
    g->lda = (g->trans_a ? g->m : g->k) + bc->pad;
    g->ldb = (g->trans_b ? g->k : g->n) + bc->pad;
    g->ldc = g->n + bc->pad;
    o.a_n = (size_t)((g->trans_a ? g->k : g->m) * g->lda);
    o.b_n = (size_t)((g->trans_b ? g->n : g->k) * g->ldb);
    o.c_n = (size_t)(g->m * g->ldc);
    o.a = malloc(o.a_n * sizeof *o.a);
    o.b = malloc(o.b_n * sizeof *o.b);
    o.c0 = malloc(o.c_n * sizeof *o.c0);
    cr_assert(o.a && o.b && o.c0);
    test_fill_uniform(rng, o.a, o.a_n, -1.0f, 1.0f);
    test_fill_uniform(rng, o.b, o.b_n, -1.0f, 1.0f);
    test_fill_uniform(rng, o.c0, o.c_n, -1.0f, 1.0f);
    if (g->beta == 0.0f)
        for (size_t i = 0; i < o.c_n; i++)
            o.c0[i] = NAN; /* must not be read */
    return o;
}

static void free_operands(operands *o)
{
    free(o->a);
    free(o->b);
    free(o->c0);
}

static float *run(const operands *o, td_cpu_bf16_kernel kernel)
{
    float *c = malloc(o->c_n * sizeof *c);
    cr_assert(c);
    memcpy(c, o->c0, o->c_n * sizeof *c);
    cr_assert(td_cpu_gemm_bf16(&o->g, c, o->a, o->b, kernel, NULL));
    return c;
}

Test(cpu_gemm_bf16, portable_is_bitwise_the_rule_on_rounded_inputs)
{
    test_rng rng = {0xBF16u};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int form = 0; form < 4; form++) {
            operands o = make_operands(&rng, &cases[t], form);
            float *got = run(&o, TD_CPU_BF16_PORTABLE);
            float *want = malloc(o.c_n * sizeof *want);
            cr_assert(want);
            memcpy(want, o.c0, o.c_n * sizeof *want);
            td_cpu_gemm_bf16_unpacked(&o.g, want, o.a, o.b);
            for (size_t i = 0; i < o.c_n; i++)
                cr_assert(bits_of(got[i]) == bits_of(want[i]) || (isnan(got[i]) && isnan(want[i])),
                          "case %zu form %d: element %zu is %a, the rule gives %a", t, form, i, (double)got[i],
                          (double)want[i]);
            free(got);
            free(want);
            free_operands(&o);
        }
}

/* Normalised MSE of got against want over the m x n outputs. */
static double nmse(const operands *o, const float *got, const float *want)
{
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < o->g.m; i++)
        for (int64_t j = 0; j < o->g.n; j++) {
            const double w = want[i * o->g.ldc + j], d = got[i * o->g.ldc + j] - w;
            err += d * d;
            norm += w * w;
        }
    return norm > 0.0 ? err / norm : err;
}

Test(cpu_gemm_bf16, native_is_the_rule_within_the_fp32_bound_and_not_the_fp32_product)
{
    if (!td_cpu_gemm_bf16_native())
        cr_skip_test("this CPU has no AVX512_BF16 (or TD_CPU_BF16=portable)");
    test_rng rng = {0xD07u};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
        for (int form = 0; form < 4; form++) {
            operands o = make_operands(&rng, &cases[t], form);
            float *got = run(&o, TD_CPU_BF16_FASTEST);
            float *rule = run(&o, TD_CPU_BF16_PORTABLE);
            float *fp32 = malloc(o.c_n * sizeof *fp32);
            cr_assert(fp32);
            memcpy(fp32, o.c0, o.c_n * sizeof *fp32);
            td_gemm_params g32 = o.g;
            g32.precision = TD_GEMM_FP32;
            td_cpu_gemm_own(&g32, fp32, o.a, o.b);
            const double e = nmse(&o, got, rule);
            cr_assert(e < 1e-10, "case %zu form %d: normalised MSE %g against the rule", t, form, e);
            /* Rounding the inputs to 8 significant bits moves a sum of k
             * products by about 2^-9 relative: far past that bound. */
            const double from_fp32 = nmse(&o, got, fp32);
            cr_assert(from_fp32 > 1e-8, "case %zu form %d: normalised MSE %g from the fp32 product", t, form,
                      from_fp32);
            /* Padding of C (ldc > n) keeps its bits. */
            for (int64_t i = 0; i < o.g.m; i++)
                for (int64_t j = o.g.n; j < o.g.ldc; j++)
                    cr_assert_eq(bits_of(got[i * o.g.ldc + j]), bits_of(o.c0[i * o.g.ldc + j]));
            free(got);
            free(rule);
            free(fp32);
            free_operands(&o);
        }
}

/* The host pool splits a GEMM into tiles of rows and the cancel tiles
 * split it again: each piece must give the rows' bits of one call. Here
 * the pieces are deliberately unaligned (1, 11, 13, 190 rows...). */
Test(cpu_gemm_bf16, any_split_of_the_rows_gives_the_bits_of_one_call)
{
    test_rng rng = {0x5A17u};
    static const int64_t pieces[] = {1, 11, 13, 190, 7, 64};
    for (int kernel = 0; kernel < 2; kernel++)
        for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
            for (int form = 0; form < 4; form++) {
                operands o = make_operands(&rng, &cases[t], form);
                float *whole = run(&o, (td_cpu_bf16_kernel)kernel);
                float *split = malloc(o.c_n * sizeof *split);
                cr_assert(split);
                memcpy(split, o.c0, o.c_n * sizeof *split);
                int64_t rows;
                for (int64_t i = 0, p = 0; i < o.g.m; i += rows, p++) {
                    rows = pieces[p % 6] < o.g.m - i ? pieces[p % 6] : o.g.m - i;
                    td_gemm_params part = o.g;
                    part.m = rows;
                    const float *ai = o.g.trans_a ? o.a + i : o.a + i * o.g.lda;
                    cr_assert(td_cpu_gemm_bf16(&part, split + i * o.g.ldc, ai, o.b, (td_cpu_bf16_kernel)kernel, NULL));
                }
                for (size_t i = 0; i < o.c_n; i++)
                    cr_assert(bits_of(split[i]) == bits_of(whole[i]) || (isnan(split[i]) && isnan(whole[i])),
                              "kernel %d case %zu form %d: element %zu is %a split, %a whole", kernel, t, form, i,
                              (double)split[i], (double)whole[i]);
                free(whole);
                free(split);
                free_operands(&o);
            }
}

Test(cpu_gemm_bf16, k_zero_scales_c_and_beta_zero_clears_it)
{
    for (int kernel = 0; kernel < 2; kernel++) {
        float c[6] = {1, 2, 3, 4, 5, NAN};
        td_gemm_params g = {.m = 2, .n = 3, .k = 0, .lda = 1, .ldb = 3, .ldc = 3, .alpha = 1.0f, .beta = 2.0f,
                            .precision = TD_GEMM_BF16};
        cr_assert(td_cpu_gemm_bf16(&g, c, NULL, NULL, (td_cpu_bf16_kernel)kernel, NULL));
        cr_assert(c[0] == 2.0f && c[4] == 10.0f && isnan(c[5]));
        g.beta = 0.0f;
        cr_assert(td_cpu_gemm_bf16(&g, c, NULL, NULL, (td_cpu_bf16_kernel)kernel, NULL));
        for (int i = 0; i < 6; i++)
            cr_assert(c[i] == 0.0f);
    }
}

Test(cpu_gemm_bf16, a_set_cancel_flag_stops_before_the_first_tile)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {7, 7, 7, 7};
    td_gemm_params g = {.m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .alpha = 1.0f,
                        .precision = TD_GEMM_BF16};
    bool cancel = true;
    cr_assert_not(td_cpu_gemm_bf16(&g, c, a, b, TD_CPU_BF16_FASTEST, &cancel));
    cr_assert(c[0] == 7.0f && c[3] == 7.0f);
    cancel = false;
    cr_assert(td_cpu_gemm_bf16(&g, c, a, b, TD_CPU_BF16_FASTEST, &cancel));
    cr_assert(c[0] == 1.0f && c[1] == 2.0f && c[2] == 3.0f && c[3] == 4.0f);
}

/* NaN stays NaN, infinity stays infinity, and a finite value past
 * bfloat16's range rounds to infinity, in packing as in the rule: every
 * output that the rule makes non-finite is the same non-finite value, in
 * every form (each packs A and B its own way). */
Test(cpu_gemm_bf16, non_finite_inputs_give_the_rules_non_finite_outputs)
{
    test_rng rng = {0x1Fu};
    const bf16_case bc = {40, 70, 45, 1, 1.0f, 0.0f};
    for (int kernel = 0; kernel < 2; kernel++)
        for (int form = 0; form < 4; form++) {
            operands o = make_operands(&rng, &bc, form);
            o.a[3] = from_bits(0x7f800001u); /* a NaN whose payload rounding alone would drop */
            o.a[o.a_n / 2] = INFINITY;
            o.b[7] = -INFINITY;
            o.b[o.b_n - 5] = from_bits(0x7f7fffffu); /* finite, rounds to infinity */
            float *got = run(&o, (td_cpu_bf16_kernel)kernel);
            float *want = malloc(o.c_n * sizeof *want);
            cr_assert(want);
            memcpy(want, o.c0, o.c_n * sizeof *want);
            td_cpu_gemm_bf16_unpacked(&o.g, want, o.a, o.b);
            size_t non_finite = 0;
            for (int64_t i = 0; i < o.g.m; i++)
                for (int64_t j = 0; j < o.g.n; j++) {
                    const float g = got[i * o.g.ldc + j], w = want[i * o.g.ldc + j];
                    non_finite += !isfinite(w);
                    cr_assert(isfinite(w) ? isfinite(g) : (isnan(w) ? isnan(g) : g == w),
                              "kernel %d form %d: C[%lld][%lld] is %g, the rule gives %g", kernel, form, (long long)i,
                              (long long)j, (double)g, (double)w);
                }
            cr_assert_gt(non_finite, 0, "the case should make some outputs non-finite");
            free(got);
            free(want);
            free_operands(&o);
        }
}
