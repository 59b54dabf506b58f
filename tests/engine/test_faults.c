/* Invariant 3: a device that fails makes the step fail on every worker, with
 * the failing device's own message, within a bounded time; and a failed
 * training step is all or nothing: no replica is left half-updated, and
 * training resumes exactly as if the step had not been attempted.
 *
 * Faults are injected by a wrapper backend installed on one device of a
 * cpu mesh: it delegates to the CPU backend but can fail a segment (as a
 * lost device would) or stall a wait until its timeout (as a hung one). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_test_util.h"
#include "td_mesh_internal.h"

typedef struct fault_state {
    td_context *ctx;
    int fail_segment_in; /* fail the Nth segment_run from now (0 = never) */
    int hang_waits;      /* stall this many waits until their timeout */
    int fail_read_in;    /* fail the Nth read from now (0 = never) */
    /* Stall the next write (an input's upload) this long, then note where
     * the write after it reads its host data from. */
    uint32_t stall_write_ms;
    bool note_next_write;
    const void *noted_write_src;
} fault_state;

static fault_state fault;
static td_backend_ops faulty_ops;

static td_status faulty_segment_run(td_device *dev, td_segment *seg)
{
    if (fault.fail_segment_in > 0 && --fault.fail_segment_in == 0)
        return td_error_set(fault.ctx, TD_ERR_DEVICE_LOST, "injected device loss in segment_run");
    return td_cpu_backend.segment_run(dev, seg);
}

/* A step reads its outputs after the all-reduce and the update: failing
 * there leaves every device already holding the step's new parameters. */
static td_status faulty_read(td_device *dev, td_buffer *src, size_t offset, void *host, size_t bytes)
{
    if (fault.fail_read_in > 0 && --fault.fail_read_in == 0)
        return td_error_set(fault.ctx, TD_ERR_DEVICE_LOST, "injected device loss in read");
    return td_cpu_backend.read(dev, src, offset, host, bytes);
}

static td_status faulty_write(td_device *dev, td_buffer *dst, size_t offset, const void *host, size_t bytes)
{
    if (fault.note_next_write) {
        fault.note_next_write = false;
        fault.noted_write_src = host;
    }
    if (fault.stall_write_ms > 0) {
        const uint32_t ms = fault.stall_write_ms;
        fault.stall_write_ms = 0;
        struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
        fault.note_next_write = true;
    }
    return td_cpu_backend.write(dev, dst, offset, host, bytes);
}

static td_status faulty_wait(td_device *dev, uint64_t ticket, uint32_t timeout_ms)
{
    if (fault.hang_waits > 0) {
        fault.hang_waits--;
        struct timespec t = {(time_t)(timeout_ms / 1000), (long)(timeout_ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
        return td_error_set(fault.ctx, TD_ERR_TIMEOUT, "injected hang: ticket %llu not done after %u ms",
                            (unsigned long long)ticket, timeout_ms);
    }
    return td_cpu_backend.wait(dev, ticket, timeout_ms);
}

static void install_fault_backend(td_context *ctx, td_mesh *mesh, uint32_t position)
{
    memset(&fault, 0, sizeof fault);
    fault.ctx = ctx;
    faulty_ops = td_cpu_backend;
    faulty_ops.segment_run = faulty_segment_run;
    faulty_ops.wait = faulty_wait;
    faulty_ops.read = faulty_read;
    faulty_ops.write = faulty_write;
    mesh->devices[position].ops = &faulty_ops;
}

static double seconds_since(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) * 1e-9;
}

/* ---- a small linear regression: x [12, 3] sharded, w [3, 1], b [1] ---- */

enum { BATCH = 12, FEATURES = 3, STEPS = 5, FAILED_STEP = 2 };

typedef struct linreg {
    td_graph *g;
    td_node x, y, w, b, loss;
    td_trainer *trainer;
    td_tensor *xs, *ys;
} linreg;

static void linreg_init(td_context *ctx, td_mesh *mesh, linreg *m)
{
    int64_t xd[2] = {BATCH, FEATURES}, yd[2] = {BATCH, 1}, wd[2] = {FEATURES, 1}, bd[1] = {1};
    td_node xw, pred;
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    TEST_OK(ctx, td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x));
    TEST_OK(ctx, td_graph_input(m->g, "y", TD_F32, 2, yd, TD_SHARDED, &m->y));
    TEST_OK(ctx, td_graph_param(m->g, "w", 2, wd, &m->w));
    TEST_OK(ctx, td_graph_param(m->g, "b", 1, bd, &m->b));
    TEST_OK(ctx, td_graph_matmul(m->g, m->x, m->w, &xw));
    TEST_OK(ctx, td_graph_add(m->g, xw, m->b, &pred));
    TEST_OK(ctx, td_graph_mse(m->g, pred, m->y, &m->loss));
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.learning_rate = 0.1f;
    td_node params[2] = {m->w, m->b};
    TEST_OK(ctx, td_trainer_create(m->g, mesh, m->loss, 2, params, &o, &m->trainer));
    m->xs = test_tensor(ctx, TD_F32, 2, xd);
    m->ys = test_tensor(ctx, TD_F32, 2, yd);
}

static void linreg_batch(linreg *m, int step)
{
    test_rng rng = {0xFA017ull + (uint64_t)step};
    for (int i = 0; i < BATCH; i++) {
        float y = 0.5f;
        for (int j = 0; j < FEATURES; j++) {
            float v = test_rng_uniform(&rng, -1.0f, 1.0f);
            test_f32(m->xs)[i * FEATURES + j] = v;
            y += (float)(j + 1) * v;
        }
        test_f32(m->ys)[i] = y;
    }
}

static td_status linreg_step(linreg *m, int step)
{
    linreg_batch(m, step);
    td_binding b[2] = {{m->x, m->xs}, {m->y, m->ys}};
    float loss;
    return td_trainer_step(m->trainer, 2, b, &loss);
}

/* w then b as held by `device`. */
static void linreg_params(td_context *ctx, linreg *m, uint32_t device, float out[FEATURES + 1])
{
    int64_t wd[2] = {FEATURES, 1}, bd[1] = {1};
    td_tensor *w = test_tensor(ctx, TD_F32, 2, wd), *b = test_tensor(ctx, TD_F32, 1, bd);
    TEST_OK(ctx, td_trainer_read_param(m->trainer, m->w, device, w));
    TEST_OK(ctx, td_trainer_read_param(m->trainer, m->b, device, b));
    memcpy(out, test_f32(w), FEATURES * sizeof(float));
    out[FEATURES] = test_f32(b)[0];
    td_tensor_destroy(w);
    td_tensor_destroy(b);
}

static void linreg_fini(linreg *m)
{
    td_tensor_destroy(m->xs);
    td_tensor_destroy(m->ys);
}

static void assert_replicas_identical(td_context *ctx, linreg *m, const char *when)
{
    bool identical = false;
    TEST_OK(ctx, td_trainer_replicas_identical(m->trainer, &identical));
    cr_assert(identical, "replicas differ %s", when);
}

/* Parameters after training on every step but FAILED_STEP, undisturbed. */
static void reference_params(float out[FEATURES + 1])
{
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    linreg m;
    linreg_init(ctx, mesh, &m);
    for (int step = 0; step < STEPS; step++)
        if (step != FAILED_STEP)
            TEST_OK(ctx, linreg_step(&m, step));
    linreg_params(ctx, &m, 0, out);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

typedef enum { FAIL_BEFORE_RING, FAIL_AFTER_UPDATE } fault_point;

static void check_failed_step_is_all_or_nothing(fault_point point)
{
    float expected[FEATURES + 1];
    reference_params(expected);

    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    linreg m;
    linreg_init(ctx, mesh, &m);
    install_fault_backend(ctx, mesh, 1);
    float before[FEATURES + 1], after[FEATURES + 1];
    for (int step = 0; step < STEPS; step++) {
        if (step != FAILED_STEP) {
            TEST_OK(ctx, linreg_step(&m, step));
            continue;
        }
        linreg_params(ctx, &m, 0, before);
        if (point == FAIL_BEFORE_RING)
            fault.fail_segment_in = 1;
        else
            fault.fail_read_in = 1;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "injected device loss", linreg_step(&m, step));
        cr_assert(test_message_mentions(ctx, "restored"), "message: %s", td_last_error(ctx));
        /* Well inside the 30 s timeout: peers are woken by the abort, not
         * by their own deadlines. */
        cr_assert_lt(seconds_since(&t0), 5.0, "the failed step took %.1f s", seconds_since(&t0));
        assert_replicas_identical(ctx, &m, "after the failed step");
        for (uint32_t d = 0; d < 3; d++) {
            linreg_params(ctx, &m, d, after);
            cr_assert(memcmp(before, after, sizeof before) == 0, "device %u changed in a failed step", d);
        }
    }
    assert_replicas_identical(ctx, &m, "after training resumed");
    linreg_params(ctx, &m, 0, after);
    cr_assert(memcmp(expected, after, sizeof after) == 0,
              "training after a failed step differs from training without it (w0 %.9g vs %.9g)", (double)after[0],
              (double)expected[0]);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

Test(faults, device_lost_before_the_ring_fails_the_step_and_changes_nothing)
{
    check_failed_step_is_all_or_nothing(FAIL_BEFORE_RING);
}

/* Here every device already holds the new parameters when the step fails:
 * only the rollback to the master copy makes the step leave no trace. */
Test(faults, device_lost_after_the_update_rolls_every_replica_back)
{
    check_failed_step_is_all_or_nothing(FAIL_AFTER_UPDATE);
}

Test(faults, hung_device_times_out_within_the_bound)
{
    const uint32_t timeout_ms = 300;
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    linreg m;
    linreg_init(ctx, mesh, &m);
    install_fault_backend(ctx, mesh, 2);
    TEST_OK(ctx, linreg_step(&m, 0));
    float before[FEATURES + 1], after[FEATURES + 1];
    linreg_params(ctx, &m, 0, before);

    fault.hang_waits = 1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    TEST_FAILS(ctx, TD_ERR_TIMEOUT, "injected hang", linreg_step(&m, 1));
    double took = seconds_since(&t0);
    /* One stalled wait (300 ms) plus peers noticing the abort: far below
     * the mesh's own 4 x timeout bound. */
    cr_assert_lt(took, 4.0 * timeout_ms / 1000.0, "the hung step took %.2f s", took);
    assert_replicas_identical(ctx, &m, "after the timed-out step");
    linreg_params(ctx, &m, 2, after);
    cr_assert(memcmp(before, after, sizeof before) == 0, "the hung device's parameters changed");

    TEST_OK(ctx, linreg_step(&m, 1)); /* the ring was reset: the mesh works again */
    assert_replicas_identical(ctx, &m, "after recovery");
    linreg_fini(&m);
    td_context_destroy(ctx);
}

Test(faults, failure_inside_a_pmap_collective_program_is_reported_and_recovers)
{
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    install_fault_backend(ctx, mesh, 3);
    td_graph *g;
    int64_t d[1] = {8};
    td_node x, s, twice;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, d, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_scale(g, x, 2.0f, &twice));
    TEST_OK(ctx, td_graph_psum(g, twice, &s));
    td_program *p = test_compile(ctx, g, mesh, 1, &s);
    td_tensor *xs = test_tensor(ctx, TD_F32, 1, d);
    for (int i = 0; i < 8; i++)
        test_f32(xs)[i] = (float)i;
    td_binding b = {x, xs};

    fault.fail_segment_in = 1; /* the segment before the psum, on device 3 */
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "injected device loss", td_program_run(p, 1, &b));
    TEST_OK(ctx, td_program_run(p, 1, &b));
    for (uint32_t dev = 0; dev < 4; dev++) {
        td_tensor *out = test_read_output(ctx, p, 0, dev);
        /* psum over devices of 2 * [2d, 2d+1]: element k sums 2*(2d + k). */
        cr_assert_float_eq(test_f32(out)[0], 2.0f * (0 + 2 + 4 + 6), 0.0f);
        cr_assert_float_eq(test_f32(out)[1], 2.0f * (1 + 3 + 5 + 7), 0.0f);
        td_tensor_destroy(out);
    }
    td_tensor_destroy(xs);
    td_context_destroy(ctx);
}

/* A run that times out leaves its fenced worker inside the job for a
 * while; a retry at once, with other tensors bound, must not change the
 * bindings under it. Device 1 stalls in its first input's upload past the
 * mesh's 4 x timeout bound but within one more timeout (the retry's wait
 * for quiet), then uploads its second input: it must still read the
 * first run's tensor, not the retry's (before the fix it read the retry's,
 * and ThreadSanitizer saw the retry's memset of the bindings race with
 * it). */
Test(faults, retry_after_a_timeout_waits_for_the_fenced_worker_before_rebinding)
{
    const uint32_t timeout_ms = 400;
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_graph *g;
    int64_t d[1] = {8};
    td_node x, y, sum, total;
    TEST_OK(ctx, td_graph_create(ctx, &g));
    TEST_OK(ctx, td_graph_input(g, "x", TD_F32, 1, d, TD_SHARDED, &x));
    TEST_OK(ctx, td_graph_input(g, "y", TD_F32, 1, d, TD_SHARDED, &y));
    TEST_OK(ctx, td_graph_add(g, x, y, &sum));
    TEST_OK(ctx, td_graph_psum(g, sum, &total));
    td_program *p = test_compile(ctx, g, mesh, 1, &total);
    install_fault_backend(ctx, mesh, 1);
    td_tensor *first[2] = {test_tensor(ctx, TD_F32, 1, d), test_tensor(ctx, TD_F32, 1, d)};
    td_tensor *retry[2] = {test_tensor(ctx, TD_F32, 1, d), test_tensor(ctx, TD_F32, 1, d)};
    td_binding b1[2] = {{x, first[0]}, {y, first[1]}}, b2[2] = {{x, retry[0]}, {y, retry[1]}};

    fault.stall_write_ms = 9 * timeout_ms / 2; /* fenced at 4 x, out before 5 x */
    td_status s = td_program_run(p, 2, b1);
    cr_assert(s == TD_ERR_TIMEOUT || s == TD_ERR_ABORTED, "%s: %s", td_status_name(s), td_last_error(ctx));
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "lost", td_program_run(p, 2, b2));
    /* Device 1's half of y starts 4 floats in. */
    cr_assert(fault.noted_write_src == test_f32(first[1]) + 4,
              "the fenced worker uploaded y from %p: the first run's is %p, the retry's %p", fault.noted_write_src,
              (const void *)(test_f32(first[1]) + 4), (const void *)(test_f32(retry[1]) + 4));
    for (int i = 0; i < 2; i++) {
        td_tensor_destroy(first[i]);
        td_tensor_destroy(retry[i]);
    }
    td_context_destroy(ctx);
}

/* ---- faults injected through the device spec (tandem/device.h) ---- */

Test(injected, spec_options_parse_and_bad_ones_are_named)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = NULL;
    TEST_OK(ctx, td_mesh_create(ctx, "cpu:2, cpu:1@slow=2.5;fail=7;hang=9", &mesh));
    cr_assert_eq(mesh->count, 3);
    cr_assert_eq(mesh->devices[0].faults.slow, 1.0f);
    cr_assert_eq(mesh->devices[0].faults.fail_at, 0);
    cr_assert_eq(mesh->devices[2].faults.slow, 2.5f);
    cr_assert_eq(mesh->devices[2].faults.fail_at, 7);
    cr_assert_eq(mesh->devices[2].faults.hang_at, 9);
    cr_assert_str_eq(mesh->devices[2].item, "cpu:1@slow=2.5;fail=7;hang=9");
    td_mesh_destroy(mesh);
    const struct {
        const char *spec, *named;
    } bad[] = {
        {"cpu:1@slow=0.5", "slow=0.5"}, {"cpu:1@slow=x", "slow=x"},  {"cpu:1@slow", "slow"},
        {"cpu:1@fail=0", "fail=0"},     {"cpu:1@hang=-1", "hang=-1"}, {"cpu:1@", "empty"},
        {"cpu:1@fast=2", "fast=2"},     {"cpu:1@slow=2;", "empty"},   {"cpu:1@slow=1e9", "slow=1e9"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(td_mesh_create(ctx, bad[i].spec, &mesh), TD_ERR_INVALID_ARGUMENT, "%s", bad[i].spec);
        cr_assert(test_message_mentions(ctx, bad[i].named), "%s: %s", bad[i].spec, td_last_error(ctx));
    }
    td_context_destroy(ctx);
}

/* fail=N: the device fails in its Nth program run (here the Nth step);
 * the step fails, every replica goes back to the master and later steps
 * fail at once, naming the device. */
Test(injected, fail_at_a_step_loses_the_device)
{
    td_context *ctx = test_context(5000);
    td_mesh *mesh = test_mesh(ctx, "cpu:2,cpu:1@fail=3");
    linreg m;
    linreg_init(ctx, mesh, &m);
    TEST_OK(ctx, linreg_step(&m, 0));
    TEST_OK(ctx, linreg_step(&m, 1));
    float before[FEATURES + 1], after[FEATURES + 1];
    linreg_params(ctx, &m, 0, before);
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "injected failure in its run 3", linreg_step(&m, 2));
    cr_assert(test_message_mentions(ctx, "cpu:1@fail=3"), "%s", td_last_error(ctx));
    for (uint32_t d = 0; d < 3; d++) {
        linreg_params(ctx, &m, d, after);
        cr_assert(memcmp(before, after, sizeof before) == 0, "device %u kept the failed step's values", d);
    }
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "was lost earlier", linreg_step(&m, 3));
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* hang=N: the device stops answering in its Nth run. The step times out
 * within the documented bound, the device is fenced off (its worker wakes
 * and leaves the job), the next step fails at once instead of racing with
 * it, and destroying everything is clean (ASan) -- the worker is never
 * left inside memory the context frees. */
Test(injected, hang_times_out_fences_the_device_and_tears_down_cleanly)
{
    const uint32_t timeout_ms = 150;
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = test_mesh(ctx, "cpu:2,cpu:1@hang=2");
    linreg m;
    linreg_init(ctx, mesh, &m);
    TEST_OK(ctx, linreg_step(&m, 0));
    float before[FEATURES + 1], after[FEATURES + 1];
    linreg_params(ctx, &m, 0, before);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    td_status s = linreg_step(&m, 1);
    double took = seconds_since(&t0);
    cr_assert(s == TD_ERR_TIMEOUT || s == TD_ERR_ABORTED, "%s: %s", td_status_name(s), td_last_error(ctx));
    cr_assert(test_message_mentions(ctx, "parameters restored"), "%s", td_last_error(ctx));
    for (uint32_t d = 0; d < 3; d++) {
        linreg_params(ctx, &m, d, after); /* reads work on a fenced mesh: they are not runs */
        cr_assert(memcmp(before, after, sizeof before) == 0, "device %u kept the timed-out step's values", d);
    }
    cr_assert_lt(took, 4.0 * timeout_ms / 1000.0 + 1.0, "the hung step took %.2f s", took);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "cpu:1@hang=2", linreg_step(&m, 2));
    cr_assert_lt(seconds_since(&t0), 2.0 * timeout_ms / 1000.0 + 0.5, "the step after the hang did not fail at once");
    linreg_fini(&m);
    td_context_destroy(ctx); /* the program and trainer go while the device is lost */
}

/* A least-squares model big enough that its kernels take a measurable
 * time: x [2048, 512] sharded. */
typedef struct big_linreg {
    td_graph *g;
    td_node x, y, w, loss;
    td_trainer *t;
    td_tensor *xs, *ys;
} big_linreg;

static void big_linreg_init(td_context *ctx, td_mesh *mesh, big_linreg *m, int64_t rows, int64_t features)
{
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    test_linreg_graph(ctx, m->g, rows, features, &m->x, &m->y, &m->w, &m->loss);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.timing_waits = true;
    TEST_OK(ctx, td_trainer_create(m->g, mesh, m->loss, 1, &m->w, &o, &m->t));
    const int64_t xd[2] = {rows, features}, yd[2] = {rows, 1};
    m->xs = test_tensor(ctx, TD_F32, 2, xd);
    m->ys = test_tensor(ctx, TD_F32, 2, yd);
    test_rng rng = {17};
    test_fill_uniform(&rng, test_f32(m->xs), (size_t)(rows * features), -1.0f, 1.0f);
    test_fill_uniform(&rng, test_f32(m->ys), (size_t)rows, -1.0f, 1.0f);
}

static td_status big_linreg_step(big_linreg *m)
{
    td_binding b[2] = {{m->x, m->xs}, {m->y, m->ys}};
    return td_trainer_step(m->t, 2, b, NULL);
}

static void big_linreg_fini(big_linreg *m)
{
    td_tensor_destroy(m->xs);
    td_tensor_destroy(m->ys);
}

/* A run longer than the whole job bound (slow=1000 on a 50 ms timeout;
 * the device's segment, a few ms of GEMV, then lasts seconds): the mesh
 * gives up at 4 x 50 ms, fences the device, and the next run neither
 * waits forever nor races with the stale one. */
Test(injected, job_outlasting_the_timeout_is_fenced)
{
    const uint32_t timeout_ms = 50 * test_slowdown(); /* device 0's GEMV must end within it */
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = test_mesh(ctx, "cpu:1,cpu:1@slow=1000");
    big_linreg m;
    big_linreg_init(ctx, mesh, &m, 8192, 1024);
    td_status s = big_linreg_step(&m);
    cr_assert_neq(s, TD_OK, "a step slowed past its timeout succeeded");
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "cpu:1@slow=1000", big_linreg_step(&m));
    big_linreg_fini(&m);
    td_context_destroy(ctx);
}

/* slow=F: every segment of that device takes F times as long. Judged by
 * the median over steps of the slow device's compute time over the normal
 * one's: other tests share the cores, and one step can be way off. */
Test(injected, slow_device_computes_slower)
{
    enum { RUNS = 15 };
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:1,cpu:1@slow=6");
    big_linreg m;
    big_linreg_init(ctx, mesh, &m, 4096, 512);
    double ratio[RUNS];
    TEST_OK(ctx, big_linreg_step(&m)); /* warm-up */
    for (int step = 0; step < RUNS; step++) {
        TEST_OK(ctx, big_linreg_step(&m));
        td_step_timing normal, slow;
        TEST_OK(ctx, td_trainer_timing(m.t, 0, &normal));
        TEST_OK(ctx, td_trainer_timing(m.t, 1, &slow));
        ratio[step] = slow.compute / (normal.compute > 0 ? normal.compute : 1e-9);
    }
    const double median = test_median(ratio, RUNS);
    /* 6x injected; the median at least 2.5x, whatever the machine's noise. */
    cr_assert_gt(median, 2.5, "median slow/normal compute %.2f (min %.2f, max %.2f)", median, ratio[0],
                 ratio[RUNS - 1]);
    big_linreg_fini(&m);
    td_context_destroy(ctx);
}

/* A timeout of 2^31 ms or more must not wrap into an immediate one. */
Test(injected, huge_timeout_does_not_wrap)
{
    td_context *ctx = test_context(0x80000000u);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    linreg m;
    linreg_init(ctx, mesh, &m);
    for (int step = 0; step < 30; step++)
        TEST_OK(ctx, linreg_step(&m, step));
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* ---- on_device_loss = continue ---- */

/* The linear model of linreg_init trained by Adam (its state must survive
 * the re-split over fewer owners) for `steps` steps on `spec`, continuing
 * on the survivors. Returns w then b from device 0; *devices and *lost
 * from td_train_progress; each step's report's devices_lost in lost_at. */
typedef struct survivor_run {
    float params[FEATURES + 1];
    uint32_t devices, lost;
    uint32_t lost_at[16];
    bool identical;
} survivor_run;

static void note_loss(void *user, const td_step_report *r)
{
    survivor_run *out = user;
    out->lost_at[r->micro_step - 1] = r->devices_lost;
}

/* linreg_init's model with a mask input, which an evaluator weights each
 * batch by (the loss ignores it), trained with options `o`. */
static void masked_linreg_init(td_context *ctx, td_mesh *mesh, const td_trainer_options *o, linreg *m, td_node *mask)
{
    int64_t xd[2] = {BATCH, FEATURES}, yd[2] = {BATCH, 1}, wd[2] = {FEATURES, 1}, bd[1] = {1}, md[1] = {BATCH};
    td_node xw, pred;
    TEST_OK(ctx, td_graph_create(ctx, &m->g));
    TEST_OK(ctx, td_graph_input(m->g, "x", TD_F32, 2, xd, TD_SHARDED, &m->x));
    TEST_OK(ctx, td_graph_input(m->g, "y", TD_F32, 2, yd, TD_SHARDED, &m->y));
    TEST_OK(ctx, td_graph_input(m->g, "mask", TD_F32, 1, md, TD_SHARDED, mask));
    TEST_OK(ctx, td_graph_param(m->g, "w", 2, wd, &m->w));
    TEST_OK(ctx, td_graph_param(m->g, "b", 1, bd, &m->b));
    TEST_OK(ctx, td_graph_matmul(m->g, m->x, m->w, &xw));
    TEST_OK(ctx, td_graph_add(m->g, xw, m->b, &pred));
    TEST_OK(ctx, td_graph_mse(m->g, pred, m->y, &m->loss));
    td_node params[2] = {m->w, m->b};
    TEST_OK(ctx, td_trainer_create(m->g, mesh, m->loss, 2, params, o, &m->trainer));
    m->xs = test_tensor(ctx, TD_F32, 2, xd);
    m->ys = test_tensor(ctx, TD_F32, 2, yd);
}

/* Adam (its state must survive the re-split over fewer owners), going on
 * without the devices it loses. */
static void continuing_options(td_trainer_options *o)
{
    td_trainer_options_init(o);
    o->optimizer = TD_OPTIMIZER_ADAM;
    o->learning_rate = 0.05f;
    o->on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
}

static void train_continuing(const char *spec, int steps, uint32_t timeout_ms, survivor_run *out)
{
    memset(out, 0, sizeof *out);
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = test_mesh(ctx, spec);
    linreg m;
    td_node mask;
    td_trainer_options o;
    continuing_options(&o);
    masked_linreg_init(ctx, mesh, &o, &m, &mask);
    TEST_OK(ctx, td_trainer_on_step(m.trainer, note_loss, out));
    for (int step = 0; step < steps; step++)
        TEST_OK(ctx, linreg_step(&m, step));
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(m.trainer, &p));
    out->devices = p.devices;
    out->lost = p.devices_lost;
    TEST_OK(ctx, td_trainer_replicas_identical(m.trainer, &out->identical));
    linreg_params(ctx, &m, 0, out->params);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* Every run below must end where one device ends after the same steps:
 * the survivors re-run the failed step on the same global batch, so no
 * batch is lost or applied twice. Tolerance: the runs differ in float
 * summation order only (shards of 12 / N rows), 1e-5 after 6 Adam steps. */
static void check_like_one_device(const char *spec, int steps, uint32_t timeout_ms, uint32_t want_devices,
                                  uint32_t want_lost)
{
    survivor_run one, many;
    train_continuing("cpu:1", steps, 0, &one);
    train_continuing(spec, steps, timeout_ms, &many);
    cr_assert_eq(many.devices, want_devices, "%s: %u devices at the end, expected %u", spec, many.devices, want_devices);
    cr_assert_eq(many.lost, want_lost, "%s: %u lost, expected %u", spec, many.lost, want_lost);
    cr_assert(many.identical, "%s: replicas differ after continuing", spec);
    uint32_t reported = 0;
    for (int i = 0; i < steps; i++)
        reported += many.lost_at[i];
    cr_assert_eq(reported, want_lost, "%s: the step reports counted %u lost devices", spec, reported);
    for (int i = 0; i <= FEATURES; i++)
        cr_assert(fabsf(many.params[i] - one.params[i]) <= 1e-5f * fmaxf(1.0f, fabsf(one.params[i])),
                  "%s: parameter %d is %.7g, one device %.7g", spec, i, (double)many.params[i],
                  (double)one.params[i]);
}

Test(survivors, one_failure_of_four_continues_on_three)
{
    check_like_one_device("cpu:3,cpu:1@fail=3", 6, 0, 3, 1);
}

Test(survivors, two_failures_in_one_run)
{
    check_like_one_device("cpu:2,cpu:1@fail=2,cpu:1@fail=4", 6, 0, 2, 2);
}

Test(survivors, down_to_one_device)
{
    check_like_one_device("cpu:1,cpu:1@fail=2,cpu:1@fail=3", 6, 0, 1, 2);
}

Test(survivors, a_hung_device_is_dropped_after_the_timeout)
{
    check_like_one_device("cpu:3,cpu:1@hang=3", 6, 150, 3, 1);
}

/* The failing device fails during an evaluation (its runs count
 * evaluation batches too) whose evaluator keeps the default policy, fail:
 * the evaluation fails, the next step drops the device and continues, and
 * the evaluator then runs on the survivors with the same result a fresh
 * one gives. */
Test(survivors, loss_during_evaluation)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:3,cpu:1@fail=3");
    linreg m;
    td_node mask;
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.learning_rate = 0.1f;
    o.on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    masked_linreg_init(ctx, mesh, &o, &m, &mask);
    td_evaluator *ev;
    TEST_OK(ctx, td_evaluator_create(m.g, mesh, mask, 1, &m.loss, &ev));
    const int64_t md[1] = {BATCH};
    td_tensor *mt = test_tensor(ctx, TD_F32, 1, md);
    for (int i = 0; i < BATCH; i++)
        test_f32(mt)[i] = 1.0f;
    TEST_OK(ctx, linreg_step(&m, 0)); /* device 3's run 1 */
    TEST_OK(ctx, linreg_step(&m, 1)); /* run 2 */
    linreg_batch(&m, 9);
    td_binding eb[3] = {{m.x, m.xs}, {m.y, m.ys}, {mask, mt}};
    TEST_OK(ctx, td_evaluator_load(ev, m.trainer));
    TEST_FAILS(ctx, TD_ERR_DEVICE_LOST, "injected failure in its run 3", td_evaluator_run(ev, 3, eb));
    TEST_OK(ctx, linreg_step(&m, 2)); /* drops device 3, runs on three */
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(m.trainer, &p));
    cr_assert_eq(p.devices, 3);
    cr_assert_eq(p.devices_lost, 1);
    linreg_batch(&m, 9);
    TEST_OK(ctx, td_evaluator_load(ev, m.trainer));
    TEST_OK(ctx, td_evaluator_run(ev, 3, eb));
    float after_loss, fresh_loss;
    double examples;
    TEST_OK(ctx, td_evaluator_result(ev, 1, &after_loss, &examples));
    cr_assert_eq(examples, BATCH);
    td_evaluator *fresh;
    TEST_OK(ctx, td_evaluator_create(m.g, mesh, mask, 1, &m.loss, &fresh));
    TEST_OK(ctx, td_evaluator_load(fresh, m.trainer));
    TEST_OK(ctx, td_evaluator_run(fresh, 3, eb));
    TEST_OK(ctx, td_evaluator_result(fresh, 1, &fresh_loss, NULL));
    cr_assert_eq(after_loss, fresh_loss, "the re-planned evaluator gives %g, a fresh one %g", (double)after_loss,
                 (double)fresh_loss);
    td_tensor_destroy(mt);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* Evaluates batch 9 with every row valid: the mean loss and the examples
 * counted. */
static td_status evaluate_all_valid(td_context *ctx, td_evaluator *ev, linreg *m, td_node mask, float *loss,
                                    double *examples)
{
    const int64_t md[1] = {BATCH};
    td_tensor *mt = test_tensor(ctx, TD_F32, 1, md);
    for (int i = 0; i < BATCH; i++)
        test_f32(mt)[i] = 1.0f;
    linreg_batch(m, 9);
    const td_binding b[3] = {{m->x, m->xs}, {m->y, m->ys}, {mask, mt}};
    td_status s = td_evaluator_load(ev, m->trainer);
    if (s == TD_OK)
        s = td_evaluator_run(ev, 3, b);
    if (s == TD_OK)
        s = td_evaluator_result(ev, 1, loss, examples);
    td_tensor_destroy(mt);
    return s;
}

/* What a fresh evaluator on the mesh as it is now gives: the one that
 * continued must give the same bits (the same shares on the same
 * devices). */
static void assert_like_a_fresh_evaluator(td_context *ctx, td_mesh *mesh, linreg *m, td_node mask, float loss)
{
    td_evaluator *fresh;
    float fresh_loss;
    TEST_OK(ctx, td_evaluator_create(m->g, mesh, mask, 1, &m->loss, &fresh));
    TEST_OK(ctx, evaluate_all_valid(ctx, fresh, m, mask, &fresh_loss, NULL));
    cr_assert_eq(loss, fresh_loss, "the evaluation that continued gives %g, a fresh one %g", (double)loss,
                 (double)fresh_loss);
    td_evaluator_destroy(fresh);
}

/* Steps 0 and 1, an evaluation that loses devices and goes on without
 * them, step 2: the parameters end where one device's three steps end,
 * and the step after the evaluation has nothing of its own to report. */
static void assert_trained_like_one_device(td_context *ctx, linreg *m, const survivor_run *run)
{
    survivor_run one;
    train_continuing("cpu:1", 3, 0, &one);
    cr_assert_eq(run->lost_at[2], 0, "the step after the evaluation reports %u lost devices", run->lost_at[2]);
    assert_replicas_identical(ctx, m, "after continuing past an evaluation");
    float params[FEATURES + 1];
    linreg_params(ctx, m, 0, params);
    for (int i = 0; i <= FEATURES; i++)
        cr_assert(fabsf(params[i] - one.params[i]) <= 1e-5f * fmaxf(1.0f, fabsf(one.params[i])),
                  "parameter %d is %.7g, one device %.7g", i, (double)params[i], (double)one.params[i]);
}

/* An evaluator told to continue survives a loss as a step does: the batch
 * that lost a device runs again on the survivors and the tally goes on.
 * The trainer on the same mesh counts the loss and plans for the survivors
 * at its next call -- a read of its chunks included, which answered
 * TD_ERR_STATE ("has not planned") before. */
Test(survivors, an_evaluation_continues_on_the_survivors)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:3,cpu:1@fail=3");
    linreg m;
    td_node mask;
    td_trainer_options o;
    continuing_options(&o);
    masked_linreg_init(ctx, mesh, &o, &m, &mask);
    survivor_run run = {0};
    TEST_OK(ctx, td_trainer_on_step(m.trainer, note_loss, &run));
    td_evaluator *ev;
    TEST_OK(ctx, td_evaluator_create(m.g, mesh, mask, 1, &m.loss, &ev));
    TEST_FAILS(ctx, TD_ERR_INVALID_ARGUMENT, "policy 7", td_evaluator_set_on_device_loss(ev, (td_on_device_loss)7));
    cr_assert_eq(td_evaluator_set_on_device_loss(NULL, TD_ON_DEVICE_LOSS_CONTINUE), TD_ERR_INVALID_ARGUMENT);
    TEST_OK(ctx, td_evaluator_set_on_device_loss(ev, TD_ON_DEVICE_LOSS_CONTINUE));
    TEST_OK(ctx, linreg_step(&m, 0)); /* device 3's run 1 */
    TEST_OK(ctx, linreg_step(&m, 1)); /* run 2 */
    float loss;
    double examples;
    TEST_OK(ctx, evaluate_all_valid(ctx, ev, &m, mask, &loss, &examples)); /* run 3 fails; the batch runs on three */
    cr_assert_eq(examples, BATCH, "the batch counted %g examples, expected it once", examples);
    uint32_t devices;
    TEST_OK(ctx, td_mesh_size(mesh, &devices));
    cr_assert_eq(devices, 3);
    size_t bytes = 0;
    TEST_OK(ctx, td_trainer_memory(m.trainer, 0, &bytes)); /* plans the trainer for the three */
    cr_assert_gt(bytes, 0);
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(m.trainer, &p));
    cr_assert_eq(p.devices, 3);
    cr_assert_eq(p.devices_lost, 1, "the trainer counted %u lost devices, expected the evaluation's 1", p.devices_lost);
    assert_like_a_fresh_evaluator(ctx, mesh, &m, mask, loss);
    TEST_OK(ctx, linreg_step(&m, 2));
    assert_trained_like_one_device(ctx, &m, &run);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* Two devices lost in one evaluation batch: it runs on four, fails, runs
 * on three, fails again, and runs on two. The trainer is waiting to plan
 * since the first drop when the second comes, and follows both: it counts
 * two, and its explicit split keeps the two survivors' weights (1 and 3 of
 * 12 examples: 3 and 9). */
Test(survivors, two_losses_in_one_evaluation)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:2,cpu:1@fail=3,cpu:1@fail=4");
    linreg m;
    td_node mask;
    td_trainer_options o;
    continuing_options(&o);
    const float weights[4] = {1.0f, 3.0f, 1.0f, 1.0f};
    o.balance = TD_BALANCE_EXPLICIT;
    o.balance_weights = weights;
    o.n_balance_weights = 4;
    o.balance_granularity = 1;
    masked_linreg_init(ctx, mesh, &o, &m, &mask);
    survivor_run run = {0};
    TEST_OK(ctx, td_trainer_on_step(m.trainer, note_loss, &run));
    td_evaluator *ev;
    TEST_OK(ctx, td_evaluator_create(m.g, mesh, mask, 1, &m.loss, &ev));
    TEST_OK(ctx, td_evaluator_set_on_device_loss(ev, TD_ON_DEVICE_LOSS_CONTINUE));
    TEST_OK(ctx, linreg_step(&m, 0));
    TEST_OK(ctx, linreg_step(&m, 1));
    float loss;
    double examples;
    TEST_OK(ctx, evaluate_all_valid(ctx, ev, &m, mask, &loss, &examples));
    cr_assert_eq(examples, BATCH);
    assert_like_a_fresh_evaluator(ctx, mesh, &m, mask, loss);
    TEST_OK(ctx, linreg_step(&m, 2));
    td_train_progress p = {.struct_size = sizeof(td_train_progress)};
    TEST_OK(ctx, td_trainer_progress(m.trainer, &p));
    cr_assert_eq(p.devices, 2);
    cr_assert_eq(p.devices_lost, 2, "the trainer counted %u lost devices, expected 2", p.devices_lost);
    uint32_t rows[4] = {0}, n = 0;
    TEST_OK(ctx, td_trainer_split(m.trainer, 4, rows, &n));
    cr_assert(n == 2 && rows[0] == 3 && rows[1] == 9, "split %u devices: %u %u, expected 3 9", n, rows[0], rows[1]);
    assert_trained_like_one_device(ctx, &m, &run);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* A global batch that does not divide by the survivors: 12 rows over 6,
 * then over 5 as 3, 3, 2, 2, 2 with weighted gradients -- still the one
 * device's run. */
Test(survivors, batch_not_dividing_by_the_survivors_splits_unevenly)
{
    check_like_one_device("cpu:5,cpu:1@fail=2", 6, 0, 5, 1);
}

/* A re-plan the survivors cannot take is an error that says why: an
 * all_gather of the examples moves a device's rows, so it needs equal
 * shards, and 12 rows do not split evenly over 5. The trainer then answers
 * TD_ERR_STATE to what reads its chunks. */
Test(survivors, survivors_that_cannot_plan_are_named)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = test_mesh(ctx, "cpu:5,cpu:1@fail=2");
    linreg m;
    linreg_init(ctx, mesh, &m);
    td_trainer_destroy(m.trainer);
    td_trainer_options o;
    td_trainer_options_init(&o);
    o.on_device_loss = TD_ON_DEVICE_LOSS_CONTINUE;
    td_node params[2] = {m.w, m.b}, gathered, total;
    TEST_OK(ctx, td_graph_all_gather(m.g, m.y, &gathered));
    TEST_OK(ctx, td_graph_sum(m.g, gathered, 0, NULL, false, &total));
    o.n_metrics = 1;
    o.metrics = &total;
    TEST_OK(ctx, td_trainer_create(m.g, mesh, m.loss, 2, params, &o, &m.trainer));
    TEST_OK(ctx, linreg_step(&m, 0));
    td_status s = linreg_step(&m, 1);
    cr_assert_neq(s, TD_OK);
    cr_assert(test_message_mentions(ctx, "continuing on the surviving devices failed"), "%s", td_last_error(ctx));
    cr_assert(test_message_mentions(ctx, "all_gather"), "%s", td_last_error(ctx));
    cr_assert(test_message_mentions(ctx, "uneven batch split"), "%s", td_last_error(ctx));
    size_t bytes;
    TEST_FAILS(ctx, TD_ERR_STATE, "has not planned", td_trainer_memory(m.trainer, 0, &bytes));
    cr_assert_neq(linreg_step(&m, 2), TD_OK);
    linreg_fini(&m);
    td_context_destroy(ctx);
}

/* The same on the backend specs (TD_TEST_DEVICES) with one more simulated
 * device that fails at its third step: GPU-style devices (PoCL, lavapipe,
 * mixed) re-plan and go on like CPU ones. */
Test(survivors_devices, a_failing_device_leaves_the_rest_training, .timeout = 300)
{
    char spec[256];
    const uint32_t n = test_devices_spec_with("cpu:3", "cpu:1@fail=3", spec, sizeof spec);
    check_like_one_device(spec, 6, 0, n - 1, 1);
}
