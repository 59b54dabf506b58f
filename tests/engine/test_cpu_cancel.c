/* Cancelling a CPU device (td_backend_ops.cancel): its GEMMs run in tiles
 * of rows (backends/cpu/cpu_gemm.c) that give bitwise the single call's
 * results, on CBLAS (in a build with one) and on tandem's own GEMMs (in
 * every build: the deterministic one a -Dblas=none build runs, and the FMA
 * one, the default on CPUs with FMA), a cancel stops a long GEMM within a tile, and a job that
 * outlasts its timeout is cancelled when it is fenced off, so that the
 * next call and td_context_destroy neither wait for the whole kernel nor
 * leave anything allocated for a worker still inside it. */
#ifdef TD_HAVE_CBLAS
#include <cblas.h>
#endif
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cpu_gemm.h"
#include "cpu_gemm_bf16.h"
#include "cpu_gemm_own.h"
#include "cpu_gemm_own_fma.h"
#include "cpu_split.h"
#include "engine_test_util.h"
#include "td_context_state.h"
#include "td_mesh_internal.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What the CPU backend's open does: with more BLAS threads, a single call
 * splits its rows between them at places of OpenBLAS's choosing, and the
 * comparison below would be of threads, not of tiles. */
extern void openblas_set_num_threads(int) __attribute__((weak));

/* One untiled call of the engine: what the tiles and parts must match. */
static void one_call(td_cpu_gemm_engine engine, const td_gemm_params *g, float *c, const float *a, const float *b)
{
#ifdef TD_HAVE_CBLAS
    if (engine == TD_CPU_GEMM_CBLAS) {
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                    (int)g->m, (int)g->n, (int)g->k, g->alpha, a, (int)g->lda, b, (int)g->ldb, g->beta, c,
                    (int)g->ldc);
        return;
    }
#endif
    if (engine == TD_CPU_GEMM_OWN_FMA) {
        td_cpu_gemm_own_fma(g, c, a, b);
        return;
    }
    cr_assert_eq(engine, TD_CPU_GEMM_OWN);
    td_cpu_gemm_own(g, c, a, b);
}

typedef struct gemm_case {
    int64_t m, n, k;
    int32_t trans_a, trans_b;
    int64_t lda_pad, ldc_pad; /* extra elements per stored row */
    float alpha, beta;
} gemm_case;

/* Shapes of MLP layers and their two gradients (784-512, batch 2000), a
 * square accumulating one, strided A and C with a remainder tile, a
 * narrow C cut into big tiles, and a 3x3 convolution of 32 channels into
 * 64 over 64 images of 28 x 28 (patches x kernel) with its input gradient:
 * each is split, and each tiled result must be the single call's, bit for
 * bit. */
static void check_tiles_are_one_call(td_cpu_gemm_engine engine)
{
    static const gemm_case cases[] = {
        {2000, 512, 784, 0, 0, 0, 0, 1.0f, 0.0f},  {784, 512, 2000, 1, 0, 0, 0, 1.0f, 0.0f},
        {2000, 784, 512, 0, 1, 0, 0, 1.0f, 0.0f},  {1000, 1000, 1000, 1, 1, 0, 0, 0.5f, 1.0f},
        {777, 300, 4096, 0, 0, 4, 20, 1.0f, 0.0f}, {5000, 64, 1024, 0, 0, 0, 0, -2.0f, 0.25f},
        {50176, 64, 288, 0, 0, 0, 0, 1.0f, 0.0f},  {50176, 288, 64, 0, 1, 0, 0, 1.0f, 0.0f},
    };
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
    test_rng rng = {0xC0FFEEull};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const gemm_case *gc = &cases[t];
        td_gemm_params g = {.trans_a = gc->trans_a, .trans_b = gc->trans_b, .m = gc->m, .n = gc->n, .k = gc->k,
                            .alpha = gc->alpha, .beta = gc->beta};
        /* A stored m x k (k x m transposed), B k x n (n x k). */
        g.lda = (gc->trans_a ? gc->m : gc->k) + gc->lda_pad;
        g.ldb = gc->trans_b ? gc->k : gc->n;
        g.ldc = gc->n + gc->ldc_pad;
        const int64_t a_rows = gc->trans_a ? gc->k : gc->m, b_rows = gc->trans_b ? gc->n : gc->k;
        const size_t a_n = (size_t)(a_rows * g.lda), b_n = (size_t)(b_rows * g.ldb), c_n = (size_t)(gc->m * g.ldc);
        float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b);
        float *one = malloc(c_n * sizeof *one), *tiled = malloc(c_n * sizeof *tiled);
        cr_assert(a && b && one && tiled);
        test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, one, c_n, -1.0f, 1.0f);
        memcpy(tiled, one, c_n * sizeof *one);

        const int64_t tile = td_cpu_gemm_tile_rows(&g);
        cr_assert_lt(tile, g.m, "case %zu (%lld x %lld x %lld) is not split", t, (long long)g.m, (long long)g.n,
                     (long long)g.k);
        cr_assert_eq(tile % TD_CPU_GEMM_TILE_ROWS, 0, "case %zu: tiles of %lld rows", t, (long long)tile);
        one_call(engine, &g, one, a, b);
        cr_assert(td_cpu_gemm(&g, tiled, a, b, engine, NULL));
        for (int64_t r = 0; r < g.m; r++)
            cr_assert(memcmp(one + r * g.ldc, tiled + r * g.ldc, (size_t)g.n * sizeof *one) == 0,
                      "case %zu (%lld x %lld x %lld, tiles of %lld rows): row %lld differs", t, (long long)g.m,
                      (long long)g.n, (long long)g.k, (long long)tile, (long long)r);
        /* The padding of C is not touched. */
        for (int64_t r = 0; r < g.m; r++)
            cr_assert(memcmp(one + r * g.ldc + g.n, tiled + r * g.ldc + g.n, (size_t)gc->ldc_pad * sizeof *one) == 0);
        free(a);
        free(b);
        free(one);
        free(tiled);
    }
}

/* The host pool's GEMM parts (td_cpu_gemm_split_part: cpu_split.c's on
 * CBLAS): a call cut into 2 to 4 parts at multiples of 192 rows on CBLAS,
 * the last taking the rest (a 256-row call is 192 + 64), or into even runs
 * of 12 rows on the own GEMMs, each part run as its own tiled call: bit for
 * bit the single call, for the GPT's shapes (124M's 256-row forward, the character
 * model's 768-row one and their weight gradients) and awkward ones. */
static void check_parts_are_one_call(td_cpu_gemm_engine engine)
{
    static const gemm_case cases[] = {
        {256, 2304, 768, 0, 0, 0, 0, 1.0f, 0.0f}, {256, 768, 3072, 0, 1, 0, 0, 1.0f, 0.0f},
        {768, 3072, 256, 1, 0, 0, 0, 1.0f, 1.0f}, {768, 384, 128, 0, 0, 0, 0, 1.0f, 0.0f},
        {512, 128, 768, 1, 0, 0, 0, 1.0f, 1.0f},  {500, 300, 64, 0, 0, 4, 20, 0.5f, 0.25f},
        {777, 256, 128, 1, 1, 0, 0, 1.0f, 0.0f},  {2000, 512, 784, 0, 0, 0, 0, 1.0f, 0.0f},
        /* MLP layers at batch 128 and 256 and their gradients: parts for
         * the own GEMMs only (CBLAS keeps them whole or 192 + 64). */
        {128, 512, 784, 0, 0, 0, 0, 1.0f, 0.0f},  {256, 512, 512, 0, 1, 0, 0, 1.0f, 0.0f},
        {130, 10, 512, 0, 0, 3, 2, 1.0f, 0.5f},
    };
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
    test_rng rng = {0xB17E5ull};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const gemm_case *gc = &cases[t];
        td_kernel_call call = {.kernel = TD_KERNEL_GEMM};
        td_gemm_params *g = &call.p.gemm;
        *g = (td_gemm_params){.trans_a = gc->trans_a, .trans_b = gc->trans_b, .m = gc->m, .n = gc->n, .k = gc->k,
                              .alpha = gc->alpha, .beta = gc->beta};
        g->lda = (gc->trans_a ? gc->m : gc->k) + gc->lda_pad;
        g->ldb = gc->trans_b ? gc->k : gc->n;
        g->ldc = gc->n + gc->ldc_pad;
        const int64_t a_rows = gc->trans_a ? gc->k : gc->m, b_rows = gc->trans_b ? gc->n : gc->k;
        const size_t a_n = (size_t)(a_rows * g->lda), b_n = (size_t)(b_rows * g->ldb), c_n = (size_t)(gc->m * g->ldc);
        float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b);
        float *one = malloc(c_n * sizeof *one), *parted = malloc(c_n * sizeof *parted);
        cr_assert(a && b && one && parted);
        test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
        float *c0 = malloc(c_n * sizeof *c0);
        cr_assert(c0);
        test_fill_uniform(&rng, c0, c_n, -1.0f, 1.0f);
        memcpy(one, c0, c_n * sizeof *one);
        one_call(engine, g, one, a, b);
        /* CBLAS: whole 192-row tiles; the own GEMMs: even runs of 12 rows. */
        const int64_t granule = engine == TD_CPU_GEMM_CBLAS ? TD_CPU_GEMM_TILE_ROWS : 12;
        const int64_t most = (gc->m + granule - 1) / granule;
        cr_assert_eq(td_cpu_gemm_split_parts(&call, engine, 4, true), most < 4 ? most : 4);
        for (int64_t parts = 2; parts <= 4 && parts <= most; parts++) {
            memcpy(parted, c0, c_n * sizeof *parted);
            int64_t rows = 0;
            for (int64_t part = 0; part < parts; part++) {
                td_kernel_call sub;
                td_cpu_gemm_split_part(&call, engine, parts, part, &sub);
                cr_assert_eq(sub.out.offset % (uint64_t)(granule * g->ldc), 0,
                             "case %zu: part %lld starts inside a %lld-row granule", t, (long long)part,
                             (long long)granule);
                if (engine != TD_CPU_GEMM_CBLAS)
                    cr_assert_leq(sub.p.gemm.m, (gc->m + parts - 1) / parts + granule,
                                  "case %zu: part %lld of %lld has %lld of %lld rows", t, (long long)part,
                                  (long long)parts, (long long)sub.p.gemm.m, (long long)gc->m);
                rows += sub.p.gemm.m;
                cr_assert(td_cpu_gemm(&sub.p.gemm, parted + sub.out.offset, a + sub.a.offset, b + sub.b.offset, engine,
                                      NULL));
            }
            cr_assert_eq(rows, g->m, "case %zu: %lld parts cover %lld of %lld rows", t, (long long)parts,
                         (long long)rows, (long long)g->m);
            cr_assert(memcmp(one, parted, c_n * sizeof *one) == 0,
                      "case %zu (%lld x %lld x %lld) in %lld parts differs from one call", t, (long long)g->m,
                      (long long)g->n, (long long)g->k, (long long)parts);
        }
        free(a);
        free(b);
        free(c0);
        free(one);
        free(parted);
    }
}

#ifdef TD_HAVE_CBLAS
Test(cpu_cancel, gemm_tiles_are_bitwise_one_cblas_call)
{
    check_tiles_are_one_call(TD_CPU_GEMM_CBLAS);
}

Test(cpu_cancel, host_pool_gemm_parts_are_bitwise_one_cblas_call)
{
    check_parts_are_one_call(TD_CPU_GEMM_CBLAS);
}
#endif

Test(cpu_cancel, gemm_tiles_are_bitwise_one_own_gemm_call)
{
    check_tiles_are_one_call(TD_CPU_GEMM_OWN);
}

Test(cpu_cancel, host_pool_gemm_parts_are_bitwise_one_own_gemm_call)
{
    check_parts_are_one_call(TD_CPU_GEMM_OWN);
}

Test(cpu_cancel, gemm_tiles_are_bitwise_one_own_fma_gemm_call)
{
    check_tiles_are_one_call(TD_CPU_GEMM_OWN_FMA);
}

Test(cpu_cancel, host_pool_gemm_parts_are_bitwise_one_own_fma_gemm_call)
{
    check_parts_are_one_call(TD_CPU_GEMM_OWN_FMA);
}

/* Column parts: a GEMM whose rows give fewer parts than the team (a
 * convolution's kernel gradient: C is 9 x 32 or 288 x 64 against k = the
 * batch's pixels) is cut into runs of whole 32-column panels on the own
 * GEMMs and on every bf16 call, never on CBLAS's fp32 one. Each part, run
 * as its own call, must give the single call's bits. `bf16` runs the
 * fastest bf16 kernel (AVX512_BF16 where the CPU has it) instead of
 * `engine`'s fp32 one. */
static void check_column_parts_are_one_call(td_cpu_gemm_engine engine, bool bf16)
{
    static const gemm_case cases[] = {
        {9, 32, 100352 / 8, 1, 0, 0, 0, 1.0f, 0.0f}, {9, 64, 3000, 1, 0, 0, 0, 1.0f, 1.0f},
        {9, 130, 2000, 1, 0, 0, 0, 1.0f, 0.0f},
        {1, 100, 500, 0, 0, 0, 0, 1.0f, 0.0f},       {20, 48, 301, 0, 1, 3, 5, 0.5f, 0.25f},
        {12, 17, 64, 1, 1, 0, 0, 1.0f, 0.0f},        {6, 1000, 77, 0, 0, 0, 2, -1.0f, 0.5f},
    };
    test_rng rng = {0xC011ull};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const gemm_case *gc = &cases[t];
        td_kernel_call call = {.kernel = TD_KERNEL_GEMM};
        td_gemm_params *g = &call.p.gemm;
        *g = (td_gemm_params){.trans_a = gc->trans_a, .trans_b = gc->trans_b, .m = gc->m, .n = gc->n, .k = gc->k,
                              .alpha = gc->alpha, .beta = gc->beta, .precision = bf16 ? TD_GEMM_BF16 : TD_GEMM_FP32};
        g->lda = (gc->trans_a ? gc->m : gc->k) + gc->lda_pad;
        g->ldb = gc->trans_b ? gc->k : gc->n;
        g->ldc = gc->n + gc->ldc_pad;
        const int64_t a_rows = gc->trans_a ? gc->k : gc->m, b_rows = gc->trans_b ? gc->n : gc->k;
        const size_t a_n = (size_t)(a_rows * g->lda), b_n = (size_t)(b_rows * g->ldb), c_n = (size_t)(gc->m * g->ldc);
        float *a = malloc(a_n * sizeof *a), *b = malloc(b_n * sizeof *b), *c0 = malloc(c_n * sizeof *c0);
        float *one = malloc(c_n * sizeof *one), *parted = malloc(c_n * sizeof *parted);
        cr_assert(a && b && c0 && one && parted);
        test_fill_uniform(&rng, a, a_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, b, b_n, -1.0f, 1.0f);
        test_fill_uniform(&rng, c0, c_n, -1.0f, 1.0f);
        memcpy(one, c0, c_n * sizeof *one);
        if (bf16)
            cr_assert(td_cpu_gemm_bf16(g, one, a, b, TD_CPU_BF16_FASTEST, NULL));
        else
            cr_assert(td_cpu_gemm(g, one, a, b, engine, NULL));
        const int64_t row_parts = (gc->m + 11) / 12, vectors = (gc->n + 31) / 32;
        for (uint32_t team = 2; team <= 4; team++) {
            const int64_t parts = td_cpu_gemm_split_parts(&call, engine, team, true);
            if (engine == TD_CPU_GEMM_CBLAS && !bf16) { /* CBLAS's columns stay whole */
                cr_assert_eq(parts, 1, "case %zu: CBLAS in %lld parts", t, (long long)parts);
                continue;
            }
            const int64_t want = row_parts >= (int64_t)team || vectors <= row_parts ? (row_parts < team ? row_parts : team)
                                 : vectors < (int64_t)team                          ? vectors
                                                                                    : (int64_t)team;
            cr_assert_eq(parts, want, "case %zu, team %u: %lld parts, not %lld", t, team, (long long)parts,
                         (long long)want);
            memcpy(parted, c0, c_n * sizeof *parted);
            int64_t columns = 0;
            for (int64_t part = 0; part < parts; part++) {
                td_kernel_call sub;
                td_cpu_gemm_split_part(&call, engine, parts, part, &sub);
                if (parts > row_parts) {
                    cr_assert_eq(sub.p.gemm.m, gc->m);
                    cr_assert_eq(sub.out.offset, (uint64_t)columns, "case %zu: part %lld starts at column %llu", t,
                                 (long long)part, (unsigned long long)sub.out.offset);
                    cr_assert_eq(sub.out.offset % 32, 0);
                    columns += sub.p.gemm.n;
                }
                if (bf16)
                    cr_assert(td_cpu_gemm_bf16(&sub.p.gemm, parted + sub.out.offset, a + sub.a.offset,
                                               b + sub.b.offset, TD_CPU_BF16_FASTEST, NULL));
                else
                    cr_assert(td_cpu_gemm(&sub.p.gemm, parted + sub.out.offset, a + sub.a.offset, b + sub.b.offset,
                                          engine, NULL));
            }
            if (parts > row_parts)
                cr_assert_eq(columns, gc->n, "case %zu: %lld parts cover %lld of %lld columns", t, (long long)parts,
                             (long long)columns, (long long)gc->n);
            cr_assert(memcmp(one, parted, c_n * sizeof *one) == 0,
                      "case %zu (%lld x %lld x %lld%s) in %lld parts differs from one call", t, (long long)g->m,
                      (long long)g->n, (long long)g->k, bf16 ? ", bf16" : "", (long long)parts);
        }
        free(a);
        free(b);
        free(c0);
        free(one);
        free(parted);
    }
}

Test(cpu_cancel, host_pool_gemm_column_parts_are_bitwise_one_own_gemm_call)
{
    check_column_parts_are_one_call(TD_CPU_GEMM_OWN, false);
}

Test(cpu_cancel, host_pool_gemm_column_parts_are_bitwise_one_own_fma_gemm_call)
{
    check_column_parts_are_one_call(TD_CPU_GEMM_OWN_FMA, false);
}

Test(cpu_cancel, host_pool_gemm_column_parts_are_bitwise_one_bf16_call)
{
    check_column_parts_are_one_call(TD_CPU_GEMM_OWN_FMA, true);
    check_column_parts_are_one_call(TD_CPU_GEMM_CBLAS, true);
}

#ifdef TD_HAVE_CBLAS
Test(cpu_cancel, host_pool_gemm_columns_stay_whole_on_cblas)
{
    check_column_parts_are_one_call(TD_CPU_GEMM_CBLAS, false);
}
#endif

typedef struct canceller {
    td_device *dev;
    double delay_s, at;
} canceller;

static void *cancel_later(void *p)
{
    canceller *c = p;
    struct timespec t = {(time_t)c->delay_s, (long)((c->delay_s - (double)(time_t)c->delay_s) * 1e9)};
    nanosleep(&t, NULL);
    c->at = now_s();
    td_cpu_backend.cancel(c->dev);
    return NULL;
}

/* A 4096^3 GEMM (about a second on one core) cancelled after 100 ms
 * returns TD_ERR_DEVICE_LOST within a tile; the device still reads (so
 * parameter I/O reaches a fenced device) and runs no more segments. */
Test(cpu_cancel, cancel_stops_a_long_gemm_within_a_tile)
{
    enum { S = 4096 };
    td_context *ctx = test_context(0);
    const td_backend_ops *ops = &td_cpu_backend;
    td_device *dev;
    TEST_OK(ctx, ops->open(ctx, 0, 0, &dev));
    td_buffer *a, *b, *c;
    const size_t bytes = (size_t)S * S * sizeof(float);
    TEST_OK(ctx, ops->buffer_create(dev, bytes, &a));
    TEST_OK(ctx, ops->buffer_create(dev, bytes, &b));
    TEST_OK(ctx, ops->buffer_create(dev, bytes, &c));
    memset(ops->buffer_host_pointer(dev, a), 0, bytes);
    memset(ops->buffer_host_pointer(dev, b), 0, bytes);
    td_kernel_call call = {.kernel = TD_KERNEL_GEMM, .out = {c, 0}, .a = {a, 0}, .b = {b, 0}};
    call.p.gemm = (td_gemm_params){.m = S, .n = S, .k = S, .lda = S, .ldb = S, .ldc = S, .alpha = 1.0f};
    cr_assert_lt(td_cpu_gemm_tile_rows(&call.p.gemm), S);
    td_segment *seg;
    TEST_OK(ctx, ops->segment_create(dev, &call, 1, &seg));

    canceller cc = {dev, 0.1, 0.0};
    pthread_t thread;
    const double start = now_s();
    cr_assert_eq(pthread_create(&thread, NULL, cancel_later, &cc), 0);
    const td_status s = ops->segment_run(dev, seg);
    const double end = now_s();
    pthread_join(thread, NULL);
    cr_assert_eq(s, TD_ERR_DEVICE_LOST, "segment_run returned %s after %.2f s: the cancel came too late to see",
                 td_status_name(s), end - start);
    /* A tile is 192 x 4096 x 4096 = 3.2 G multiply-adds, tens of ms on one
     * core; half a second covers a busy machine. */
    cr_assert_lt(end - cc.at, 0.5 * test_slowdown(), "the GEMM went on %.2f s after the cancel", end - cc.at);

    float value = -1.0f;
    TEST_OK(ctx, ops->read(dev, a, 0, &value, sizeof value));
    cr_assert_eq(value, 0.0f);
    const double again = now_s();
    cr_assert_eq(ops->segment_run(dev, seg), TD_ERR_DEVICE_LOST);
    cr_assert_lt(now_s() - again, 0.05, "a cancelled device ran a segment");

    ops->segment_destroy(dev, seg);
    ops->buffer_destroy(dev, a);
    ops->buffer_destroy(dev, b);
    ops->buffer_destroy(dev, c);
    ops->close(dev);
    td_context_destroy(ctx);
}

/* x [8192, 3072] sharded over cpu:2, v [3072, 3072]: each device's two
 * GEMMs (forward, and v's gradient) take about 0.35 s each on a fast core
 * with the own FMA GEMM (2048 features were 0.15 s there: the step then
 * sometimes timed out in the all-reduce instead), more with CBLAS or on a
 * shared core, against a job bound of 4 x 100 ms. */
enum { ROWS = 8192, FEATURES = 3072, TIMEOUT_MS = 100 };

/* In one process: a step that times out inside its GEMMs fences both
 * devices and cancels them, so the next step fails at once naming the
 * lost device (not "still inside a job"), and td_context_destroy joins the
 * workers promptly and frees everything (a counting allocator ends at
 * zero: nothing was abandoned to a running worker). */
Test(cpu_cancel, a_gemm_outlasting_the_timeout_is_cancelled_and_everything_is_freed)
{
    test_alloc_counter counter;
    const uint32_t slowdown = test_slowdown(); /* a cancelled GEMM ends within a tile: kernel time */
    /* The bound is the step's: the set-up (parameters placed, arenas
     * touched; 80 ms here on a quiet machine) once took past 4 x 100 ms
     * when CI shared the cores, and the trainer's creation timed out
     * instead. So it runs under a long timeout, shortened before the step
     * (every wait reads the context's at the time it waits; no job is
     * running in between). */
    td_context *ctx = test_counting_context(&counter, 60000u);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g;
    td_node x, y, w, loss;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    test_linreg_graph(ctx, g, ROWS, FEATURES, &x, &y, &w, &loss);
    /* test_linreg_graph's w is [FEATURES, 1]: a GEMV. Add a square layer
     * before it so the step holds real GEMMs. */
    td_node h, v, hv, loss2;
    const int64_t vd[2] = {FEATURES, FEATURES};
    TEST_OK(ctx, td_graph_param(g, "v", 2, vd, &v));
    TEST_OK(ctx, td_graph_matmul(g, x, v, &h));
    TEST_OK(ctx, td_graph_matmul(g, h, w, &hv));
    TEST_OK(ctx, td_graph_mse(g, hv, y, &loss2));
    td_trainer_options o;
    td_trainer_options_init(&o);
    td_trainer *t;
    td_node params[2] = {v, w};
    TEST_OK(ctx, td_trainer_create(g, mesh, loss2, 2, params, &o, &t));
    const int64_t xd[2] = {ROWS, FEATURES}, yd[2] = {ROWS, 1};
    td_tensor *xs = test_tensor(ctx, TD_F32, 2, xd), *ys = test_tensor(ctx, TD_F32, 2, yd);
    test_rng rng = {5};
    test_fill_uniform(&rng, test_f32(xs), test_count(xs), -1.0f, 1.0f);
    test_fill_uniform(&rng, test_f32(ys), test_count(ys), -1.0f, 1.0f);
    td_binding b[2] = {{x, xs}, {y, ys}};
    ctx->options.timeout_ms = TIMEOUT_MS * slowdown;

    const double start = now_s();
    const td_status s = td_trainer_step(t, 2, b, NULL);
    cr_assert_neq(s, TD_OK, "the step finished within %u ms x 4 (%.2f s): the GEMMs are too small for this machine",
                  TIMEOUT_MS * slowdown, now_s() - start);
    double t0 = now_s();
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "was lost earlier", td_trainer_step(t, 2, b, NULL));
    cr_assert_lt(now_s() - t0, 0.5 * slowdown, "the step after the timeout took %.2f s", now_s() - t0);
    t0 = now_s();
    td_context_destroy(ctx);
    cr_assert_lt(now_s() - t0, 0.5 * slowdown, "td_context_destroy took %.2f s", now_s() - t0);
    td_tensor_destroy(xs);
    td_tensor_destroy(ys);
    cr_assert_eq(counter.live, 0, "%zu blocks left allocated", counter.live);
}

/* Which calls the pool may run side by side (td_cpu_calls_conflict): a
 * convolution's bias gradient (a REDUCE over dY) and its kernel gradient
 * (a GEMM reading dY) may; not where one writes what the other reads or
 * writes, not an in-place REDUCE, not any other kernel. Buffers are only
 * compared by address here. */
Test(cpu_cancel, calls_that_may_run_side_by_side)
{
    static char buffers[3];
    td_buffer *dy = (td_buffer *)&buffers[0], *patches = (td_buffer *)&buffers[1], *grads = (td_buffer *)&buffers[2];
    /* dY [100 x 32]; bias gradient into grads[0, 32); kernel gradient
     * patches^T [9 x 100] x dY into grads[32, 32 + 288). */
    td_kernel_call bias = {.kernel = TD_KERNEL_REDUCE, .out = {grads, 0}, .a = {dy, 0}};
    bias.p.reduce = (td_reduce_params){.alpha = 1.0f,
                                       .out_dims = {1, 1, 1, 32},
                                       .out_strides = {0, 0, 0, 1},
                                       .red_dims = {1, 1, 1, 100},
                                       .red_strides = {0, 0, 0, 32}};
    td_kernel_call kernel = {.kernel = TD_KERNEL_GEMM, .out = {grads, 32}, .a = {patches, 0}, .b = {dy, 0}};
    kernel.p.gemm = (td_gemm_params){.trans_a = 1, .m = 9, .n = 32, .k = 100, .lda = 9, .ldb = 32, .ldc = 32,
                                     .alpha = 1.0f};
    cr_assert_not(td_cpu_calls_conflict(&bias, &bias));
    cr_assert_not(td_cpu_calls_conflict(&bias, &kernel));
    cr_assert_not(td_cpu_calls_conflict(&kernel, &bias));
    /* The bias gradient's output one element into the kernel gradient's. */
    td_kernel_call late = bias;
    late.out.offset = 32 + 287;
    cr_assert(td_cpu_calls_conflict(&late, &kernel));
    cr_assert(td_cpu_calls_conflict(&kernel, &late));
    /* The GEMM writing the last element of dY the REDUCE reads. */
    td_kernel_call over = kernel;
    over.out = (td_arg){dy, 100 * 32 - 1};
    cr_assert(td_cpu_calls_conflict(&bias, &over));
    td_kernel_call past = kernel;
    past.out = (td_arg){dy, 100 * 32};
    cr_assert_not(td_cpu_calls_conflict(&bias, &past));
    /* A REDUCE over its own output, a negative stride, another kernel. */
    td_kernel_call in_place = bias;
    in_place.out = (td_arg){dy, 3199};
    cr_assert(td_cpu_calls_conflict(&in_place, &in_place));
    td_kernel_call backwards = bias;
    backwards.p.reduce.red_strides[3] = -32;
    cr_assert(td_cpu_calls_conflict(&backwards, &kernel));
    td_kernel_call fill = {.kernel = TD_KERNEL_FILL, .n = 4, .out = {grads, 1000}};
    cr_assert(td_cpu_calls_conflict(&fill, &kernel));
}
