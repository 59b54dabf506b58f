/* The device workers' waits (engine/core/worker.c) when they spin before
 * sleeping: a worker watches for its next job, and the caller for a job's
 * end, for TD_WORKER_SPIN_US before sleeping. A job must still end only
 * when every worker is out of it (never at the first one), a worker that
 * hangs must still time out and be fenced off, and a mesh must still stop
 * promptly while its workers spin. Each test runs with the spin forced on
 * (the default turns it on only with fewer devices than cores) and off,
 * so both paths are covered on any machine. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine_test_util.h"
#include "td_mesh_internal.h"
#include "td_platform.h"

#define MAX_DEVICES 8

typedef struct {
    uint32_t devices;
    uint64_t runs[MAX_DEVICES]; /* plain: each worker writes its own, the caller reads after the job */
    uint64_t slow_ns;           /* the last device's extra work in every job */
    td_mesh *mesh;
} count_job;

static td_status count_run(void *arg, uint32_t position)
{
    count_job *job = arg;
    if (position == job->devices - 1 && job->slow_ns) {
        /* Busy, not asleep: the others finish long before this one. */
        const uint64_t until = td_platform_now_ns() + job->slow_ns;
        while (td_platform_now_ns() < until)
            ;
    }
    job->runs[position]++;
    return TD_OK;
}

static void every_job_waits_for_every_worker(const char *spin_us, uint32_t devices)
{
    test_set_env("TD_WORKER_SPIN_US", spin_us);
    td_context *ctx = test_context(5000);
    char spec[16];
    snprintf(spec, sizeof spec, "cpu:%u", devices);
    td_mesh *mesh = test_mesh(ctx, spec);
    test_set_env("TD_WORKER_SPIN_US", NULL);
    count_job job = {.devices = devices, .slow_ns = 20000, .mesh = mesh};
    /* Short jobs back to back (the case the spin is for), then a few with
     * a pause between them longer than the spin (the workers sleep). */
    for (uint64_t k = 1; k <= 3000; k++) {
        if (k > 2990)
            td_platform_sleep_ns(2000000);
        TEST_OK(ctx, td_mesh_run(mesh, count_run, &job));
        for (uint32_t p = 0; p < devices; p++)
            cr_assert_eq(job.runs[p], k, "spin %s us, cpu:%u: after job %llu, device %u ran %llu jobs", spin_us,
                         devices, (unsigned long long)k, p, (unsigned long long)job.runs[p]);
    }
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

Test(worker, a_job_ends_when_every_worker_is_out_spinning_one_device)
{
    every_job_waits_for_every_worker("200", 1);
}
Test(worker, a_job_ends_when_every_worker_is_out_spinning_three_devices)
{
    every_job_waits_for_every_worker("200", 3);
}
Test(worker, a_job_ends_when_every_worker_is_out_sleeping)
{
    every_job_waits_for_every_worker("0", 3);
}

typedef struct {
    td_mesh *mesh;
} hang_job;

static td_status begin_run(void *arg, uint32_t position)
{
    hang_job *job = arg;
    return td_mesh_device_begin_run(job->mesh, position);
}

/* Device 1 hangs in its third run: that job times out at 4 x the
 * timeout, the device is fenced off, and the next run fails at once. */
static void hang_times_out(const char *spin_us, uint32_t cpu_threads)
{
    test_set_env("TD_WORKER_SPIN_US", spin_us);
    const uint32_t timeout_ms = 100;
    td_context *ctx = test_context_threads(timeout_ms, cpu_threads);
    td_mesh *mesh = test_mesh(ctx, "cpu:1,cpu:1@hang=3");
    test_set_env("TD_WORKER_SPIN_US", NULL);
    hang_job job = {.mesh = mesh};
    TEST_OK(ctx, td_mesh_run(mesh, begin_run, &job));
    TEST_OK(ctx, td_mesh_run(mesh, begin_run, &job));
    const uint64_t start = td_platform_now_ns();
    cr_assert_eq(td_mesh_run(mesh, begin_run, &job), TD_ERR_TIMEOUT);
    const double elapsed_ms = (double)(td_platform_now_ns() - start) * 1e-6;
    cr_assert_geq(elapsed_ms, 4.0 * timeout_ms * 0.95, "spin %s us: the hung job returned after %.1f ms", spin_us,
                  elapsed_ms);
    cr_assert_lt(elapsed_ms, 4.0 * timeout_ms + 1000.0, "spin %s us: the hung job returned after %.1f ms", spin_us,
                 elapsed_ms);
    cr_assert(td_mesh_device_lost(mesh, 1));
    cr_assert_eq(td_mesh_run(mesh, begin_run, &job), TD_ERR_DEVICE_LOST);
    /* The workers are spinning or asleep now; either way they stop. */
    const uint64_t destroy_start = td_platform_now_ns();
    td_mesh_destroy(mesh);
    cr_assert_lt((double)(td_platform_now_ns() - destroy_start) * 1e-6, 1000.0);
    td_context_destroy(ctx);
}

Test(worker, a_hung_device_times_out_with_spinning_waits) { hang_times_out("200", 0); }
Test(worker, a_hung_device_times_out_with_sleeping_waits) { hang_times_out("0", 0); }
/* One thread for two devices: both are fibers of one carrier, and the
 * hung one must take turns, or the other would never finish its job. */
Test(worker, a_hung_device_on_a_fiber_times_out_and_its_carrier_runs_on)
{
    if (!td_fiber_available())
        cr_skip("no fibers on this system: every device has a thread of its own");
    hang_times_out("0", 1);
}

#define TURN_DEVICES 5
#define TURN_JOBS 300

/* Every device of a job meets all of them twice (test_meeting_wait takes
 * turns on a fiber) and notes whether it ran on a fiber. */
typedef struct {
    test_meeting meeting;
    uint32_t on_fiber[TURN_DEVICES];
} turn_job;

static td_status meet_twice(void *arg, uint32_t position)
{
    turn_job *job = arg;
    job->on_fiber[position] += td_worker_on_fiber();
    test_meeting_wait(&job->meeting);
    test_meeting_wait(&job->meeting);
    return TD_OK;
}

/* Five devices on two threads: each is a fiber, a device waiting for the
 * others lets its carrier run them, and every job ends with every device
 * through both meetings. */
Test(worker, devices_beyond_the_threads_take_turns_on_fibers)
{
    if (!td_fiber_available())
        cr_skip("no fibers on this system: every device has a thread of its own");
    td_context *ctx = test_context_threads(5000, 2);
    td_mesh *mesh = test_mesh(ctx, "cpu:5");
    turn_job job = {0};
    test_meeting_init(&job.meeting, mesh, TURN_DEVICES);
    for (uint32_t k = 0; k < TURN_JOBS; k++) {
        TEST_OK(ctx, td_mesh_run(mesh, meet_twice, &job));
        cr_assert_eq(__atomic_load_n(&job.meeting.arrived, __ATOMIC_ACQUIRE), 2u * TURN_DEVICES * (k + 1));
    }
    for (uint32_t p = 0; p < TURN_DEVICES; p++)
        cr_assert_eq(job.on_fiber[p], TURN_JOBS, "device %u ran %u of %u jobs on a fiber", p, job.on_fiber[p],
                     TURN_JOBS);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

/* TD_FIBERS=0 keeps a thread per device (for measurements); the mesh
 * runs the same. */
Test(worker, fibers_off_gives_every_device_a_thread)
{
    test_set_env("TD_FIBERS", "0");
    td_context *ctx = test_context_threads(5000, 2);
    td_mesh *mesh = test_mesh(ctx, "cpu:5");
    test_set_env("TD_FIBERS", NULL);
    turn_job job = {0};
    test_meeting_init(&job.meeting, mesh, TURN_DEVICES);
    for (uint32_t k = 0; k < 20; k++)
        TEST_OK(ctx, td_mesh_run(mesh, meet_twice, &job));
    for (uint32_t p = 0; p < TURN_DEVICES; p++)
        cr_assert_eq(job.on_fiber[p], 0u);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

/* OpenBLAS's pthreads build starts its server threads as it loads (and
 * again at a thread-count change after a fork, as in this test's
 * process), each watching for work with sched_yield for about 0.1 s: a
 * thread the workers would share the cores with. A CPU device sets
 * OpenBLAS to one thread and shuts them down (cpu_backend.c). Weak, so
 * another CBLAS, or none, links too; `blas_num_threads` is 1 where
 * OPENBLAS_NUM_THREADS=1 kept them from starting at all. (ELF only: no
 * OpenBLAS in the Windows build.) */
#ifdef __ELF__
extern int openblas_get_num_threads(void) __attribute__((weak));
extern int blas_server_avail __attribute__((weak));
extern int blas_num_threads __attribute__((weak));

Test(worker, a_cpu_mesh_leaves_no_openblas_server_thread_running)
{
    if (!openblas_get_num_threads || !&blas_server_avail || !&blas_num_threads)
        cr_skip_test("not linked with OpenBLAS's pthreads build: nothing to check");
    td_context *ctx = test_context(5000);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    cr_assert_eq(openblas_get_num_threads(), 1, "OpenBLAS runs %d threads, expected 1", openblas_get_num_threads());
    cr_assert(blas_server_avail == 0 || blas_num_threads <= 1,
              "OpenBLAS's %d server thread(s) still run after a CPU mesh opened", blas_num_threads - 1);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}
#endif
