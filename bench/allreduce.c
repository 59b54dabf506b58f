/* Ring all-reduce bandwidth, with the host memcpy bandwidth measured in the
 * same run as the reference. One row per (mesh, size):
 *   n bytes seconds(median) algbw_gbs busbw_gbs memcpy_gbs busbw/memcpy
 * algbw = bytes / time; busbw = algbw * 2(N-1)/N (what each rank moves).
 * The collective is the in-place pmean of one buffer (sum, then the chunk
 * owner scales by 1/N), as a training step uses it.
 *
 * usage: allreduce [--devices SPEC] [--max-bytes B] [--path auto|ring|direct] [--wire fp32|bf16] [--json]
 * Without --devices: cpu:2, cpu:4 and cpu:8. --path ring runs the ring
 * proper on a mesh whose all-reduce would be direct (td_ring_direct), to
 * compare the two in one build. --wire bf16 rounds the partial sums to
 * bfloat16 as they pass between ranks (td_ring_wire, the trainer's
 * --wire bf16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_bench_support.h"
#include "td_bench_time.h"

#define TRIALS 5

typedef struct bench {
    td_mesh *mesh;
    td_ring *ring;
    td_buffer **buffers;
    size_t max_count, count;
    int reps;
    float *host;
    td_ring_wire wire;
} bench;

static td_ring_wire wire_option = TD_RING_WIRE_FP32;

static void scale_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    const bench *b = user;
    (void)rank;
    (void)offset;
    td_ring_divide(data, count, b->mesh->count); /* exactly what pmean does */
}

static td_status setup_job(void *arg, uint32_t pos)
{
    bench *b = arg;
    td_mesh_device *md = &b->mesh->devices[pos];
    td_status s = md->ops->buffer_create(md->dev, b->max_count * sizeof(float), &b->buffers[pos]);
    if (s == TD_OK)
        s = td_ring_reserve(b->ring, pos, b->max_count * sizeof(float));
    if (s == TD_OK)
        s = md->ops->write(md->dev, b->buffers[pos], 0, b->host, b->max_count * sizeof(float));
    uint64_t t;
    if (s == TD_OK && (s = md->ops->submit(md->dev, &t)) == TD_OK)
        s = md->ops->wait(md->dev, t, 60000);
    return s;
}

static td_status teardown_job(void *arg, uint32_t pos)
{
    bench *b = arg;
    td_mesh_device *md = &b->mesh->devices[pos];
    if (b->buffers[pos])
        md->ops->buffer_destroy(md->dev, b->buffers[pos]);
    return TD_OK;
}

static td_status reduce_job(void *arg, uint32_t pos)
{
    bench *b = arg;
    td_status s = TD_OK;
    for (int i = 0; i < b->reps && s == TD_OK; i++)
        s = td_ring_allreduce_consume(b->ring, pos, b->buffers[pos], 0, b->buffers[pos], 0, b->count, scale_finalize,
                                      b, b->wire); /* in place: the input is the output anyway */
    return s;
}

static double memcpy_gbs(float *dst, const float *src, size_t bytes, int reps)
{
    double t[TRIALS];
    for (int k = 0; k < TRIALS; k++) {
        double a = td_bench_now();
        for (int i = 0; i < reps; i++) {
            memcpy(dst, src, bytes);
            __asm__ volatile("" ::"r"(dst) : "memory");
        }
        t[k] = (td_bench_now() - a) / reps;
    }
    return (double)bytes / td_bench_median(t, TRIALS) / 1e9;
}

static int run_mesh(td_context *ctx, const char *spec, size_t max_bytes, int ring_proper, int json)
{
    bench b;
    memset(&b, 0, sizeof b);
    b.wire = wire_option;
    const char *wire = b.wire == TD_RING_WIRE_BF16 ? "bf16" : "fp32";
    td_status s = td_mesh_create(ctx, spec, &b.mesh);
    if (s != TD_OK) {
        fprintf(stderr, "allreduce: mesh '%s': %s: %s\n", spec, td_status_name(s), td_last_error(ctx));
        return 1;
    }
    if ((s = td_mesh_ring(b.mesh, &b.ring)) != TD_OK) {
        fprintf(stderr, "allreduce: ring on '%s': %s: %s\n", spec, td_status_name(s), td_last_error(ctx));
        return 1;
    }
    if (ring_proper)
        td_ring_set_direct(b.ring, 0);
    const char *path = td_ring_direct(b.ring) ? "direct" : "ring";
    uint32_t n = b.mesh->count;
    b.max_count = max_bytes / sizeof(float);
    b.buffers = calloc(n, sizeof *b.buffers);
    b.host = malloc(max_bytes);
    float *copy_dst = malloc(max_bytes);
    if (!b.buffers || !b.host || !copy_dst) {
        fprintf(stderr, "allreduce: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < b.max_count; i++)
        b.host[i] = 1.0f + (float)(i % 7);
    memset(copy_dst, 0, max_bytes);
    if ((s = td_mesh_run(b.mesh, setup_job, &b)) != TD_OK) {
        fprintf(stderr, "allreduce: setup on '%s': %s: %s\n", spec, td_status_name(s), td_last_error(ctx));
        return 1;
    }
    if (!json)
        printf("%-28s %3s %10s %12s %10s %10s %10s %8s\n", "mesh", "n", "bytes", "median_s", "algbw", "busbw",
               "memcpy", "bus/mem");
    for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
        b.count = bytes / sizeof(float);
        size_t budget = (size_t)256 << 20; /* about 256 MiB moved per trial */
        b.reps = (int)(budget / bytes / n) ? (int)(budget / bytes / n) : 1;
        if (b.reps > 2000)
            b.reps = 2000;
        double t[TRIALS];
        int saved = b.reps;
        b.reps = 1; /* warm-up */
        td_mesh_run(b.mesh, reduce_job, &b);
        b.reps = saved;
        for (int k = 0; k < TRIALS; k++) {
            double a = td_bench_now();
            if ((s = td_mesh_run(b.mesh, reduce_job, &b)) != TD_OK) {
                fprintf(stderr, "allreduce: %s: %s\n", td_status_name(s), td_last_error(ctx));
                return 1;
            }
            t[k] = (td_bench_now() - a) / b.reps;
        }
        double sec = td_bench_median(t, TRIALS);
        double alg = (double)bytes / sec / 1e9;
        double bus = alg * 2.0 * (n - 1) / n;
        double mem = memcpy_gbs(copy_dst, b.host, bytes, b.reps * (int)n > 1 ? b.reps : 1);
        if (json)
            printf("{\"bench\":\"allreduce\",\"mesh\":\"%s\",\"path\":\"%s\",\"wire\":\"%s\",\"n\":%u,\"bytes\":%zu,\"seconds\":%.9g,\"algbw_gbs\":%.4g,"
                   "\"busbw_gbs\":%.4g,\"memcpy_gbs\":%.4g,\"busbw_over_memcpy\":%.3f}\n",
                   spec, path, wire, n, bytes, sec, alg, bus, mem, bus / mem);
        else
            printf("%-28s %3u %10zu %12.6g %10.3f %10.3f %10.3f %8.2f\n", spec, n, bytes, sec, alg, bus, mem,
                   bus / mem);
        fflush(stdout);
    }
    td_mesh_run(b.mesh, teardown_job, &b);
    td_mesh_destroy(b.mesh);
    free(b.buffers);
    free(b.host);
    free(copy_dst);
    return 0;
}

int main(int argc, char **argv)
{
    const char *spec = NULL;
    size_t max_bytes = (size_t)64 << 20;
    int json = 0, ring_proper = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
            max_bytes = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--path") == 0 && i + 1 < argc && strcmp(argv[i + 1], "auto") == 0)
            i++;
        else if (strcmp(argv[i], "--path") == 0 && i + 1 < argc && strcmp(argv[i + 1], "direct") == 0)
            i++; /* direct wherever the mesh allows: the default */
        else if (strcmp(argv[i], "--path") == 0 && i + 1 < argc && strcmp(argv[i + 1], "ring") == 0)
            ring_proper = 1, i++;
        else if (strcmp(argv[i], "--wire") == 0 && i + 1 < argc && strcmp(argv[i + 1], "fp32") == 0)
            wire_option = TD_RING_WIRE_FP32, i++;
        else if (strcmp(argv[i], "--wire") == 0 && i + 1 < argc && strcmp(argv[i + 1], "bf16") == 0)
            wire_option = TD_RING_WIRE_BF16, i++;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else {
            fprintf(stderr, "allreduce: unknown or bad argument '%s'\nusage: allreduce [--devices SPEC] [--max-bytes B] "
                            "[--path auto|ring|direct] [--wire fp32|bf16] [--json]\n",
                    argv[i]);
            return 2;
        }
    }
    if (max_bytes < 4096)
        max_bytes = 4096;
    td_context *ctx;
    td_context_options opts;
    td_context_options_init(&opts);
    opts.timeout_ms = 120000;
    if (td_context_create(&opts, &ctx) != TD_OK)
        return 1;
    int rc = 0;
    if (spec) {
        rc = run_mesh(ctx, spec, max_bytes, ring_proper, json);
    } else {
        const char *specs[] = {"cpu:2", "cpu:4", "cpu:8"};
        for (int i = 0; i < 3 && rc == 0; i++)
            rc = run_mesh(ctx, specs[i], max_bytes, ring_proper, json);
    }
    td_context_destroy(ctx);
    return rc;
}
