/* bf16 GEMM against fp32 on a CPU device, at the seed models' shapes.
 *
 *   gemm_bf16 [--rounds N] [--cpu-threads N] [--json]
 *
 * On one simulated device (cpu:1; --cpu-threads 1, the default, keeps it
 * to one core) each shape of the CNN's convolutions (as im2col + GEMM,
 * forward and both backward products, batch 128) and dense layers, and of
 * the MLP 784-512-512-10 at batch 1024, runs as one GEMM segment in four
 * ways, alternating within each round: fp32 through CBLAS (what a step
 * runs by default), fp32 on the own GEMM (TD_CPU_GEMM=own), bf16
 * (td_gemm_params.precision = TD_GEMM_BF16: AVX512_BF16 where the CPU has
 * it), and bf16 from a context in deterministic mode (the portable kernel:
 * what a CPU without bf16 instructions runs). Each way's time is the median
 * of several runs; the figures are medians over the rounds, with the ratio
 * bf16 / fp32-CBLAS taken within each round. The bf16 result is checked
 * against fp32 CBLAS (normalised MSE, about 1e-5 from rounding the
 * inputs). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_bench_support.h"
#include "td_bench_time.h"

typedef struct shape {
    int64_t m, n, k;
    int ta, tb;
    const char *label;
} shape;

static const shape shapes[] = {
    {100352, 32, 9, 0, 0, "cnn conv1 fwd"},
    {9, 32, 100352, 1, 0, "cnn conv1 dkernel"},
    {25088, 64, 288, 0, 0, "cnn conv2 fwd"},
    {288, 64, 25088, 1, 0, "cnn conv2 dkernel"},
    {25088, 288, 64, 0, 1, "cnn conv2 dpatches"},
    {128, 10, 3136, 0, 0, "cnn dense fwd"},
    {3136, 10, 128, 1, 0, "cnn dense dW"},
    {128, 3136, 10, 0, 1, "cnn dense dx"},
    {1024, 512, 784, 0, 0, "mlp l1 fwd"},
    {1024, 512, 512, 0, 0, "mlp l2 fwd"},
    {784, 512, 1024, 1, 0, "mlp l1 dW"},
    {1024, 512, 512, 0, 1, "mlp l2 dx"},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

enum { WAY_CBLAS, WAY_OWN, WAY_BF16, WAY_PORTABLE, NWAYS, MAX_ROUNDS = 9 };
static const char *const way_names[NWAYS] = {"fp32/cblas", "fp32/own", "bf16", "bf16/portable"};

typedef struct bench {
    td_mesh *mesh;     /* cpu:1 */
    td_mesh *det_mesh; /* cpu:1 in deterministic mode */
    float *a, *b, *c, *ref;
    double seconds[NSHAPES][NWAYS][MAX_ROUNDS];
    double nmse[NSHAPES][NWAYS];
    int round;
    size_t shape, way;
    td_status st;
} bench;

static double gflops(const shape *s, double seconds)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / seconds * 1e-9;
}

/* One shape, one way, on the device's worker: median of several runs of a
 * one-GEMM segment. */
static td_status measure(void *arg, uint32_t position)
{
    (void)position;
    bench *b = arg;
    const shape *s = &shapes[b->shape];
    const int way = (int)b->way;
    const td_mesh_device *md = &(way == WAY_PORTABLE ? b->det_mesh : b->mesh)->devices[0];
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    const size_t asz = (size_t)(s->m * s->k), bsz = (size_t)(s->k * s->n), csz = (size_t)(s->m * s->n);
    td_buffer *ba = NULL, *bb = NULL, *bc = NULL;
    td_segment *seg = NULL;
    td_status st = ops->buffer_create(dev, asz * 4, &ba);
    if (st == TD_OK)
        st = ops->buffer_create(dev, bsz * 4, &bb);
    if (st == TD_OK)
        st = ops->buffer_create(dev, csz * 4, &bc);
    if (st == TD_OK)
        st = ops->write(dev, ba, 0, b->a, asz * 4);
    if (st == TD_OK)
        st = ops->write(dev, bb, 0, b->b, bsz * 4);
    td_kernel_call call = {.kernel = TD_KERNEL_GEMM, .a = {ba, 0}, .b = {bb, 0}, .out = {bc, 0},
                           .p.gemm = {.trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k,
                                      .lda = s->ta ? s->m : s->k, .ldb = s->tb ? s->k : s->n, .ldc = s->n,
                                      .alpha = 1.0f, .beta = 0.0f,
                                      .precision = way >= WAY_BF16 ? TD_GEMM_BF16 : TD_GEMM_FP32}};
    /* The backend reads TD_CPU_GEMM at segment_create. */
    setenv("TD_CPU_GEMM", way == WAY_OWN ? "own" : "cblas", 1);
    if (st == TD_OK)
        st = ops->segment_create(dev, &call, 1, &seg);
    unsetenv("TD_CPU_GEMM");
    uint64_t ticket;
    double t[32];
    int reps = 0;
    if (st == TD_OK) /* warm-up: first-touch of the thread's panels */
        st = ops->segment_run(dev, seg);
    const double begin = td_bench_now();
    while (st == TD_OK && reps < 32 && (reps < 3 || td_bench_now() - begin < 0.15)) {
        const double t0 = td_bench_now();
        st = ops->segment_run(dev, seg);
        if (st == TD_OK)
            st = ops->submit(dev, &ticket);
        if (st == TD_OK)
            st = ops->wait(dev, ticket, td_context_timeout_ms(b->mesh->ctx));
        t[reps++] = td_bench_now() - t0;
    }
    if (st == TD_OK)
        st = ops->read(dev, bc, 0, b->c, csz * 4);
    if (st == TD_OK) {
        double err = 0, norm = 0;
        for (size_t j = 0; j < csz; j++) {
            const double d = (double)b->c[j] - (double)b->ref[j];
            err += d * d;
            norm += (double)b->ref[j] * (double)b->ref[j];
        }
        b->nmse[b->shape][way] = norm > 0 ? err / norm : err;
        b->seconds[b->shape][way][b->round] = td_bench_median(t, reps);
    }
    if (seg)
        ops->segment_destroy(dev, seg);
    ops->buffer_destroy(dev, ba);
    ops->buffer_destroy(dev, bb);
    ops->buffer_destroy(dev, bc);
    return st;
}

static void fill(float *v, size_t n, uint32_t seed)
{
    for (size_t j = 0; j < n; j++, seed = seed * 1664525u + 1013904223u)
        v[j] = (float)(seed >> 9) / 4194304.0f - 1.0f; /* [-1, 1) */
}

int main(int argc, char **argv)
{
    int rounds = 3;
    uint32_t cpu_threads = 1;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cpu-threads") == 0 && i + 1 < argc)
            cpu_threads = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = true;
        else {
            fprintf(stderr, "usage: %s [--rounds N] [--cpu-threads N] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS)
        rounds = 3;
    static bench b;
    size_t most = 0;
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        const size_t sizes[3] = {(size_t)(s->m * s->k), (size_t)(s->k * s->n), (size_t)(s->m * s->n)};
        for (int j = 0; j < 3; j++)
            most = sizes[j] > most ? sizes[j] : most;
    }
    b.a = malloc(most * 4);
    b.b = malloc(most * 4);
    b.c = malloc(most * 4);
    b.ref = malloc(most * 4);
    if (!b.a || !b.b || !b.c || !b.ref)
        return 1;
    fill(b.a, most, 7u);
    fill(b.b, most, 11u);
    td_context_options opts;
    td_context_options_init(&opts);
    opts.cpu_threads = cpu_threads;
    td_context *ctx = NULL, *det_ctx = NULL;
    td_status st = td_context_create(&opts, &ctx);
    if (st == TD_OK)
        st = td_mesh_create(ctx, "cpu:1", &b.mesh);
    opts.deterministic = true;
    if (st == TD_OK)
        st = td_context_create(&opts, &det_ctx);
    if (st == TD_OK)
        st = td_mesh_create(det_ctx, "cpu:1", &b.det_mesh);
    if (st != TD_OK) {
        fprintf(stderr, "gemm_bf16: cannot open cpu:1: %s\n", ctx ? td_last_error(ctx) : "no context");
        return 1;
    }
    for (int r = 0; r < rounds && st == TD_OK; r++)
        for (size_t i = 0; i < NSHAPES && st == TD_OK; i++) {
            const shape *s = &shapes[i];
            /* b.ref is shared by the shapes: this one's reference again. */
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                        (int)s->m, (int)s->n, (int)s->k, 1.0f, b.a, (int)(s->ta ? s->m : s->k), b.b,
                        (int)(s->tb ? s->k : s->n), 0.0f, b.ref, (int)s->n);
            b.round = r;
            b.shape = i;
            for (size_t w = 0; w < NWAYS && st == TD_OK; w++) {
                b.way = w;
                st = td_mesh_run(w == WAY_PORTABLE ? b.det_mesh : b.mesh, measure, &b);
            }
        }
    if (st != TD_OK) {
        fprintf(stderr, "gemm_bf16: %s\n", td_last_error(ctx));
        return 1;
    }
    if (!json)
        printf("GFLOP/s, one device, medians of %d rounds\n%-20s %6s %5s %6s %11s %9s %9s %13s %9s %9s\n", rounds,
               "shape", "m", "n", "k", way_names[WAY_CBLAS], way_names[WAY_OWN], way_names[WAY_BF16],
               way_names[WAY_PORTABLE], "bf16/cblas", "bf16 nmse");
    int failures = 0;
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        double g[NWAYS], ratio[MAX_ROUNDS];
        for (int w = 0; w < NWAYS; w++) {
            double v[MAX_ROUNDS];
            memcpy(v, b.seconds[i][w], sizeof v);
            g[w] = gflops(s, td_bench_median(v, rounds));
        }
        for (int r = 0; r < rounds; r++)
            ratio[r] = b.seconds[i][WAY_CBLAS][r] / b.seconds[i][WAY_BF16][r];
        const double speedup = td_bench_median(ratio, rounds);
        if (!(b.nmse[i][WAY_BF16] < 1e-3) || !(b.nmse[i][WAY_PORTABLE] < 1e-3))
            failures++;
        if (json)
            printf("{\"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"fp32_cblas_gflops\": %.2f, "
                   "\"fp32_own_gflops\": %.2f, \"bf16_gflops\": %.2f, \"bf16_portable_gflops\": %.2f, "
                   "\"bf16_over_cblas\": %.3f, \"bf16_nmse\": %.3g}\n",
                   s->label, (long long)s->m, (long long)s->n, (long long)s->k, g[WAY_CBLAS], g[WAY_OWN],
                   g[WAY_BF16], g[WAY_PORTABLE], speedup, b.nmse[i][WAY_BF16]);
        else
            printf("%-20s %6lld %5lld %6lld %11.1f %9.1f %9.1f %13.1f %9.2f %9.2g\n", s->label, (long long)s->m,
                   (long long)s->n, (long long)s->k, g[WAY_CBLAS], g[WAY_OWN], g[WAY_BF16], g[WAY_PORTABLE],
                   speedup, b.nmse[i][WAY_BF16]);
    }
    td_mesh_destroy(b.det_mesh);
    td_mesh_destroy(b.mesh);
    td_context_destroy(det_ctx);
    td_context_destroy(ctx);
    free(b.a);
    free(b.b);
    free(b.c);
    free(b.ref);
    return failures ? 1 : 0;
}
