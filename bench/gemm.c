/* GEMM throughput per device and shape, beside OpenBLAS on the host.
 *
 *   gemm [--devices SPEC] [--json] [--reps N] [--max-size N] [--cpu-threads N]
 *
 * For every device of the mesh (default "cpu:1") and every shape (squares
 * 64..1024, the demos' layer shapes and the CNN's conv GEMMs) prints the median time of several
 * runs of one GEMM segment (enqueue, submit, wait) and its GFLOP/s, next to
 * cblas_sgemm on the host measured in the same run. OpenCL devices get two
 * rows per shape, "opencl/clblast" and "opencl/own" (TD_OPENCL_GEMM forces
 * the path), which is how the backend's selection rule was measured; CPU
 * devices likewise get "cpu/cblas", "cpu/own" (TD_CPU_GEMM: tandem's
 * own blocked GEMM, what a -Dblas=none build runs) and "cpu/own-fma" (its
 * fused multiply-add variant, the default on CPUs with FMA), and then once more
 * "cpu/deterministic", from a second context in deterministic mode
 * (td_context_options.deterministic, which runs the own GEMM whatever
 * TD_CPU_GEMM says: set to cblas there to show it). Each
 * result is checked against cblas_sgemm (normalised MSE). Measurements run
 * on the device's own worker thread (td_mesh_run), as the engine drives it.
 * The host baseline runs on one thread; a CPU device splits a call of 384
 * rows or more over the host pool's spare threads, so --cpu-threads 1
 * compares one core with one core. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "td_bench_support.h"
#include "td_bench_time.h"

typedef struct shape {
    int64_t m, n, k;
    const char *label;
    int trans_a, trans_b; /* op(A) = A^T (A stored k x m), op(B) = B^T (B stored n x k) */
} shape;

static const shape shapes[] = {
    {64, 64, 64, "square", 0, 0},
    {128, 128, 128, "square", 0, 0},
    {256, 256, 256, "square", 0, 0},
    {512, 512, 512, "square", 0, 0},
    {1024, 1024, 1024, "square", 0, 0},
    {400, 1, 5, "linreg X.w", 0, 0},
    {128, 256, 784, "mlp layer1", 0, 0},
    {128, 128, 256, "mlp layer2", 0, 0},
    {128, 10, 128, "mlp head", 0, 0},
    /* The seed models: the MLP 784-512-512-10 forward at batch 128 and 256,
     * and the GPT character model's largest GEMMs. */
    {128, 512, 784, "mlp784 l1", 0, 0},
    {128, 512, 512, "mlp784 l2", 0, 0},
    {128, 10, 512, "mlp784 head", 0, 0},
    {256, 512, 784, "mlp784 l1", 0, 0},
    {256, 512, 512, "mlp784 l2", 0, 0},
    {256, 10, 512, "mlp784 head", 0, 0},
    {768, 128, 384, "gpt char", 0, 0},
    {768, 512, 128, "gpt char", 0, 0},
    /* The seed CNN at batch 128 (ops_conv.c's lowering): each conv's
     * forward GEMM (patches x kernel), its kernel gradient (patches^T x gy)
     * and conv2's input gradient (gy x kernel^T); then the MLP at batch 1024. */
    {128 * 28 * 28, 32, 9, "cnn conv1", 0, 0},
    {9, 32, 128 * 28 * 28, "cnn conv1 dW", 1, 0},
    {128 * 14 * 14, 64, 288, "cnn conv2", 0, 0},
    {288, 64, 128 * 14 * 14, "cnn conv2 dW", 1, 0},
    {128 * 14 * 14, 288, 64, "cnn conv2 dX", 0, 1},
    {1024, 512, 784, "mlp784 l1", 0, 0},
    {1024, 512, 512, "mlp784 l2", 0, 0},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

typedef struct bench {
    td_mesh *mesh;
    int reps;
    int64_t max_size;
    bool json;
    bool deterministic; /* the mesh's context has td_context_options.deterministic */
    double openblas_gflops[NSHAPES];
    float *a[NSHAPES], *b[NSHAPES], *ref[NSHAPES];
    int failures;
} bench;

static double gflops(const shape *s, double seconds)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / seconds * 1e-9;
}

static bool skipped(const bench *b, const shape *s)
{
    return s->m > b->max_size || s->n > b->max_size || s->k > b->max_size;
}

static void host_baseline(bench *b)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        size_t asz = (size_t)(s->m * s->k), bsz = (size_t)(s->k * s->n), csz = (size_t)(s->m * s->n);
        b->a[i] = malloc(asz * 4);
        b->b[i] = malloc(bsz * 4);
        b->ref[i] = malloc(csz * 4);
        uint32_t st = 7u + (uint32_t)i;
        for (size_t j = 0; j < asz; j++, st = st * 1664525u + 1013904223u)
            b->a[i][j] = (float)(st >> 9) / 8388608.0f - 1.0f;
        for (size_t j = 0; j < bsz; j++, st = st * 1664525u + 1013904223u)
            b->b[i][j] = (float)(st >> 9) / 8388608.0f - 1.0f;
        if (skipped(b, s))
            continue;
        double t[64];
        int reps = 0;
        double begin = td_bench_now();
        do {
            double t0 = td_bench_now();
            cblas_sgemm(CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans,
                        s->trans_b ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f, b->a[i],
                        (int)(s->trans_a ? s->m : s->k), b->b[i], (int)(s->trans_b ? s->k : s->n), 0.0f,
                        b->ref[i], (int)s->n);
            t[reps++] = td_bench_now() - t0;
        } while (reps < 64 && (reps < b->reps || td_bench_now() - begin < 0.2));
        b->openblas_gflops[i] = gflops(s, td_bench_median(t, reps));
    }
}

static void print_row(bench *b, const td_mesh_device *md, const char *backend, size_t i, double seconds,
                      double nmse)
{
    const shape *s = &shapes[i];
    double g = gflops(s, seconds), ob = b->openblas_gflops[i];
    if (b->json)
        printf("{\"device\": %u, \"device_name\": \"%s\", \"backend\": \"%s\", \"shape\": \"%s\", "
               "\"m\": %lld, \"n\": %lld, \"k\": %lld, \"seconds\": %.6g, \"gflops\": %.3f, "
               "\"openblas_gflops\": %.3f, \"ratio\": %.3f, \"nmse\": %.3g}\n",
               md->position, md->info.name, backend, s->label, (long long)s->m, (long long)s->n,
               (long long)s->k, seconds, g, ob, g / ob, nmse);
    else
        printf("%-3u %-16s %5lld %5lld %5lld %11.6f %9.2f %9.2f %7.3f  %-11s %s\n", md->position, backend,
               (long long)s->m, (long long)s->n, (long long)s->k, seconds, g, ob, g / ob, s->label,
               md->info.name);
    fflush(stdout);
}

/* One device, one backend path, every shape. Runs on the device's worker. */
static td_status measure(bench *b, const td_mesh_device *md, const char *label)
{
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    td_context *ctx = b->mesh->ctx;
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        if (skipped(b, s))
            continue;
        size_t asz = (size_t)(s->m * s->k), bsz = (size_t)(s->k * s->n), csz = (size_t)(s->m * s->n);
        td_buffer *ba = NULL, *bb = NULL, *bc = NULL;
        td_segment *seg = NULL;
        float *c = malloc(csz * 4);
        td_status st = ops->buffer_create(dev, asz * 4, &ba);
        if (st == TD_OK)
            st = ops->buffer_create(dev, bsz * 4, &bb);
        if (st == TD_OK)
            st = ops->buffer_create(dev, csz * 4, &bc);
        if (st == TD_OK)
            st = ops->write(dev, ba, 0, b->a[i], asz * 4);
        if (st == TD_OK)
            st = ops->write(dev, bb, 0, b->b[i], bsz * 4);
        td_kernel_call call = {.kernel = TD_KERNEL_GEMM, .a = {ba, 0}, .b = {bb, 0}, .out = {bc, 0},
                               .p.gemm = {.trans_a = s->trans_a, .trans_b = s->trans_b, .m = s->m, .n = s->n,
                                          .k = s->k, .lda = s->trans_a ? s->m : s->k,
                                          .ldb = s->trans_b ? s->k : s->n, .ldc = s->n, .alpha = 1.0f,
                                          .beta = 0.0f}};
        if (st == TD_OK)
            st = ops->segment_create(dev, &call, 1, &seg);
        uint64_t ticket;
        double t[64];
        int reps = 0;
        /* Warm-up: first-call compilation (CLBlast: seconds) is not timed. */
        if (st == TD_OK)
            st = ops->segment_run(dev, seg);
        if (st == TD_OK)
            st = ops->submit(dev, &ticket);
        if (st == TD_OK)
            st = ops->wait(dev, ticket, td_context_timeout_ms(ctx));
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
        if (st == TD_OK)
            st = ops->read(dev, bc, 0, c, csz * 4);
        if (st == TD_OK)
            st = ops->submit(dev, &ticket);
        if (st == TD_OK)
            st = ops->wait(dev, ticket, td_context_timeout_ms(ctx));
        if (st == TD_OK) {
            double err = 0, norm = 0;
            for (size_t j = 0; j < csz; j++) {
                double d = (double)c[j] - (double)b->ref[i][j];
                err += d * d;
                norm += (double)b->ref[i][j] * (double)b->ref[i][j];
            }
            double nmse = norm > 0 ? err / norm : err;
            if (!(nmse < 1e-8)) {
                fprintf(stderr, "gemm: %s %lldx%lldx%lld on device %u: wrong result (nmse %g)\n", label,
                        (long long)s->m, (long long)s->n, (long long)s->k, md->position, nmse);
                b->failures++;
            }
            print_row(b, md, label, i, td_bench_median(t, reps), nmse);
        }
        if (seg)
            ops->segment_destroy(dev, seg);
        ops->buffer_destroy(dev, ba);
        ops->buffer_destroy(dev, bb);
        ops->buffer_destroy(dev, bc);
        free(c);
        if (st != TD_OK)
            return st;
    }
    return TD_OK;
}

typedef struct job {
    bench *b;
    uint32_t target;
} job;

static td_status run_job(void *arg, uint32_t position)
{
    job *j = arg;
    if (position != j->target)
        return TD_OK;
    const td_mesh_device *md = &j->b->mesh->devices[position];
    if (j->b->deterministic) {
        if (strcmp(md->ops->name, "cpu") != 0)
            return TD_OK;
        /* Deterministic mode runs the own GEMM whatever TD_CPU_GEMM asks. */
        setenv("TD_CPU_GEMM", "cblas", 1);
        td_status st = measure(j->b, md, "cpu/deterministic");
        unsetenv("TD_CPU_GEMM");
        return st;
    }
    if (strcmp(md->ops->name, "cpu") == 0) {
        /* The backend reads TD_CPU_GEMM at segment_create. */
        setenv("TD_CPU_GEMM", "cblas", 1);
        td_status st = measure(j->b, md, "cpu/cblas");
        setenv("TD_CPU_GEMM", "own", 1);
        if (st == TD_OK)
            st = measure(j->b, md, "cpu/own");
        setenv("TD_CPU_GEMM", "own-fma", 1);
        if (st == TD_OK)
            st = measure(j->b, md, "cpu/own-fma");
        unsetenv("TD_CPU_GEMM");
        return st;
    }
    if (strcmp(md->ops->name, "opencl") != 0)
        return measure(j->b, md, md->ops->name);
    /* The backend reads TD_OPENCL_GEMM at segment_create. */
    setenv("TD_OPENCL_GEMM", "clblast", 1);
    td_status st = measure(j->b, md, "opencl/clblast");
    setenv("TD_OPENCL_GEMM", "own", 1);
    if (st == TD_OK)
        st = measure(j->b, md, "opencl/own");
    unsetenv("TD_OPENCL_GEMM");
    return st;
}

int main(int argc, char **argv)
{
    const char *spec = "cpu:1";
    bench b = {.reps = 5, .max_size = 1 << 30};
    uint32_t cpu_threads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            b.json = true;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            b.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-size") == 0 && i + 1 < argc)
            b.max_size = atoll(argv[++i]);
        else if (strcmp(argv[i], "--cpu-threads") == 0 && i + 1 < argc)
            cpu_threads = (uint32_t)atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--devices SPEC] [--json] [--reps N] [--max-size N] [--cpu-threads N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (b.reps < 1 || b.reps > 64)
        b.reps = 5;
    td_context_options opts;
    td_context_options_init(&opts);
    opts.timeout_ms = 30u * 60u * 1000u; /* CLBlast's cold compile takes tens of seconds */
    opts.cpu_threads = cpu_threads;
    td_context *ctx;
    if (td_context_create(&opts, &ctx) != TD_OK) {
        fprintf(stderr, "gemm: cannot create a context\n");
        return 1;
    }
    td_status st = td_mesh_create(ctx, spec, &b.mesh);
    if (st != TD_OK) {
        fprintf(stderr, "gemm: --devices %s: %s\n", spec, td_last_error(ctx));
        td_context_destroy(ctx);
        return 1;
    }
    host_baseline(&b);
    if (!b.json)
        printf("%-3s %-16s %5s %5s %5s %11s %9s %9s %7s  %-11s %s\n", "dev", "backend", "m", "n", "k", "seconds",
               "gflops", "openblas", "ratio", "shape", "device");
    for (uint32_t d = 0; d < b.mesh->count && st == TD_OK; d++) {
        job j = {&b, d};
        st = td_mesh_run(b.mesh, run_job, &j);
        if (st != TD_OK)
            fprintf(stderr, "gemm: device %u: %s\n", d, td_last_error(ctx));
    }
    /* The CPU devices once more, from a context in deterministic mode
     * (td_context_options.deterministic): rows "cpu/deterministic". */
    td_context *det_ctx = NULL;
    td_mesh *mesh = b.mesh;
    opts.deterministic = true;
    if (st == TD_OK && (st = td_context_create(&opts, &det_ctx)) == TD_OK &&
        (st = td_mesh_create(det_ctx, spec, &b.mesh)) == TD_OK) {
        b.deterministic = true;
        for (uint32_t d = 0; d < b.mesh->count && st == TD_OK; d++) {
            job j = {&b, d};
            if ((st = td_mesh_run(b.mesh, run_job, &j)) != TD_OK)
                fprintf(stderr, "gemm: deterministic device %u: %s\n", d, td_last_error(det_ctx));
        }
        td_mesh_destroy(b.mesh);
    }
    td_context_destroy(det_ctx);
    b.mesh = mesh;
    for (size_t i = 0; i < NSHAPES; i++) {
        free(b.a[i]);
        free(b.b[i]);
        free(b.ref[i]);
    }
    td_mesh_destroy(b.mesh);
    td_context_destroy(ctx);
    return st != TD_OK || b.failures ? 1 : 0;
}
