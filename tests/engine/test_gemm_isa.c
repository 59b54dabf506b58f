/* The same source, other vector sets, the same bits: backends/cpu/
 * cpu_gemm_own.c and tandem's own exp / log / erf (isa_fixed_math.c) are
 * built here three times more (tests/engine/meson.build): for baseline
 * x86-64 (SSE2, no SSE3), for Haswell (AVX2, 256-bit vectors) and for
 * Skylake-AVX512 on 512-bit vectors (FMA available to the compiler in
 * both, which -ffp-contract=off keeps from fusing), each
 * without the library's run-time dispatch (TD_CPU_GEMM_OWN_ONE_ISA), under
 * renamed symbols. Each element's sum is one vector lane or one scalar,
 * in the same order, so all of them -- and the library's own build, which
 * picks its AVX-512, AVX2 or baseline copy at load time -- must agree bit
 * for bit. The AVX2 and AVX-512 builds run only on CPUs that have them. (The
 * test tools_gemm_own_has_no_fma checks the AVX-512 build's code for
 * fused multiply-adds.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm_own.h"
#include "engine_test_util.h"

void td_cpu_gemm_own_baseline(const td_gemm_params *g, float *c, const float *a, const float *b);
void td_cpu_gemm_own_avx2(const td_gemm_params *g, float *c, const float *a, const float *b);
void td_cpu_gemm_own_avx512(const td_gemm_params *g, float *c, const float *a, const float *b);
void td_isa_fixed_math_baseline(const float *x, float *exp_out, float *log_out, float *erf_out, int64_t n);
void td_isa_fixed_math_avx2(const float *x, float *exp_out, float *log_out, float *erf_out, int64_t n);
void td_isa_fixed_math_avx512(const float *x, float *exp_out, float *log_out, float *erf_out, int64_t n);

static bool have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static bool have_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

typedef void gemm_fn(const td_gemm_params *g, float *c, const float *a, const float *b);

Test(gemm_isa, every_build_gives_the_library_bits)
{
    static const int64_t shapes[][3] = {{1, 1, 1},     {5, 15, 3},     {7, 17, 257},  {97, 513, 255},
                                        {193, 31, 769}, {130, 600, 513}, {33, 70, 9}, {300, 47, 1024},
                                        /* matrix-vector products: the path without blocks */
                                        {128, 1, 5},    {5, 1, 128},    {1, 300, 20}};
    struct build {
        const char *name;
        gemm_fn *fn;
        bool runs;
    } builds[3] = {{"baseline x86-64", td_cpu_gemm_own_baseline, true},
                   {"Haswell (AVX2)", td_cpu_gemm_own_avx2, have_avx2()},
                   {"Skylake-AVX512", td_cpu_gemm_own_avx512, have_avx512()}};
    for (int v = 0; v < 3; v++)
        if (!builds[v].runs)
            cr_log_warn("this CPU cannot run the %s build: not compared", builds[v].name);
    test_rng rng = {0x15Au};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++)
        for (int form = 0; form < 4; form++) {
            td_gemm_params g = {.trans_a = form & 1, .trans_b = form >> 1, .m = shapes[t][0], .n = shapes[t][1],
                                .k = shapes[t][2], .alpha = 1.0f, .beta = t % 2 ? 0.0f : 0.5f};
            g.lda = g.trans_a ? g.m : g.k;
            g.ldb = g.trans_b ? g.k : g.n;
            g.ldc = g.n;
            const size_t a_n = (size_t)(g.m * g.k), b_n = (size_t)(g.k * g.n), c_n = (size_t)(g.m * g.n);
            float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b);
            float *library = malloc(c_n * sizeof *library), *other = malloc(c_n * sizeof *other);
            cr_assert(a && b && library && other);
            test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
            test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
            for (size_t i = 0; i < c_n; i++)
                library[i] = (float)i * 0.001f;
            td_cpu_gemm_own(&g, library, a, b);
            for (int v = 0; v < 3; v++) {
                if (!builds[v].runs)
                    continue;
                for (size_t i = 0; i < c_n; i++)
                    other[i] = (float)i * 0.001f;
                builds[v].fn(&g, other, a, b);
                cr_assert(memcmp(library, other, c_n * sizeof(float)) == 0,
                          "%lld x %lld x %lld form %d: the %s build differs from the library's", (long long)g.m,
                          (long long)g.n, (long long)g.k, form, builds[v].name);
            }
            free(a);
            free(b);
            free(library);
            free(other);
        }
}

typedef void math_fn(const float *x, float *exp_out, float *log_out, float *erf_out, int64_t n);

Test(gemm_isa, own_exp_log_erf_give_the_same_bits_on_every_build)
{
    enum { N = 1 << 16 };
    math_fn *fns[3] = {td_isa_fixed_math_baseline, td_isa_fixed_math_avx2, td_isa_fixed_math_avx512};
    const bool runs[3] = {true, have_avx2(), have_avx512()};
    static const char *builds[3] = {"baseline", "AVX2", "AVX-512"}, *names[3] = {"exp", "log", "erf"};
    float *x = malloc(N * sizeof *x), *out[3][3];
    cr_assert(x);
    /* spread over the whole float line: every 65537th bit pattern */
    for (uint32_t i = 0; i < N; i++) {
        const uint32_t bits = i * 65537u;
        memcpy(&x[i], &bits, sizeof bits);
    }
    for (int v = 0; v < 3; v++) {
        for (int f = 0; f < 3; f++) {
            out[v][f] = malloc(N * sizeof(float));
            cr_assert(out[v][f]);
        }
        if (runs[v])
            fns[v](x, out[v][0], out[v][1], out[v][2], N);
    }
    for (int v = 1; v < 3; v++)
        for (int f = 0; f < 3 && runs[v]; f++)
            for (uint32_t i = 0; i < N; i++)
                cr_assert(memcmp(&out[0][f][i], &out[v][f][i], sizeof(float)) == 0 ||
                              (isnan(out[0][f][i]) && isnan(out[v][f][i])),
                          "%s(%g): %.9g baseline, %.9g %s", names[f], (double)x[i], (double)out[0][f][i],
                          (double)out[v][f][i], builds[v]);
    free(x);
    for (int v = 0; v < 3; v++)
        for (int f = 0; f < 3; f++)
            free(out[v][f]);
}
