/* Training step time of the demos' classifier (the CNN by default: the
 * seed's conv 32, conv 64, dense 10; Adam; global batch 128), on
 * synthetic Fashion-MNIST-shaped data (28x28 u8 images, 10 classes: the
 * step's work does not depend on the pixel values).
 *
 * In one process it times the step on --devices. Under mpirun every
 * process joins the job with its local mesh --devices (cpu:K): the global
 * mesh holds P*K devices and each process binds only its own rows of the
 * global batch, [first, first + count) with first = (B / global devices) x
 * its first global position. The reference is measured in the same run:
 * process 0 alone trains the same model on a context that joined nothing,
 * mesh cpu:(P*K), while the other processes wait without spinning. The two
 * trainers take turns, --rounds rounds of --steps steps each, so a burst of
 * load on this shared machine falls on both.
 *
 * A joined step's time is the slowest process's (a step is synchronous;
 * they differ by the last exchange's latency). Printed by process 0: the
 * median step, samples/s, device 0's median phase split (compute, gradient
 * all-reduce, optimizer update; td_trainer_timing), and the ratio
 * reference / joined (> 1: the processes are faster). The losses of the
 * two runs are compared: the same training, up to the order of float sums.
 *
 * --precision fp32|bf16 sets the step's td_trainer_options.precision (default
 * fp32); --reference-precision P (one process) makes the reference the same
 * mesh in precision P instead, taking turns the same way, so the ratio
 * reference / this is bf16's speed-up over fp32 measured in one run.
 * --cpu-threads N sets td_context_options.cpu_threads (default 0: the
 * machine's cores); --reference-cpu-threads M (one process) makes the
 * reference the same mesh and precision on a context of M threads, so the
 * ratio reference / this is what the host pool's extra threads buy, and
 * the losses must agree to the bit (max_loss_difference 0).
 *
 * --bucket-mib M sets td_trainer_options.overlap_bucket_bytes (M MiB, may
 * be fractional; default 0: the one all-reduce after backward);
 * --reference-bucket-mib M (one process) makes the reference the same mesh
 * with buckets of M MiB, taking turns likewise: the ratio reference / this
 * is the overlap's speed-up, measured in one run.
 *
 * --wire fp32|bf16 sets td_trainer_options.wire (the gradients between
 * devices and processes as bfloat16); --reference-wire W (one process)
 * makes the reference the same mesh on wire W, taking turns likewise: the
 * ratio reference / this is what the bf16 wire buys (or costs).
 *
 * usage: [mpirun -np P] step [--devices SPEC] [--model cnn|mlp]
 *        [--batch B] [--steps N] [--warmup W] [--rounds R] [--json]
 *        [--precision fp32|bf16] [--reference-precision fp32|bf16]
 *        [--bucket-mib M] [--reference-bucket-mib M]
 *        [--cpu-threads N] [--reference-cpu-threads M]
 *        [--wire fp32|bf16] [--reference-wire fp32|bf16] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/tandem.h"
#include "td_bench_time.h"

#define MAX_STEPS 1000
#define MAX_ROUNDS 9

typedef struct options {
    const char *devices, *model;
    int64_t batch;
    int steps, warmup, rounds, json;
    td_precision precision;
    int compare_precision; /* --reference-precision given */
    td_precision reference_precision;
    uint64_t bucket_bytes, reference_bucket_bytes;
    int compare_buckets; /* --reference-bucket-mib given */
    td_wire wire, reference_wire;
    int compare_wire; /* --reference-wire given */
    int cpu_threads, reference_cpu_threads; /* the latter > 0: given */
} options;

/* One trainer on one mesh, with the batch rows it binds. */
typedef struct run {
    td_context *ctx;
    td_mesh *mesh;
    td_graph *g;
    td_node image, label, mask, loss, accuracy;
    td_trainer *trainer;
    td_tensor *images, *labels, *masks;
    uint64_t first, count; /* rows of the global batch this process binds */
    uint32_t global;
    int next_step; /* steps trained so far: the data of step s is batch s */
    double *seconds; /* each timed step */
    double *compute, *allreduce, *update; /* device 0's phases, each timed step */
    float *losses;
    int timed;
} run;

static void fail_with(td_context *ctx, const char *what, td_status s)
{
    fprintf(stderr, "step: %s: %s: %s\n", what, td_status_name(s), ctx ? td_last_error(ctx) : "");
    exit(1);
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 31;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* Batch `step`'s rows [first, first + count): the same values whichever
 * process binds them, so the one-process reference trains on the same
 * global batches. */
static void fill(run *r, int step)
{
    uint8_t *x;
    int32_t *y;
    float *m;
    td_tensor_data(r->images, (void **)&x);
    td_tensor_data(r->labels, (void **)&y);
    td_tensor_data(r->masks, (void **)&m);
    for (uint64_t i = 0; i < r->count; i++) {
        const uint64_t row = ((uint64_t)step << 20) + r->first + i;
        for (uint64_t p = 0; p < 28 * 28; p++)
            x[i * 28 * 28 + p] = (uint8_t)(mix(row * 1000003u + p) >> 56);
        y[i] = (int32_t)(mix(row) % 10);
        m[i] = 1.0f;
    }
}

static void open_run(run *r, td_context *ctx, const char *spec, const options *o, td_precision precision,
                     uint64_t bucket_bytes, td_wire wire)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    td_status s = td_mesh_create(ctx, spec, &r->mesh);
    if (s != TD_OK)
        fail_with(ctx, spec, s);
    uint32_t local = 0, first_position = 0;
    td_mesh_size(r->mesh, &local);
    if ((s = td_processes_mesh(r->mesh, &r->global, &first_position)) != TD_OK)
        fail_with(ctx, "td_processes_mesh", s);
    if (o->batch % r->global != 0) {
        fprintf(stderr, "step: the batch %lld does not split evenly over %u devices\n", (long long)o->batch,
                r->global);
        exit(2);
    }
    r->first = (uint64_t)o->batch / r->global * first_position;
    r->count = (uint64_t)o->batch / r->global * local;

    const int64_t xd[4] = {o->batch, 28, 28, 1}, yd[1] = {o->batch};
    td_model_options mo;
    td_model_options_init(&mo);
    if ((s = td_graph_create(ctx, &r->g)) != TD_OK ||
        (s = td_graph_input(r->g, "image", TD_U8, 4, xd, TD_SHARDED, &r->image)) != TD_OK ||
        (s = td_graph_input(r->g, "label", TD_I32, 1, yd, TD_SHARDED, &r->label)) != TD_OK ||
        (s = td_graph_input(r->g, "mask", TD_F32, 1, yd, TD_SHARDED, &r->mask)) != TD_OK ||
        (s = td_model_classification(r->g, o->model, r->image, r->label, r->mask, &mo, &r->loss, &r->accuracy)) !=
            TD_OK)
        fail_with(ctx, "building the model", s);
    uint32_t n_params = 0;
    if ((s = td_graph_params(r->g, 0, NULL, &n_params)) != TD_OK)
        fail_with(ctx, "td_graph_params", s);
    td_node *params = calloc(n_params + 1, sizeof *params);
    if (!params || (s = td_graph_params(r->g, n_params, params, &n_params)) != TD_OK)
        fail_with(ctx, "td_graph_params", params ? s : TD_ERR_OUT_OF_MEMORY);
    /* The demos' optimizer (Adam at their CNN's peak rate), constant. */
    td_trainer_options to;
    td_trainer_options_init(&to);
    to.optimizer = TD_OPTIMIZER_ADAM;
    to.learning_rate = 2e-3f;
    to.n_metrics = 1;
    to.metrics = &r->accuracy;
    to.precision = precision;
    to.overlap_bucket_bytes = bucket_bytes;
    to.wire = wire;
    if ((s = td_trainer_create(r->g, r->mesh, r->loss, n_params, params, &to, &r->trainer)) != TD_OK)
        fail_with(ctx, "td_trainer_create", s);
    free(params);

    const int64_t bx[4] = {(int64_t)r->count, 28, 28, 1}, by[1] = {(int64_t)r->count};
    if ((s = td_tensor_create(ctx, TD_U8, 4, bx, &r->images)) != TD_OK ||
        (s = td_tensor_create(ctx, TD_I32, 1, by, &r->labels)) != TD_OK ||
        (s = td_tensor_create(ctx, TD_F32, 1, by, &r->masks)) != TD_OK)
        fail_with(ctx, "the batch tensors", s);
    const size_t most = (size_t)o->rounds * (size_t)o->steps;
    r->seconds = calloc(most, sizeof *r->seconds);
    r->compute = calloc(most, sizeof *r->compute);
    r->allreduce = calloc(most, sizeof *r->allreduce);
    r->update = calloc(most, sizeof *r->update);
    r->losses = calloc(most + (size_t)o->warmup, sizeof *r->losses);
    if (!r->seconds || !r->compute || !r->allreduce || !r->update || !r->losses)
        fail_with(ctx, "the step records", TD_ERR_OUT_OF_MEMORY);
}

static void close_run(run *r)
{
    free(r->seconds);
    free(r->compute);
    free(r->allreduce);
    free(r->update);
    free(r->losses);
    td_tensor_destroy(r->images);
    td_tensor_destroy(r->labels);
    td_tensor_destroy(r->masks);
    /* the trainer, graph and mesh go with their context */
}

/* `steps` steps; timed ones are recorded. */
static void train(run *r, int steps, int timed)
{
    for (int k = 0; k < steps; k++) {
        fill(r, r->next_step);
        const td_binding b[3] = {{r->image, r->images}, {r->label, r->labels}, {r->mask, r->masks}};
        const double start = td_bench_now();
        td_status s = td_trainer_step(r->trainer, 3, b, &r->losses[r->next_step]);
        const double seconds = td_bench_now() - start;
        if (s != TD_OK)
            fail_with(r->ctx, "td_trainer_step", s);
        r->next_step++;
        if (!timed)
            continue;
        td_step_timing t;
        if ((s = td_trainer_timing(r->trainer, 0, &t)) != TD_OK)
            fail_with(r->ctx, "td_trainer_timing", s);
        r->seconds[r->timed] = seconds;
        r->compute[r->timed] = t.compute;
        r->allreduce[r->timed] = t.allreduce;
        r->update[r->timed] = t.update;
        r->timed++;
    }
}

/* Each joined step's time becomes the slowest process's: every process's
 * times of the last `n` steps, gathered through td_processes_sum. */
static void slowest_steps(td_context *ctx, run *r, int n, uint32_t rank, uint32_t processes)
{
    double *all = calloc((size_t)n * processes, sizeof *all);
    if (!all)
        fail_with(ctx, "gathering step times", TD_ERR_OUT_OF_MEMORY);
    double *mine = r->seconds + r->timed - n;
    memcpy(all + (size_t)rank * (size_t)n, mine, sizeof *mine * (size_t)n);
    td_status s = td_processes_sum(ctx, all, (uint32_t)((size_t)n * processes));
    if (s != TD_OK)
        fail_with(ctx, "gathering step times", s);
    for (int k = 0; k < n; k++)
        for (uint32_t q = 0; q < processes; q++)
            mine[k] = all[(size_t)q * (size_t)n + (size_t)k] > mine[k] ? all[(size_t)q * (size_t)n + (size_t)k]
                                                                       : mine[k];
    free(all);
}

static double median_of(const double *v, int n)
{
    double *copy = malloc(sizeof *copy * (size_t)n);
    if (!copy)
        return 0.0;
    memcpy(copy, v, sizeof *copy * (size_t)n);
    const double m = td_bench_median(copy, n);
    free(copy);
    return m;
}

/* What the cpu backend says its GEMM engine is (td_backend_info.runtime:
 * "GEMM own-fma (avx512)", "GEMM cblas", ...), for the rows. */
static char cpu_gemm[256] = "";

static void find_cpu_gemm(td_context *ctx)
{
    uint32_t n = 0;
    if (td_backend_count(ctx, &n) != TD_OK)
        return;
    for (uint32_t b = 0; b < n; b++) {
        td_backend_info bi;
        td_backend_info_init(&bi);
        if (td_backend_query(ctx, b, &bi) == TD_OK && strcmp(bi.name, "cpu") == 0)
            snprintf(cpu_gemm, sizeof cpu_gemm, "%s", bi.runtime);
    }
}

static void report(const run *r, const char *label, uint32_t processes, const char *spec, const options *o,
                   double reference, bool identical)
{
    const double step = median_of(r->seconds, r->timed);
    const double compute = median_of(r->compute, r->timed), allreduce = median_of(r->allreduce, r->timed),
                 update = median_of(r->update, r->timed);
    if (o->json)
        printf("{\"bench\":\"step\",\"run\":\"%s\",\"model\":\"%s\",\"processes\":%u,\"devices\":\"%s\","
               "\"global_devices\":%u,\"batch\":%lld,\"steps\":%d,\"median_step_s\":%.6g,\"samples_per_s\":%.1f,"
               "\"compute_s\":%.6g,\"allreduce_s\":%.6g,\"update_s\":%.6g,\"reference_over_this\":%.3f,"
               "\"last_loss\":%.6f,\"replicas_identical\":%s,\"cpu_gemm\":\"%s\"}\n",
               label, o->model, processes, spec, r->global, (long long)o->batch, r->timed, step,
               (double)o->batch / step, compute, allreduce, update, reference > 0 ? reference / step : 1.0,
               (double)r->losses[r->next_step - 1], identical ? "true" : "false", cpu_gemm);
    else
        printf("%-9s %-6s %2u x %-6s N=%-3u B=%lld: median step %.4f s (%.0f samples/s; %d steps), device 0: "
               "compute %.4f, all-reduce %.4f, update %.4f s; reference/this %.3f; last loss %.6f; replicas %s; "
               "cpu: %s\n",
               label, o->model, processes, spec, r->global, (long long)o->batch, step, (double)o->batch / step,
               r->timed, compute, allreduce, update, reference > 0 ? reference / step : 1.0,
               (double)r->losses[r->next_step - 1], identical ? "identical" : "DIFFER", cpu_gemm);
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr, "usage: [mpirun -np P] step [--devices SPEC] [--model cnn|mlp] [--batch B] [--steps N] "
                    "[--warmup W] [--rounds R] [--json] [--precision fp32|bf16] [--reference-precision fp32|bf16] "
                    "[--bucket-mib M] [--reference-bucket-mib M] [--cpu-threads N] [--reference-cpu-threads M]\n");
    exit(2);
}

static td_precision precision_named(const char *name)
{
    if (strcmp(name, "bf16") == 0)
        return TD_PRECISION_BF16;
    if (strcmp(name, "fp32") != 0)
        usage();
    return TD_PRECISION_FP32;
}

static options parse(int argc, char **argv)
{
    options o = {"cpu:1", "cnn", 128, 20, 3, 3, 0, TD_PRECISION_FP32, 0, TD_PRECISION_FP32, 0, 0, 0, 0, 0,
                 TD_WIRE_FP32, TD_WIRE_FP32, 0};
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (strcmp(argv[i], "--devices") == 0 && more)
            o.devices = argv[++i];
        else if (strcmp(argv[i], "--model") == 0 && more)
            o.model = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && more)
            o.batch = atoll(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && more)
            o.steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && more)
            o.warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && more)
            o.rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            o.json = 1;
        else if (strcmp(argv[i], "--precision") == 0 && more)
            o.precision = precision_named(argv[++i]);
        else if (strcmp(argv[i], "--wire") == 0 && more)
            o.wire = precision_named(argv[++i]) == TD_PRECISION_BF16 ? TD_WIRE_BF16 : TD_WIRE_FP32;
        else if (strcmp(argv[i], "--reference-wire") == 0 && more) {
            o.reference_wire = precision_named(argv[++i]) == TD_PRECISION_BF16 ? TD_WIRE_BF16 : TD_WIRE_FP32;
            o.compare_wire = 1;
        }
        else if (strcmp(argv[i], "--bucket-mib") == 0 && more)
            o.bucket_bytes = (uint64_t)(atof(argv[++i]) * 1048576.0);
        else if (strcmp(argv[i], "--reference-bucket-mib") == 0 && more) {
            o.reference_bucket_bytes = (uint64_t)(atof(argv[++i]) * 1048576.0);
            o.compare_buckets = 1;
        } else if (strcmp(argv[i], "--reference-precision") == 0 && more) {
            o.reference_precision = precision_named(argv[++i]);
            o.compare_precision = 1;
        } else if (strcmp(argv[i], "--cpu-threads") == 0 && more)
            o.cpu_threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reference-cpu-threads") == 0 && more)
            o.reference_cpu_threads = atoi(argv[++i]);
        else
            usage();
    }
    if (o.batch < 1 || o.steps < 1 || o.warmup < 0 || o.rounds < 1 || o.rounds > MAX_ROUNDS ||
        (long)o.steps * o.rounds > MAX_STEPS || o.cpu_threads < 0 || o.reference_cpu_threads < 0 ||
        (o.reference_cpu_threads > 0 && (o.compare_precision || o.compare_buckets || o.compare_wire)))
        usage();
    return o;
}

int main(int argc, char **argv)
{
    const options o = parse(argc, argv);
    td_context_options co;
    td_context_options_init(&co);
    co.timeout_ms = 120000;
    co.cpu_threads = (uint32_t)o.cpu_threads;
    td_context *ctx = NULL;
    td_status s = td_context_create(&co, &ctx);
    if (s != TD_OK)
        return 1;
    find_cpu_gemm(ctx);
    const bool joined = td_processes_available() && td_processes_launched();
    if (joined && (s = td_processes_join(ctx)) != TD_OK)
        fail_with(ctx, "td_processes_join", s);
    uint32_t rank = 0, processes = 1;
    td_processes_rank(ctx, &rank, &processes);

    run job;
    open_run(&job, ctx, o.devices, &o, o.precision, o.bucket_bytes, o.wire);
    const bool same_mesh = o.compare_precision || o.compare_buckets || o.compare_wire;
    /* The reference, on process 0 only, when there are processes to compare;
     * or the same mesh in the reference precision. */
    td_context *solo_ctx = NULL;
    run solo;
    char solo_spec[32];
    snprintf(solo_spec, sizeof solo_spec, "%s", o.devices);
    const bool compare_threads = o.reference_cpu_threads > 0;
    if (!same_mesh && !compare_threads)
        snprintf(solo_spec, sizeof solo_spec, "cpu:%u", job.global);
    if ((same_mesh || compare_threads) && processes > 1) {
        fprintf(stderr, "step: --reference-precision, --reference-bucket-mib and --reference-cpu-threads are for one "
                        "process\n");
        return 2;
    }
    const bool reference = (processes > 1 && rank == 0) || same_mesh || compare_threads;
    if (reference) {
        td_context_options solo_co = co;
        if (compare_threads)
            solo_co.cpu_threads = (uint32_t)o.reference_cpu_threads;
        if ((s = td_context_create(&solo_co, &solo_ctx)) != TD_OK)
            return 1;
        open_run(&solo, solo_ctx, solo_spec, &o, o.compare_precision ? o.reference_precision : o.precision,
                 o.compare_buckets ? o.reference_bucket_bytes : o.bucket_bytes,
                 o.compare_wire ? o.reference_wire : o.wire);
    }
    double one = 1.0;
    train(&job, o.warmup, 0);
    if (reference)
        train(&solo, o.warmup, 0);
    for (int round = 0; round < o.rounds; round++) {
        if ((s = td_processes_sum(ctx, &one, 1)) != TD_OK) /* a barrier: every process starts the round together */
            fail_with(ctx, "a barrier", s);
        train(&job, o.steps, 1);
        if (processes > 1)
            slowest_steps(ctx, &job, o.steps, rank, processes);
        if (reference)
            train(&solo, o.steps, 1);
    }
    if ((s = td_processes_sum(ctx, &one, 1)) != TD_OK)
        fail_with(ctx, "a barrier", s);

    /* Collective over the processes (a hash of every process's parameters). */
    bool identical = false, solo_identical = false;
    if ((s = td_trainer_replicas_identical(job.trainer, &identical)) != TD_OK)
        fail_with(ctx, "td_trainer_replicas_identical", s);
    if (reference && (s = td_trainer_replicas_identical(solo.trainer, &solo_identical)) != TD_OK)
        fail_with(solo_ctx, "td_trainer_replicas_identical", s);
    if (rank == 0) {
        const double reference_step = reference ? median_of(solo.seconds, solo.timed) : 0.0;
        const char *label = processes > 1                      ? "processes"
                            : o.precision == TD_PRECISION_BF16 ? "bf16"
                            : o.compare_buckets                ? "buckets"
                                                               : "one";
        report(&job, label, processes, o.devices, &o, reference_step, identical);
        if (reference) {
            report(&solo, o.compare_precision ? (o.reference_precision == TD_PRECISION_BF16 ? "ref-bf16" : "ref-fp32")
                          : o.compare_buckets ? "ref-buckets"
                          : compare_threads   ? "ref-threads"
                                              : "reference",
                   1, solo_spec, &o, 0.0, solo_identical);
            double most = 0.0;
            for (int k = 0; k < job.next_step; k++)
                most = fmax(most, fabs((double)job.losses[k] - (double)solo.losses[k]));
            if (o.json)
                printf("{\"bench\":\"step\",\"max_loss_difference\":%.3g,\"steps\":%d}\n", most, job.next_step);
            else
                printf("losses of the two runs differ by at most %.3g over %d steps\n", most, job.next_step);
        }
    }
    close_run(&job);
    if (reference) {
        close_run(&solo);
        td_context_destroy(solo_ctx);
    }
    td_context_destroy(ctx);
    return 0;
}
