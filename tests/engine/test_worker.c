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
static void a_hang_still_times_out(const char *spin_us)
{
    test_set_env("TD_WORKER_SPIN_US", spin_us);
    const uint32_t timeout_ms = 100;
    td_context *ctx = test_context(timeout_ms);
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

Test(worker, a_hung_device_times_out_with_spinning_waits) { a_hang_still_times_out("200"); }
Test(worker, a_hung_device_times_out_with_sleeping_waits) { a_hang_still_times_out("0"); }
