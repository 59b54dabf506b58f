/* A process of the job that dies or hangs: every other process must end
 * with an error naming it, within a bound, and no process may hang (Open
 * MPI 4.1 has no fault-tolerant MPI, so the job ends). Run under mpirun by
 * run_mpi_fault_test.sh, which decides pass or fail: once a process dies
 * the processes cannot count their checks together (mt_finish), so each
 * survivor writes what it saw to a file in DIR, and the script reads the
 * files, mpirun's output and the clock after mpirun has returned.
 *
 * The job trains the MLP of mpi_trainer.c, wider, on a global mesh (cpu:1
 * per process, or cpu:N) with a 2 s context timeout, so the bounds are
 * short.
 * Process 1 is the faulty one. Usage: mpi_rank_faults MODE DIR [N], MODE
 * one of
 *   none       no fault: STEPS steps, checks, the usual closing line (the
 *              control: the fault runs do not pass on a job that fails
 *              anyway)
 *   kill       process 1 raise(SIGKILL)s before step 3: mpirun sees the
 *              death and ends the job
 *   hang       process 1 raise(SIGSTOP)s before step 3, alive but silent:
 *              every other process's step 3 fails with TD_ERR_TIMEOUT
 *              naming process 1, and it ends the job (td_processes_abort)
 *   hang-exit  as hang, but the others destroy their context and return
 *              non-zero instead of aborting: destroying after a timeout
 *              must not wait for process 1 (MPI_Finalize would), and the
 *              non-zero exit ends the job
 *   hang-join  every process initializes MPI itself (as an application
 *              that uses MPI does), then process 1 stops before
 *              td_processes_join. (Where tandem initializes MPI, a process
 *              that never starts it hangs the others inside
 *              MPI_Init_thread, Open MPI's start-up fence, which has no
 *              bounded form: not tested.)
 *   hang-mesh  process 1 stops before td_mesh_create (whose all-gather of
 *              device counts then waits for it)
 *   hang-overlap  as hang, with the all-reduce in buckets during backward
 *              (overlap_bucket_bytes): the others' step 3 fails in a
 *              bucket's exchange on the ring's exchange thread, with the
 *              same status, message and bounds
 *
 * Files in DIR: `fault` (process 1: the wall-clock time it failed) and
 * `process-Q` for each survivor Q (the failed call, its status, how long
 * it took, when it returned, the steps done before, the message; and, on
 * a context that joined, what a later exchange answers: at once, that the
 * group broke). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "mpi_test_util.h"

/* HIDDEN is wide so that each process's block of the gradients (about
 * 9 K floats / 3) is past Open MPI's eager limit (4 KiB on shared
 * memory): the sends to the silent process are still pending when the
 * others give up, and cancelling them is exercised too. */
enum { BATCH = 24, IN = 5, HIDDEN = 1024, OUT = 3, STEPS = 6, FAULT_STEP = 3, FAULTY = 1 };
/* Small, so the bounds the script checks (multiples of it) stay short;
 * large enough that three processes on two shared cores never miss it
 * while healthy (a step takes about a millisecond). */
#define TIMEOUT_MS 2000u

typedef enum {
    MODE_NONE,
    MODE_KILL,
    MODE_HANG,
    MODE_HANG_EXIT,
    MODE_HANG_JOIN,
    MODE_HANG_MESH,
    MODE_HANG_OVERLAP
} mode;

typedef struct model {
    td_graph *g;
    td_node x, y, loss, params[4];
} model;

typedef struct job {
    mode mode;
    const char *dir;
    uint32_t rank, count; /* from mpirun's environment: known before joining */
    int steps_ok;
    td_context *ctx;
} job;

static double wall_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double mono_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t env_u32(const char *name)
{
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "%s is not set: run this under mpirun (run_mpi_fault_test.sh)\n", name);
        exit(2);
    }
    return (uint32_t)strtoul(v, NULL, 10);
}

/* Written whole under a temporary name, then renamed: the script (and the
 * other survivors) see the file complete or not at all, even when mpirun
 * kills this process halfway. */
static void write_file(const job *j, const char *name, const char *text)
{
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/%s", j->dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "process %u: cannot write %s\n", j->rank, path);
        exit(2);
    }
}

/* Process 1's fault: the time first (the script measures from it), then
 * death or silence. */
static void fail_here(const job *j, int sig)
{
    char text[64];
    snprintf(text, sizeof text, "%.6f\n", wall_seconds());
    write_file(j, "fault", text);
    fprintf(stderr, "process %u: %s now\n", j->rank, sig == SIGKILL ? "dying (SIGKILL)" : "hanging (SIGSTOP)");
    fflush(stderr);
    raise(sig);
    /* SIGSTOP: mpirun continues this process only to end it (SIGCONT then
     * SIGTERM); should the job go on instead, the survivors' wait has
     * long ended, so stay silent until killed rather than rejoin. */
    for (;;)
        pause();
}

/* A survivor's report. It then waits, at most one context timeout, for
 * every other survivor's: whoever ends the job first (MPI_Abort, or a
 * non-zero exit) makes mpirun kill the rest, maybe before they report. */
static void report(const job *j, const char *call, td_status s, const char *message, double seconds)
{
    char text[4096], name[32];
    const double wall = wall_seconds();
    int len = snprintf(text, sizeof text, "call %s\nstatus %s\nelapsed_ms %.0f\nwall %.6f\nsteps_ok %d\nmessage %s\n",
                       call, td_status_name(s), seconds * 1000.0, wall, j->steps_ok, message);
    if (len < 0 || (size_t)len >= sizeof text)
        len = (int)sizeof text - 1;
    fprintf(stderr, "process %u: %s failed after %.0f ms: %s: %s\n", j->rank, call, seconds * 1000.0,
            td_status_name(s), message);
    uint32_t rank = 0, count = 1;
    td_processes_rank(j->ctx, &rank, &count);
    if (count > 1) {
        /* A later exchange would take the silent process's late messages
         * for its own, or wait for it once more: it must refuse at once. */
        double v = 1.0;
        const double t0 = mono_seconds();
        const td_status after = td_processes_sum(j->ctx, &v, 1);
        snprintf(text + len, sizeof text - (size_t)len, "after_status %s\nafter_ms %.1f\nafter_message %s\n",
                 td_status_name(after), (mono_seconds() - t0) * 1000.0, td_last_error(j->ctx));
    }
    snprintf(name, sizeof name, "process-%u", j->rank);
    write_file(j, name, text);
    const double deadline = mono_seconds() + TIMEOUT_MS / 1000.0;
    for (uint32_t q = 0; q < j->count; q++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/process-%u", j->dir, q);
        while (q != FAULTY && access(path, F_OK) != 0 && mono_seconds() < deadline) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

/* After a survivor's report: end the job as an application should
 * (td_processes_abort), or, for hang-exit and where the context joined
 * nothing, release everything and fail, which must not hang either. */
static int end_job(const job *j, td_context *ctx)
{
    uint32_t rank = 0, count = 1;
    td_processes_rank(ctx, &rank, &count);
    if (j->mode != MODE_HANG_EXIT && count > 1)
        td_processes_abort(ctx, 3);
    const double t0 = mono_seconds();
    td_context_destroy(ctx);
    fprintf(stderr, "process %u: td_context_destroy took %.0f ms\n", j->rank, (mono_seconds() - t0) * 1000.0);
    return 3;
}

static td_status build(td_context *ctx, model *m)
{
    td_status s = td_graph_create(ctx, &m->g);
    if (s != TD_OK)
        return s;
    int64_t xd[2] = {BATCH, IN}, yd[1] = {BATCH};
    int64_t w1[2] = {IN, HIDDEN}, b1[1] = {HIDDEN}, w2[2] = {HIDDEN, OUT}, b2[1] = {OUT};
    td_initializer uniform, zeros;
    td_initializer_uniform(-0.05f, 0.05f, 7, &uniform);
    td_initializer_zeros(&zeros);
    td_node h, a, logits;
    if ((s = td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x)) != TD_OK ||
        (s = td_graph_input(m->g, "y", TD_I32, 1, yd, TD_SHARDED, &m->y)) != TD_OK ||
        (s = td_graph_param_init(m->g, "w1", 2, w1, &uniform, &m->params[0])) != TD_OK ||
        (s = td_graph_param_init(m->g, "b1", 1, b1, &zeros, &m->params[1])) != TD_OK ||
        (s = td_graph_param_init(m->g, "w2", 2, w2, &uniform, &m->params[2])) != TD_OK ||
        (s = td_graph_param_init(m->g, "b2", 1, b2, &zeros, &m->params[3])) != TD_OK ||
        (s = td_graph_matmul(m->g, m->x, m->params[0], &h)) != TD_OK ||
        (s = td_graph_add(m->g, h, m->params[1], &h)) != TD_OK || (s = td_graph_tanh(m->g, h, &a)) != TD_OK ||
        (s = td_graph_matmul(m->g, a, m->params[2], &logits)) != TD_OK ||
        (s = td_graph_add(m->g, logits, m->params[3], &logits)) != TD_OK)
        return s;
    return td_graph_softmax_cross_entropy(m->g, logits, m->y, &m->loss);
}

static float x_at(uint64_t row, int c)
{
    uint64_t h = (row * 1000003u + (uint64_t)c * 7919u) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    return (float)((double)(h % 20000) / 10000.0 - 1.0);
}

static int32_t y_at(uint64_t row)
{
    return (int32_t)(row * 5 % OUT);
}

static mode parse_mode(const char *s)
{
    static const char *names[] = {"none", "kill", "hang", "hang-exit", "hang-join", "hang-mesh", "hang-overlap"};
    for (int m = 0; m < (int)(sizeof names / sizeof names[0]); m++)
        if (strcmp(s, names[m]) == 0)
            return (mode)m;
    fprintf(stderr, "unknown mode '%s' (none, kill, hang, hang-exit, hang-join, hang-mesh, hang-overlap)\n", s);
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s MODE DIR [N]\n", argv[0]);
        return 2;
    }
    job j = {parse_mode(argv[1]), argv[2], env_u32("OMPI_COMM_WORLD_RANK"), env_u32("OMPI_COMM_WORLD_SIZE"), 0,
             NULL};
    char spec[32];
    snprintf(spec, sizeof spec, "cpu:%d", argc == 4 ? atoi(argv[3]) : 1);
    const bool faulty = j.rank == FAULTY && j.mode != MODE_NONE;
    td_context_options o;
    td_context_options_init(&o);
    o.timeout_ms = TIMEOUT_MS;
    td_context *ctx = NULL;
    if (td_context_create(&o, &ctx) != TD_OK) {
        fprintf(stderr, "process %u: td_context_create failed\n", j.rank);
        return 2;
    }
    j.ctx = ctx;

    int provided = 0;
    if (j.mode == MODE_HANG_JOIN && (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS ||
                                     provided < MPI_THREAD_SERIALIZED)) {
        fprintf(stderr, "process %u: MPI_Init_thread failed or gave thread level %d\n", j.rank, provided);
        return 2;
    }
    if (faulty && j.mode == MODE_HANG_JOIN)
        fail_here(&j, SIGSTOP);
    double t0 = mono_seconds();
    td_status s = td_processes_join(ctx);
    if (s != TD_OK) {
        report(&j, "td_processes_join", s, td_last_error(ctx), mono_seconds() - t0);
        return end_job(&j, ctx);
    }
    mt_run run = {0};
    td_processes_rank(ctx, &run.rank, &run.count);
    mt_check(&run, run.rank == j.rank && run.count == j.count, "joined as process %u of %u, mpirun says %u of %u",
             run.rank, run.count, j.rank, j.count);

    if (faulty && j.mode == MODE_HANG_MESH)
        fail_here(&j, SIGSTOP);
    td_mesh *mesh = NULL;
    t0 = mono_seconds();
    s = td_mesh_create(ctx, spec, &mesh);
    if (s != TD_OK) {
        report(&j, "td_mesh_create", s, td_last_error(ctx), mono_seconds() - t0);
        return end_job(&j, ctx);
    }
    uint32_t global = 0, first = 0;
    MT_OK(&run, ctx, td_processes_mesh(mesh, &global, &first));
    uint32_t local = 0;
    MT_OK(&run, ctx, td_mesh_size(mesh, &local));
    mt_check(&run, global == j.count * local && first == j.rank * local,
             "global mesh of %u devices from %u, expected %u from %u", global, first, j.count * local, j.rank * local);

    model m;
    MT_OK(&run, ctx, build(ctx, &m));
    td_trainer_options to;
    td_trainer_options_init(&to);
    to.optimizer = TD_OPTIMIZER_ADAM;
    to.learning_rate = 0.01f;
    if (j.mode == MODE_HANG_OVERLAP)
        to.overlap_bucket_bytes = 4096; /* the wide layer's own bucket, and the rest */
    td_trainer *t = NULL;
    MT_OK(&run, ctx, td_trainer_create(m.g, mesh, m.loss, 4, m.params, &to, &t));
    const uint64_t rows = BATCH / global * local, row0 = BATCH / global * first;
    int64_t xd[2] = {(int64_t)rows, IN}, yd[1] = {(int64_t)rows};
    td_tensor *xt = NULL, *yt = NULL;
    MT_OK(&run, ctx, td_tensor_create(ctx, TD_F32, 2, xd, &xt));
    MT_OK(&run, ctx, td_tensor_create(ctx, TD_I32, 1, yd, &yt));
    float *xv;
    int32_t *yv;
    td_tensor_data(xt, (void **)&xv);
    td_tensor_data(yt, (void **)&yv);
    /* This process's rows of one global batch, trained on at every step:
     * the control's loss must then fall. */
    for (uint64_t r = 0; r < rows; r++) {
        for (int c = 0; c < IN; c++)
            xv[r * IN + (uint64_t)c] = x_at(row0 + r, c);
        yv[r] = y_at(row0 + r);
    }
    float losses[STEPS];
    for (int step = 0; step < STEPS; step++) {
        if (faulty && step == FAULT_STEP && j.mode != MODE_HANG_JOIN && j.mode != MODE_HANG_MESH)
            fail_here(&j, j.mode == MODE_KILL ? SIGKILL : SIGSTOP);
        td_binding b[2] = {{m.x, xt}, {m.y, yt}};
        t0 = mono_seconds();
        s = td_trainer_step(t, 2, b, &losses[step]);
        if (s != TD_OK && j.mode != MODE_NONE) {
            report(&j, "td_trainer_step", s, td_last_error(ctx), mono_seconds() - t0);
            return end_job(&j, ctx);
        }
        MT_OK(&run, ctx, s);
        j.steps_ok++;
        /* The combined loss is the global batch's: bitwise the same on
         * every process. */
        uint32_t bits;
        memcpy(&bits, &losses[step], sizeof bits);
        const bool same = mt_same_on_every_process(&run, ctx, bits); /* collective: every process calls it */
        mt_check(&run, isfinite(losses[step]) && same,
                 "step %d: loss %g is not finite or differs between the processes", step, (double)losses[step]);
    }
    /* Only the control gets here. */
    mt_check(&run, losses[STEPS - 1] < losses[0], "the loss did not fall: %g -> %g", (double)losses[0],
             (double)losses[STEPS - 1]);
    if (run.rank == 0)
        printf("processes %u, devices %u, no fault: loss %.6f -> %.6f over %d steps\n", run.count, global,
               (double)losses[0], (double)losses[STEPS - 1], STEPS);
    td_tensor_destroy(xt);
    td_tensor_destroy(yt);
    td_trainer_destroy(t);
    td_graph_destroy(m.g);
    return mt_finish(&run, ctx);
}
