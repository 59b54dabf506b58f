/* Convolution as IM2COL + GEMM, and its backward (GEMMs + COL2IM), per
 * device, at the mnist_cnn demo's shapes, beside OpenBLAS on the same GEMMs.
 *
 *   conv [--devices SPEC] [--json] [--reps N] [--batch N]
 *
 * The global batch (default 128) is split over the mesh's devices as
 * training splits it (cpu:2: 64 each); every device measures at once, as in
 * a training step. Layers: conv1 28x28x1 -> 3x3x32 SAME, conv2 14x14x32 ->
 * 3x3x64 SAME. Stages, each one segment timed by its median over several
 * runs (enqueue, submit, wait):
 *   forward:  im2col, patches [B*H*W, 9*C] x kernel [9*C, F]
 *   backward: dkernel = patches^T x gy; dpatches = gy x kernel^T; col2im
 * Rows give seconds, GFLOP/s (GEMMs) or GB/s (im2col/col2im moves), each
 * stage's share of its pass, and per pass the GEMM FLOPs over the pass's
 * whole time against cblas_sgemm (one thread, as the CPU backend sets it)
 * on the same GEMMs, measured in the same run. The forward output is
 * checked against the host (im2col reference + cblas). */
#include <cblas.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "td_bench_support.h"
#include "td_bench_time.h"

extern void openblas_set_num_threads(int) __attribute__((weak));

typedef struct layer {
    const char *name;
    int64_t hw, c, f; /* square image side, input channels, filters */
} layer;

static const layer layers[] = {{"conv1", 28, 1, 32}, {"conv2", 14, 32, 64}};
#define NLAYERS (sizeof layers / sizeof layers[0])

enum { ST_IM2COL, ST_FWD_GEMM, ST_DKERNEL, ST_DPATCH, ST_COL2IM, NSTAGES };
static const char *const stage_names[NSTAGES] = {"im2col", "gemm", "gemm_dkernel", "gemm_dpatches", "col2im"};
static const int stage_pass[NSTAGES] = {0, 0, 1, 1, 1}; /* 0 forward, 1 backward */

typedef struct bench {
    td_mesh *mesh;
    int reps;
    int64_t batch; /* per device */
    bool json;
    double blas_s[NLAYERS][NSTAGES]; /* cblas seconds for the GEMM stages */
    int failures;
    pthread_mutex_t print_lock;
} bench;

static td_conv_params geometry(const layer *l, int64_t batch)
{
    td_conv_params p = {.n = batch, .h = l->hw, .w = l->hw, .c = l->c, .kh = 3, .kw = 3, .oh = l->hw, .ow = l->hw,
                        .stride_h = 1, .stride_w = 1, .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
    return p;
}

/* The GEMM of a stage: rows = B*H*W, k = 9*C, filters F. */
static td_gemm_params stage_gemm(int stage, int64_t rows, int64_t k, int64_t f)
{
    switch (stage) {
    case ST_FWD_GEMM: /* patches [rows, k] x kernel [k, f] */
        return (td_gemm_params){.m = rows, .n = f, .k = k, .lda = k, .ldb = f, .ldc = f, .alpha = 1.0f};
    case ST_DKERNEL: /* patches^T [k, rows] x gy [rows, f] */
        return (td_gemm_params){.trans_a = 1, .m = k, .n = f, .k = rows, .lda = k, .ldb = f, .ldc = f,
                                .alpha = 1.0f};
    default: /* ST_DPATCH: gy [rows, f] x kernel^T [f, k] */
        return (td_gemm_params){.trans_b = 1, .m = rows, .n = k, .k = f, .lda = f, .ldb = f, .ldc = k,
                                .alpha = 1.0f};
    }
}

static double gemm_flops(const td_gemm_params *g)
{
    return 2.0 * (double)g->m * (double)g->n * (double)g->k;
}

static void fill(float *v, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++, seed = seed * 1664525u + 1013904223u)
        v[i] = (float)(seed >> 9) / 8388608.0f - 1.0f;
}

static void blas(const td_gemm_params *g, const float *a, const float *b, float *c)
{
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                (blasint)g->m, (blasint)g->n, (blasint)g->k, g->alpha, a, (blasint)g->lda, b, (blasint)g->ldb, 0.0f,
                c, (blasint)g->ldc);
}

/* cblas_sgemm on the host for each GEMM stage, on one thread. */
static void host_baseline(bench *b)
{
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
    for (size_t l = 0; l < NLAYERS; l++) {
        int64_t rows = b->batch * layers[l].hw * layers[l].hw, k = 9 * layers[l].c, f = layers[l].f;
        float *p = malloc((size_t)(rows * k) * 4), *w = malloc((size_t)(k * f) * 4), *y = malloc((size_t)(rows * f) * 4);
        float *outs[NSTAGES] = {NULL, malloc((size_t)(rows * f) * 4), malloc((size_t)(k * f) * 4),
                                malloc((size_t)(rows * k) * 4), NULL};
        fill(p, (size_t)(rows * k), 1);
        fill(w, (size_t)(k * f), 2);
        fill(y, (size_t)(rows * f), 3);
        for (int s = ST_FWD_GEMM; s <= ST_DPATCH; s++) {
            td_gemm_params g = stage_gemm(s, rows, k, f);
            const float *a = s == ST_DPATCH ? y : p, *bm = s == ST_DKERNEL ? y : w;
            double t[64];
            int reps = 0;
            blas(&g, a, bm, outs[s]); /* warm-up */
            double begin = td_bench_now();
            do {
                double t0 = td_bench_now();
                blas(&g, a, bm, outs[s]);
                t[reps++] = td_bench_now() - t0;
            } while (reps < 64 && (reps < b->reps || td_bench_now() - begin < 0.2));
            b->blas_s[l][s] = td_bench_median(t, reps);
            free(outs[s]);
        }
        free(p);
        free(w);
        free(y);
    }
}

typedef struct dev_bufs {
    td_buffer *x, *patches, *kernel, *y, *gy, *dkernel, *dpatches, *dx;
} dev_bufs;

/* One layer on one device: buffers, the five single-call segments, timing. */
static td_status measure_layer(bench *b, const td_mesh_device *md, size_t li)
{
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    td_context *ctx = b->mesh->ctx;
    const layer *l = &layers[li];
    td_conv_params geo = geometry(l, b->batch);
    int64_t rows = b->batch * l->hw * l->hw, k = 9 * l->c, f = l->f, image = td_conv_image_count(&geo);
    size_t sizes[8] = {(size_t)image, (size_t)(rows * k), (size_t)(k * f), (size_t)(rows * f),
                       (size_t)(rows * f), (size_t)(k * f), (size_t)(rows * k), (size_t)image};
    dev_bufs bufs = {0};
    td_buffer **slots[8] = {&bufs.x, &bufs.patches, &bufs.kernel, &bufs.y, &bufs.gy, &bufs.dkernel,
                            &bufs.dpatches, &bufs.dx};
    float *host = malloc(sizes[1] * 4 > sizes[3] * 4 ? sizes[1] * 4 : sizes[3] * 4);
    float *want = malloc(sizes[3] * 4), *patches = malloc(sizes[1] * 4), *kernel = malloc(sizes[2] * 4);
    td_status st = host && want && patches && kernel ? TD_OK : TD_ERR_OUT_OF_MEMORY;
    for (int s = 0; s < 8 && st == TD_OK; s++)
        st = ops->buffer_create(dev, sizes[s] * 4, slots[s]);
    /* x, kernel and gy hold data; the rest are written by the stages. */
    static const int inputs[3] = {0, 2, 4};
    for (int s = 0; s < 3 && st == TD_OK; s++) {
        fill(host, sizes[inputs[s]], 11u + (uint32_t)inputs[s]);
        if (inputs[s] == 0)
            td_reference_im2col(patches, host, &geo);
        if (inputs[s] == 2)
            memcpy(kernel, host, sizes[2] * 4);
        st = ops->write(dev, *slots[inputs[s]], 0, host, sizes[inputs[s]] * 4);
    }
    td_kernel_call calls[NSTAGES] = {
        {.kernel = TD_KERNEL_IM2COL, .out = {bufs.patches, 0}, .a = {bufs.x, 0}, .p.conv = geo},
        {.kernel = TD_KERNEL_GEMM, .out = {bufs.y, 0}, .a = {bufs.patches, 0}, .b = {bufs.kernel, 0},
         .p.gemm = stage_gemm(ST_FWD_GEMM, rows, k, f)},
        {.kernel = TD_KERNEL_GEMM, .out = {bufs.dkernel, 0}, .a = {bufs.patches, 0}, .b = {bufs.gy, 0},
         .p.gemm = stage_gemm(ST_DKERNEL, rows, k, f)},
        {.kernel = TD_KERNEL_GEMM, .out = {bufs.dpatches, 0}, .a = {bufs.gy, 0}, .b = {bufs.kernel, 0},
         .p.gemm = stage_gemm(ST_DPATCH, rows, k, f)},
        {.kernel = TD_KERNEL_COL2IM, .out = {bufs.dx, 0}, .a = {bufs.dpatches, 0}, .p.conv = geo},
    };
    double seconds[NSTAGES] = {0};
    uint64_t ticket;
    for (int s = 0; s < NSTAGES && st == TD_OK; s++) {
        td_segment *seg = NULL;
        st = ops->segment_create(dev, &calls[s], 1, &seg);
        double t[64];
        int reps = 0;
        for (int warm = 0; warm < 1 && st == TD_OK; warm++) {
            st = ops->segment_run(dev, seg);
            if (st == TD_OK)
                st = ops->submit(dev, &ticket);
            if (st == TD_OK)
                st = ops->wait(dev, ticket, td_context_timeout_ms(ctx));
        }
        double begin = td_bench_now();
        while (st == TD_OK && reps < 64 && (reps < b->reps || td_bench_now() - begin < 0.2)) {
            double t0 = td_bench_now();
            st = ops->segment_run(dev, seg);
            if (st == TD_OK)
                st = ops->submit(dev, &ticket);
            if (st == TD_OK)
                st = ops->wait(dev, ticket, td_context_timeout_ms(ctx));
            t[reps++] = td_bench_now() - t0;
        }
        if (seg)
            ops->segment_destroy(dev, seg);
        if (st == TD_OK)
            seconds[s] = td_bench_median(t, reps);
    }
    /* The forward output against the host's im2col + cblas. */
    if (st == TD_OK)
        st = ops->read(dev, bufs.y, 0, host, sizes[3] * 4);
    if (st == TD_OK)
        st = ops->submit(dev, &ticket);
    if (st == TD_OK)
        st = ops->wait(dev, ticket, td_context_timeout_ms(ctx));
    if (st == TD_OK) {
        td_gemm_params g = stage_gemm(ST_FWD_GEMM, rows, k, f);
        blas(&g, patches, kernel, want);
        double err = 0, norm = 0;
        for (size_t i = 0; i < sizes[3]; i++) {
            double d = (double)host[i] - (double)want[i];
            err += d * d;
            norm += (double)want[i] * (double)want[i];
        }
        double nmse = norm > 0 ? err / norm : err;
        pthread_mutex_lock(&b->print_lock);
        if (!(nmse < 1e-8)) {
            fprintf(stderr, "conv: %s on device %u: wrong forward output (nmse %g)\n", l->name, md->position, nmse);
            b->failures++;
        }
        double pass_s[2] = {0, 0}, pass_flops[2] = {0, 0}, pass_blas[2] = {0, 0};
        for (int s = 0; s < NSTAGES; s++) {
            pass_s[stage_pass[s]] += seconds[s];
            if (calls[s].kernel == TD_KERNEL_GEMM) {
                pass_flops[stage_pass[s]] += gemm_flops(&calls[s].p.gemm);
                pass_blas[stage_pass[s]] += b->blas_s[li][s];
            }
        }
        for (int s = 0; s < NSTAGES; s++) {
            bool gemm = calls[s].kernel == TD_KERNEL_GEMM;
            /* im2col/col2im: bytes of the image and the patch matrix moved. */
            double rate = gemm ? gemm_flops(&calls[s].p.gemm) / seconds[s] * 1e-9
                               : 4.0 * (double)(sizes[0] + sizes[1]) / seconds[s] * 1e-9;
            double blas_rate = gemm ? gemm_flops(&calls[s].p.gemm) / b->blas_s[li][s] * 1e-9 : 0.0;
            double share = seconds[s] / pass_s[stage_pass[s]];
            if (b->json)
                printf("{\"device\": %u, \"backend\": \"%s\", \"layer\": \"%s\", \"batch\": %lld, \"pass\": \"%s\", "
                       "\"stage\": \"%s\", \"seconds\": %.6g, \"%s\": %.3f, \"openblas_gflops\": %.3f, "
                       "\"share\": %.3f}\n",
                       md->position, md->ops->name, l->name, (long long)b->batch,
                       stage_pass[s] ? "backward" : "forward", stage_names[s], seconds[s],
                       gemm ? "gflops" : "gb_per_s", rate, blas_rate, share);
            else
                printf("%-3u %-6s %-6s %5lld %-8s %-14s %10.6f %8.2f %-5s %8.2f %6.3f\n", md->position,
                       md->ops->name, l->name, (long long)b->batch, stage_pass[s] ? "backward" : "forward",
                       stage_names[s], seconds[s], rate, gemm ? "GF/s" : "GB/s", blas_rate, share);
        }
        for (int p = 0; p < 2; p++) {
            double g = pass_flops[p] / pass_s[p] * 1e-9, ob = pass_flops[p] / pass_blas[p] * 1e-9;
            if (b->json)
                printf("{\"device\": %u, \"backend\": \"%s\", \"layer\": \"%s\", \"batch\": %lld, \"pass\": \"%s\", "
                       "\"stage\": \"total\", \"seconds\": %.6g, \"gflops\": %.3f, \"openblas_gflops\": %.3f, "
                       "\"ratio\": %.3f, \"nmse\": %.3g}\n",
                       md->position, md->ops->name, l->name, (long long)b->batch, p ? "backward" : "forward",
                       pass_s[p], g, ob, g / ob, nmse);
            else
                printf("%-3u %-6s %-6s %5lld %-8s %-14s %10.6f %8.2f GF/s  %8.2f ratio %.3f\n", md->position,
                       md->ops->name, l->name, (long long)b->batch, p ? "backward" : "forward", "total", pass_s[p],
                       g, ob, g / ob);
        }
        fflush(stdout);
        pthread_mutex_unlock(&b->print_lock);
    }
    for (int s = 0; s < 8; s++)
        if (*slots[s])
            ops->buffer_destroy(dev, *slots[s]);
    free(host);
    free(want);
    free(patches);
    free(kernel);
    return st;
}

static td_status run_job(void *arg, uint32_t position)
{
    bench *b = arg;
    const td_mesh_device *md = &b->mesh->devices[position];
    td_status st = TD_OK;
    for (size_t l = 0; l < NLAYERS && st == TD_OK; l++)
        st = measure_layer(b, md, l);
    return st;
}

int main(int argc, char **argv)
{
    const char *spec = "cpu:1";
    int64_t global_batch = 128;
    bench b = {.reps = 5, .print_lock = PTHREAD_MUTEX_INITIALIZER};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            b.json = true;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            b.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            global_batch = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--devices SPEC] [--json] [--reps N] [--batch N]\n", argv[0]);
            return 2;
        }
    }
    if (b.reps < 1 || b.reps > 64)
        b.reps = 5;
    td_context *ctx;
    if (td_context_create(NULL, &ctx) != TD_OK) {
        fprintf(stderr, "conv: cannot create a context\n");
        return 1;
    }
    td_status st = td_mesh_create(ctx, spec, &b.mesh);
    if (st != TD_OK) {
        fprintf(stderr, "conv: --devices %s: %s\n", spec, td_last_error(ctx));
        td_context_destroy(ctx);
        return 1;
    }
    if (global_batch < (int64_t)b.mesh->count || global_batch % b.mesh->count != 0) {
        fprintf(stderr, "conv: --batch %lld does not split over %u devices\n", (long long)global_batch,
                b.mesh->count);
        td_mesh_destroy(b.mesh);
        td_context_destroy(ctx);
        return 2;
    }
    b.batch = global_batch / b.mesh->count;
    host_baseline(&b);
    if (!b.json)
        printf("%-3s %-6s %-6s %5s %-8s %-14s %10s %8s %-5s %8s %6s\n", "dev", "kind", "layer", "batch", "pass",
               "stage", "seconds", "rate", "unit", "openblas", "share");
    st = td_mesh_run(b.mesh, run_job, &b);
    if (st != TD_OK)
        fprintf(stderr, "conv: %s\n", td_last_error(ctx));
    td_mesh_destroy(b.mesh);
    td_context_destroy(ctx);
    return st != TD_OK || b.failures ? 1 : 0;
}
