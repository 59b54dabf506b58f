/* The hierarchical all-reduce across processes (run under mpirun), beside
 * two references measured in the same run:
 *   - Open MPI's own MPI_Allreduce (MPI_SUM, MPI_FLOAT) of a buffer of the
 *     same size on MPI_COMM_WORLD, one rank per process;
 *   - tandem's ring in one process over the same total device count (a
 *     second context that did not join, mesh cpu:(P*K)), run by process 0
 *     alone while the others wait without spinning.
 * The collective is the in-place pmean the single-process bench times
 * (bench/allreduce.c): every device sums, the owner of each part divides by
 * the global device count. One row per size, printed by process 0:
 *   bytes, then per collective the median seconds and busbw, then the
 *   speed ratios (reference seconds / hierarchical seconds: > 1 means the
 *   hierarchical all-reduce is faster).
 * busbw = algbw * 2(N-1)/N with N = the global device count for all three,
 * so the busbw ratios are the time ratios.
 *
 * A trial's time is the slowest process's: every process times the same
 * loop after a barrier, and the times are gathered. Barriers and gathers
 * go through td_processes_sum, which polls with sleeps: a process that
 * waits does not take a core from the ones measuring (this machine has
 * two). MPI itself is called only for the reference and the probe.
 *
 * --probe adds the parameters of the cost model (docs/SCALING.md),
 * measured in the same run: the transport's latency alpha (half a
 * ping-pong of 8 bytes between processes 0 and 1) and bandwidth beta
 * (16 MiB ping-pong, alpha taken off); one thread's memcpy and y += x
 * bandwidth on process 0, in cache and out of it, while the others wait;
 * and what a nanosleep of 1 us lasts (the exchange between processes
 * polls with such sleeps: their real length is its latency floor).
 *
 * --wire bf16 runs tandem's all-reduces (both) with bfloat16 partial sums
 * between ranks and 2-byte values between processes (td_ring_wire);
 * MPI_Allreduce stays float.
 *
 * usage: mpirun -np P allreduce_mpi [--local K] [--min-bytes B]
 *        [--max-bytes B] [--budget-mib M] [--trials T] [--no-solo]
 *        [--probe] [--wire fp32|bf16] [--json] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "td_bench_support.h"
#include "td_bench_time.h"

#define MAX_TRIALS 15

typedef struct options {
    uint32_t local;
    size_t min_bytes, max_bytes, budget_bytes;
    int trials, solo, probe, json;
} options;

/* One mesh's pmean: a buffer per local device, the same count on each. */
typedef struct collective {
    td_mesh *mesh;
    td_ring *ring;
    td_buffer **buffers;
    size_t max_count, count;
    int reps;
    const float *initial;
} collective;

/* The job's processes as the bench sees them. */
typedef struct job {
    td_context *ctx;
    uint32_t rank, count;
    double *slots; /* one per process, for gathers through td_processes_sum */
} job;

static void fail_with(td_context *ctx, const char *what, td_status s)
{
    fprintf(stderr, "allreduce_mpi: %s: %s: %s\n", what, td_status_name(s), td_last_error(ctx));
    exit(1);
}

/* pmean's finalize: the sum over every device of every process, divided
 * by their count (the joined ring's global count; the mesh's in one
 * process). */
static void mean_finalize(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    const collective *c = user;
    (void)rank;
    (void)offset;
    td_ring_divide(data, count, td_ring_global_count(c->ring));
}

static td_status setup_job(void *arg, uint32_t pos)
{
    collective *c = arg;
    td_mesh_device *md = &c->mesh->devices[pos];
    const size_t bytes = c->max_count * sizeof(float);
    td_status s = md->ops->buffer_create(md->dev, bytes, &c->buffers[pos]);
    if (s == TD_OK)
        s = td_ring_reserve(c->ring, pos, bytes);
    if (s == TD_OK)
        s = md->ops->write(md->dev, c->buffers[pos], 0, c->initial, bytes);
    uint64_t t;
    if (s == TD_OK && (s = md->ops->submit(md->dev, &t)) == TD_OK)
        s = md->ops->wait(md->dev, t, 60000);
    return s;
}

static td_status teardown_job(void *arg, uint32_t pos)
{
    collective *c = arg;
    td_mesh_device *md = &c->mesh->devices[pos];
    if (c->buffers[pos])
        md->ops->buffer_destroy(md->dev, c->buffers[pos]);
    return TD_OK;
}

static td_ring_wire wire_option = TD_RING_WIRE_FP32; /* --wire */

static td_status reduce_job(void *arg, uint32_t pos)
{
    collective *c = arg;
    td_status s = TD_OK;
    for (int i = 0; i < c->reps && s == TD_OK; i++) /* in place: consuming the input changes nothing */
        s = td_ring_allreduce_consume(c->ring, pos, c->buffers[pos], 0, c->buffers[pos], 0, c->count, mean_finalize, c,
                                      wire_option);
    return s;
}

static void collective_open(collective *c, td_context *ctx, const char *spec, size_t max_bytes, const float *initial)
{
    memset(c, 0, sizeof *c);
    td_status s = td_mesh_create(ctx, spec, &c->mesh);
    if (s != TD_OK)
        fail_with(ctx, spec, s);
    if ((s = td_mesh_ring(c->mesh, &c->ring)) != TD_OK)
        fail_with(ctx, "the mesh's ring", s);
    c->max_count = max_bytes / sizeof(float);
    c->initial = initial;
    c->buffers = calloc(c->mesh->count, sizeof *c->buffers);
    if (!c->buffers) {
        fprintf(stderr, "allreduce_mpi: out of memory\n");
        exit(1);
    }
    if ((s = td_mesh_run(c->mesh, setup_job, c)) != TD_OK)
        fail_with(ctx, "setting up the buffers", s);
}

static void collective_close(collective *c)
{
    td_mesh_run(c->mesh, teardown_job, c);
    td_mesh_destroy(c->mesh);
    free(c->buffers);
}

/* Every process arrives before any leaves; waiting sleeps. */
static void barrier(job *j)
{
    double one = 1.0;
    td_status s = td_processes_sum(j->ctx, &one, 1);
    if (s != TD_OK)
        fail_with(j->ctx, "a barrier between processes", s);
}

/* The largest of every process's `value`: each fills its slot, the sum
 * gathers them. */
static double slowest(job *j, double value)
{
    memset(j->slots, 0, sizeof *j->slots * j->count);
    j->slots[j->rank] = value;
    td_status s = td_processes_sum(j->ctx, j->slots, j->count);
    if (s != TD_OK)
        fail_with(j->ctx, "gathering the trial times", s);
    double most = 0.0;
    for (uint32_t q = 0; q < j->count; q++)
        most = j->slots[q] > most ? j->slots[q] : most;
    return most;
}

static int reps_for(const options *o, size_t bytes)
{
    size_t reps = o->budget_bytes / bytes;
    return reps < 1 ? 1 : reps > 1000 ? 1000 : (int)reps;
}

/* Median over trials of the slowest process's seconds per all-reduce. */
static double time_hierarchical(job *j, collective *c, const options *o, size_t bytes)
{
    double t[MAX_TRIALS];
    c->count = bytes / sizeof(float);
    c->reps = 1; /* warm-up */
    td_status s = td_mesh_run(c->mesh, reduce_job, c);
    if (s != TD_OK)
        fail_with(j->ctx, "the hierarchical all-reduce", s);
    c->reps = reps_for(o, bytes);
    for (int k = 0; k < o->trials; k++) {
        barrier(j);
        const double start = td_bench_now();
        if ((s = td_mesh_run(c->mesh, reduce_job, c)) != TD_OK)
            fail_with(j->ctx, "the hierarchical all-reduce", s);
        t[k] = slowest(j, (td_bench_now() - start) / c->reps);
    }
    return td_bench_median(t, o->trials);
}

/* The reference: MPI_Allreduce of the same bytes, out of place, so the
 * values stay finite however many repetitions run. */
static double time_mpi(job *j, const options *o, size_t bytes, const float *send, float *receive)
{
    double t[MAX_TRIALS];
    const int count = (int)(bytes / sizeof(float)), reps = reps_for(o, bytes);
    MPI_Allreduce(send, receive, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    for (int k = 0; k < o->trials; k++) {
        barrier(j);
        const double start = td_bench_now();
        for (int i = 0; i < reps; i++)
            if (MPI_Allreduce(send, receive, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
                fprintf(stderr, "allreduce_mpi: MPI_Allreduce failed\n");
                exit(1);
            }
        t[k] = slowest(j, (td_bench_now() - start) / reps);
    }
    return td_bench_median(t, o->trials);
}

/* The one-process ring over the same device count, on process 0 only;
 * the others wait in the barrier that follows (sleeping). Returns 0 on
 * the other processes. */
static double time_solo(job *j, collective *solo, const options *o, size_t bytes)
{
    double t[MAX_TRIALS], median = 0.0;
    if (j->rank == 0) {
        solo->count = bytes / sizeof(float);
        solo->reps = 1;
        td_status s = td_mesh_run(solo->mesh, reduce_job, solo);
        solo->reps = reps_for(o, bytes);
        for (int k = 0; k < o->trials && s == TD_OK; k++) {
            const double start = td_bench_now();
            s = td_mesh_run(solo->mesh, reduce_job, solo);
            t[k] = (td_bench_now() - start) / solo->reps;
        }
        if (s != TD_OK) {
            fprintf(stderr, "allreduce_mpi: the one-process ring: %s\n", td_status_name(s));
            exit(1);
        }
        median = td_bench_median(t, o->trials);
    }
    barrier(j);
    return median;
}

/* Half a round trip of `bytes` between processes 0 and 1, median over
 * trials; the other processes only wait in the barrier after. */
static double ping_pong(job *j, size_t bytes, int reps, char *buffer)
{
    double t[MAX_TRIALS];
    const int trials = 7;
    if (j->rank < 2) {
        const int peer = 1 - (int)j->rank;
        for (int k = 0; k < trials; k++) {
            /* A round trip first, so neither starts the clock before the other is there. */
            MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 2, NULL, 0, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            const double start = td_bench_now();
            for (int i = 0; i < reps; i++) {
                if (j->rank == 0) {
                    MPI_Send(buffer, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(buffer, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buffer, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buffer, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                }
            }
            t[k] = (td_bench_now() - start) / (2.0 * reps);
        }
    }
    barrier(j);
    return j->rank < 2 ? td_bench_median(t, trials) : 0.0;
}

/* One thread's memcpy and y += x over `bytes`, in GB/s (process 0): at
 * 4 MiB the buffers stay in this machine's last-level cache, at 64 MiB
 * they do not. */
static void host_bandwidth(size_t bytes, double *copy_gbs, double *add_gbs)
{
    const size_t n = bytes / sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    if (!x || !y) {
        fprintf(stderr, "allreduce_mpi: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(i % 5);
        y[i] = 0.0f;
    }
    double tc[MAX_TRIALS], ta[MAX_TRIALS];
    const int trials = 7;
    for (int k = 0; k < trials; k++) {
        double start = td_bench_now();
        memcpy(y, x, bytes);
        __asm__ volatile("" ::"r"(y) : "memory");
        tc[k] = td_bench_now() - start;
        start = td_bench_now();
        for (size_t i = 0; i < n; i++)
            y[i] += x[i];
        __asm__ volatile("" ::"r"(y) : "memory");
        ta[k] = td_bench_now() - start;
    }
    *copy_gbs = (double)bytes / td_bench_median(tc, trials) / 1e9;
    *add_gbs = (double)bytes / td_bench_median(ta, trials) / 1e9;
    free(x);
    free(y);
}

/* What the exchange's first poll sleep really lasts: it asks for 1 us,
 * the kernel's timer slack (50 us by default) and wake-up decide. */
static double shortest_sleep(void)
{
    double t[MAX_TRIALS];
    const int trials = 7, reps = 20;
    for (int k = 0; k < trials; k++) {
        const double start = td_bench_now();
        for (int i = 0; i < reps; i++) {
            struct timespec ts = {0, 1000};
            nanosleep(&ts, NULL);
        }
        t[k] = (td_bench_now() - start) / reps;
    }
    return td_bench_median(t, trials);
}

static void probe(job *j, const options *o)
{
    const size_t large = (size_t)16 << 20;
    char *buffer = calloc(1, large);
    if (!buffer) {
        fprintf(stderr, "allreduce_mpi: out of memory\n");
        exit(1);
    }
    const double alpha = ping_pong(j, 8, 2000, buffer);
    const double large_s = ping_pong(j, large, 10, buffer);
    double copy_cached = 0.0, add_cached = 0.0, copy_dram = 0.0, add_dram = 0.0, sleep_s = 0.0;
    if (j->rank == 0) {
        host_bandwidth((size_t)4 << 20, &copy_cached, &add_cached);
        host_bandwidth((size_t)64 << 20, &copy_dram, &add_dram);
        sleep_s = shortest_sleep();
    }
    barrier(j);
    free(buffer);
    if (j->rank != 0)
        return;
    const double beta_gbs = (double)large / (large_s - alpha) / 1e9;
    if (o->json)
        printf("{\"bench\":\"allreduce_mpi_probe\",\"processes\":%u,\"alpha_s\":%.4g,\"pingpong_16mib_s\":%.4g,"
               "\"beta_gbs\":%.4g,\"memcpy_4mib_gbs\":%.4g,\"add_4mib_gbs\":%.4g,\"memcpy_64mib_gbs\":%.4g,"
               "\"add_64mib_gbs\":%.4g,\"sleep_1us_s\":%.4g}\n",
               j->count, alpha, large_s, beta_gbs, copy_cached, add_cached, copy_dram, add_dram, sleep_s);
    else
        printf("probe: %u processes; alpha (8 B half ping-pong) %.3g s; 16 MiB half ping-pong %.3g s, beta %.3f "
               "GB/s; one thread: memcpy %.3f GB/s, y += x %.3f GB/s at 4 MiB, %.3f and %.3f GB/s at 64 MiB; "
               "nanosleep(1 us) %.3g s\n",
               j->count, alpha, large_s, beta_gbs, copy_cached, add_cached, copy_dram, add_dram, sleep_s);
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr, "usage: mpirun -np P allreduce_mpi [--local K] [--min-bytes B] [--max-bytes B] "
                    "[--budget-mib M] [--trials T] [--no-solo] [--probe] [--wire fp32|bf16] [--json]\n");
    exit(2);
}

static options parse(int argc, char **argv)
{
    options o = {1, 4096, (size_t)64 << 20, (size_t)64 << 20, 5, 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (strcmp(argv[i], "--local") == 0 && more)
            o.local = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--min-bytes") == 0 && more)
            o.min_bytes = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--max-bytes") == 0 && more)
            o.max_bytes = (size_t)strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--budget-mib") == 0 && more)
            o.budget_bytes = (size_t)strtoull(argv[++i], NULL, 10) << 20;
        else if (strcmp(argv[i], "--trials") == 0 && more)
            o.trials = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-solo") == 0)
            o.solo = 0;
        else if (strcmp(argv[i], "--probe") == 0)
            o.probe = 1;
        else if (strcmp(argv[i], "--json") == 0)
            o.json = 1;
        else if (strcmp(argv[i], "--wire") == 0 && more && strcmp(argv[i + 1], "bf16") == 0)
            wire_option = TD_RING_WIRE_BF16, i++;
        else if (strcmp(argv[i], "--wire") == 0 && more && strcmp(argv[i + 1], "fp32") == 0)
            wire_option = TD_RING_WIRE_FP32, i++;
        else
            usage();
    }
    if (o.local < 1 || o.local > 64 || o.trials < 1 || o.trials > MAX_TRIALS || o.min_bytes < sizeof(float) ||
        o.max_bytes < o.min_bytes || o.max_bytes > ((size_t)1 << 30) || o.budget_bytes == 0)
        usage();
    return o;
}

int main(int argc, char **argv)
{
    const options o = parse(argc, argv);
    if (!td_processes_available() || !td_processes_launched()) {
        fprintf(stderr, "allreduce_mpi: run it under mpirun (this build %s MPI)\n",
                td_processes_available() ? "has" : "lacks");
        return 2;
    }
    td_context_options co;
    td_context_options_init(&co);
    co.timeout_ms = 120000;
    job j = {0};
    td_status s = td_context_create(&co, &j.ctx);
    if (s != TD_OK)
        return 1;
    if ((s = td_processes_join(j.ctx)) != TD_OK)
        fail_with(j.ctx, "td_processes_join", s);
    td_processes_rank(j.ctx, &j.rank, &j.count);
    j.slots = calloc(j.count, sizeof *j.slots);

    float *initial = malloc(o.max_bytes), *receive = malloc(o.max_bytes);
    if (!j.slots || !initial || !receive) {
        fprintf(stderr, "allreduce_mpi: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < o.max_bytes / sizeof(float); i++)
        initial[i] = 1.0f + (float)(i % 7);

    if (o.probe && j.count > 1)
        probe(&j, &o);

    char spec[32];
    snprintf(spec, sizeof spec, "cpu:%u", o.local);
    collective joined;
    collective_open(&joined, j.ctx, spec, o.max_bytes, initial);
    uint32_t global = 0, first = 0;
    if ((s = td_processes_mesh(joined.mesh, &global, &first)) != TD_OK)
        fail_with(j.ctx, "td_processes_mesh", s);

    /* The one-process reference lives on a context that joined nothing;
     * only process 0 makes it (the others would only compete for cores). */
    td_context *solo_ctx = NULL;
    collective solo;
    if (o.solo && j.rank == 0) {
        if ((s = td_context_create(&co, &solo_ctx)) != TD_OK)
            return 1;
        char solo_spec[32];
        snprintf(solo_spec, sizeof solo_spec, "cpu:%u", global);
        collective_open(&solo, solo_ctx, solo_spec, o.max_bytes, initial);
    }
    barrier(&j);

    if (j.rank == 0 && !o.json)
        printf("%9s %4s %4s %10s | %11s %7s | %11s %7s | %11s %7s | %8s %8s\n", "processes", "K", "N", "bytes",
               "hier_s", "busbw", "mpi_s", "busbw", "solo_s", "busbw", "mpi/hier", "solo/hier");
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
        const double hier = time_hierarchical(&j, &joined, &o, bytes);
        const double mpi = time_mpi(&j, &o, bytes, initial, receive);
        const double one = o.solo ? time_solo(&j, &solo, &o, bytes) : 0.0;
        if (j.rank != 0)
            continue;
        const double bus = 2.0 * (global - 1) / global * (double)bytes / 1e9;
        if (o.json)
            printf("{\"bench\":\"allreduce_mpi\",\"processes\":%u,\"local\":%u,\"n\":%u,\"bytes\":%zu,"
                   "\"hier_s\":%.6g,\"hier_busbw_gbs\":%.4g,\"mpi_s\":%.6g,\"mpi_busbw_gbs\":%.4g,"
                   "\"solo_s\":%.6g,\"solo_busbw_gbs\":%.4g,\"mpi_over_hier\":%.3f,\"solo_over_hier\":%.3f}\n",
                   j.count, o.local, global, bytes, hier, bus / hier, mpi, bus / mpi, one, one > 0 ? bus / one : 0.0,
                   mpi / hier, one / hier);
        else
            printf("%9u %4u %4u %10zu | %11.5g %7.3f | %11.5g %7.3f | %11.5g %7.3f | %8.3f %8.3f\n", j.count,
                   o.local, global, bytes, hier, bus / hier, mpi, bus / mpi, one, one > 0 ? bus / one : 0.0,
                   mpi / hier, one / hier);
        fflush(stdout);
    }

    collective_close(&joined);
    if (solo_ctx) {
        collective_close(&solo);
        td_context_destroy(solo_ctx);
    }
    barrier(&j);
    free(initial);
    free(receive);
    free(j.slots);
    td_context_destroy(j.ctx); /* the last joined context: finalizes MPI */
    return 0;
}
