/* One worker per device. The device's queue is driven only from its
 * worker, so backends need no locking of their own; a job is a function run
 * on every worker at once, and td_mesh_run waits for all of them.
 *
 * A worker is a thread of its own, except when a mesh of CPU devices has
 * more of them than the context has threads (cpu:4 on 2 cores): then as
 * many carrier threads as there are threads run the devices as fibers,
 * device i on carrier i mod carriers. A device that must wait for a peer
 * (the collectives, an injected hang or slowdown) takes turns instead
 * (td_worker_take_turn): its carrier runs its other devices, and once all
 * of them wait it watches the doorbell that everything they may wait for
 * rings (td_mesh_ring_doorbell), spinning a while when each carrier has a
 * core, then sleeping. Devices so take turns in user space, not through
 * the scheduler: four device threads on two cores took two or three
 * scheduler hand-offs per wait (bench/RESULTS.md, linreg on cpu:4).
 *
 * No worker outlives its mesh: a device the mesh gives up on is cancelled
 * (td_backend_ops.cancel), so a CPU device leaves its kernel within a GEMM
 * tile, and a GPU device's worker, which only enqueues and waits, leaves
 * within the bounded wait it is in; destroying the mesh then joins every
 * worker. The process's exit waits, bounded, for workers still inside a
 * job (a caller that exits without destroying its context), before
 * OpenBLAS's and the drivers' exit handlers tear down what those workers
 * may be using. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_context_state.h"
#include "td_host_pool.h"
#include "td_mesh_internal.h"
#include "td_platform.h"

struct td_worker {
    td_thread thread;
    bool started;
    bool busy; /* inside the current job (under the pool's lock) */
    uint32_t position;
    uint64_t last_gap_ns; /* from its last job's end to the next post (the worker's own) */
    td_worker_pool *pool;
    /* With carriers: the device's fiber, whether it is inside the current
     * job, and when a wait of its wants to run again at the latest (0:
     * none). Its carrier's only. */
    td_fiber *fiber;
    bool in_job;
    uint64_t wake_at_ns;
};

struct td_worker_pool {
    td_mesh *mesh;
    td_mutex lock;
    td_cond job_posted;
    td_cond job_done;
    td_cond released; /* a device was fenced off, or the pool is stopping */
    uint64_t generation; /* bumped once per job; written under the lock, read lock-free by spinning workers */
    uint32_t pending;    /* workers still running the current job; likewise read by a spinning caller */
    uint64_t spin_ns;    /* how long a wait watches before it sleeps; 0: sleep at once */
    uint64_t last_job_ns; /* the last job's time, post to done (the caller's) */
    /* When the current job was posted, and when its last device finished
     * (under the lock). The waits judge "short" by these, not by when the
     * waiter saw the event: a waiter that slept adds its own wake-up (tens
     * of microseconds on a VM) to what it measures, and a job or gap judged
     * long once for that would keep it sleeping for good. */
    uint64_t posted_ns;
    uint64_t done_ns;
    uint64_t spin_quiet_until; /* nobody spins before this (atomic): a yield lost a time slice */
    td_job_fn fn;
    void *arg;
    td_status first_failure;
    bool stopping; /* written under the lock; read atomically by devices taking turns */
    td_worker *workers;
    /* 0: a thread per device. Else the carrier threads (workers[0 ..
     * carriers) run every device as a fiber. */
    uint32_t carriers;
    /* Bumped by every event a device taking turns may wait for; carriers
     * with every device waiting sleep on doorbell_rung until it moves. */
    uint64_t doorbell;
    uint32_t doorbell_sleepers;
    td_mutex doorbell_lock;
    td_cond doorbell_rung;
};

static _Thread_local int current_position = -1;
/* On a carrier: the worker of the device whose fiber it runs now. */
static _Thread_local td_worker *carried_worker;

int td_worker_current_position(void)
{
    return current_position;
}

/* ---- the process's exit ----
 * Process-wide on purpose: exit is the process's, and so are OpenBLAS and
 * the drivers whose exit handlers unmap what a worker inside a job may be
 * using. Two contexts share nothing else here. */

/* Workers of every mesh inside a job right now. */
static uint32_t workers_in_jobs;
/* How long exit waits for them: the longest bound any mesh's destroy
 * would wait (join_bound_ms), only ever raised. */
static uint64_t exit_wait_ms;
static td_once exit_wait_once = TD_ONCE_INITIALIZER;

/* A worker in a job that timed out may be in one device wait (at most the
 * context timeout) and, on a GPU, one more (a ring op's unmap, or the
 * run's final drain) before it sees that it was fenced off; a cancelled
 * CPU device is out within a GEMM tile. One more second for the
 * scheduler. */
static uint64_t join_bound_ms(const td_mesh *mesh)
{
    return 2ull * td_context_timeout_ms(mesh->ctx) + 1000u;
}

/* Runs from exit(), before the exit handlers of the libraries loaded
 * before tandem's first mesh (OpenBLAS, the OpenCL and Vulkan drivers):
 * those run later, from the dynamic linker's handler, registered first.
 * A job still running here belongs to a caller that did not destroy its
 * context; a fenced one ends within a tile or a wait, so this returns
 * promptly. Past the bound, a worker stuck in a driver is left, said on
 * stderr (there is no context to log to). */
static void wait_for_workers_at_exit(void)
{
    /* A worker that calls exit itself (from a hook or a log callback)
     * must not wait for its own job. */
    const uint32_t self = current_position >= 0 ? 1u : 0u;
    const uint64_t limit_ms = __atomic_load_n(&exit_wait_ms, __ATOMIC_ACQUIRE);
    const uint64_t start = td_platform_now_ns();
    uint32_t inside;
    while ((inside = __atomic_load_n(&workers_in_jobs, __ATOMIC_ACQUIRE)) > self) {
        const uint64_t waited_ms = (td_platform_now_ns() - start) / 1000000u;
        if (waited_ms >= limit_ms) {
            fprintf(stderr, "tandem: %u worker thread(s) still inside a job at exit after %llu ms\n", inside - self,
                    (unsigned long long)waited_ms);
            return;
        }
        td_platform_sleep_ns(1000000u); /* polled: exit is rare, a condition variable not worth it */
    }
}

static void register_exit_wait(void)
{
    if (atexit(wait_for_workers_at_exit) != 0)
        fprintf(stderr, "tandem: could not register the exit handler that waits for worker threads\n");
}

static void raise_exit_wait(uint64_t ms)
{
    uint64_t old = __atomic_load_n(&exit_wait_ms, __ATOMIC_RELAXED);
    while (old < ms && !__atomic_compare_exchange_n(&exit_wait_ms, &old, ms, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

/* The device's backend stops its running and later segments; under the
 * pool's lock or not, it only sets a flag. */
static void cancel_device(td_mesh_device *md)
{
    if (md->ops->cancel && md->dev)
        md->ops->cancel(md->dev);
}

/* Watches *word until it differs from `value` or `ns` pass; whether it
 * did. SPIN_PAUSES pauses between clock reads, and the core is offered
 * to any other ready thread each round (td_platform_yield): with another
 * process busy on the machine, the caller and the worker often share a
 * core, and a spin that kept it would keep the very thread it waits for
 * off it. Measured there (load 6-7, linreg on cpu:1, the median of the
 * post-to-worker and worker-to-caller hand-offs): a yield every 64 pauses
 * 3.3-4.5 us each, every 8 1.8-2.0 us, every pause 1.6-1.7 us; 8 keeps a
 * check every few tens of nanoseconds between yields for when each has
 * a core. */
#define SPIN_PAUSES 8

/* Whether the pool's waits may spin now. */
static bool may_spin(td_worker_pool *pool)
{
    return pool->spin_ns && !td_spin_quiet(&pool->spin_quiet_until);
}

static bool spin_while_u64(td_worker_pool *pool, const uint64_t *word, uint64_t value, uint64_t ns)
{
    const uint64_t until = td_platform_now_ns() + ns;
    for (;;) {
        for (int i = 0; i < SPIN_PAUSES; i++) {
            if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != value)
                return true;
            td_platform_spin_pause();
        }
        if (td_platform_now_ns() >= until || !td_spin_yield(&pool->spin_quiet_until))
            return false;
    }
}

/* Likewise until *word is zero. */
static bool spin_until_zero_u32(td_worker_pool *pool, const uint32_t *word, uint64_t ns)
{
    const uint64_t until = td_platform_now_ns() + ns;
    for (;;) {
        for (int i = 0; i < SPIN_PAUSES; i++) {
            if (__atomic_load_n(word, __ATOMIC_ACQUIRE) == 0)
                return true;
            td_platform_spin_pause();
        }
        if (td_platform_now_ns() >= until || !td_spin_yield(&pool->spin_quiet_until))
            return false;
    }
}

/* Takes the pool's lock right after a spin saw the other side move: that
 * side may still hold it for a few instructions, and a plain lock would
 * then sleep on it, a futex round trip the spin was there to avoid. (Not
 * measurable on the loaded machine of its making, where the hand-offs'
 * cost was the shared core: see SPIN_PAUSES.) */
static void lock_after_spin(td_mutex *lock)
{
    for (int i = 0; i < 4096; i++) {
        if (td_mutex_try_lock(lock))
            return;
        td_platform_spin_pause();
    }
    td_mutex_lock(lock);
}

/* How long a worker watches for its next job, and the caller for a job's
 * end, before sleeping: 50 us when each worker has a core of its own
 * (devices <= the context's CPU threads, two or more: cpu:1 and cpu:2 on 2 cores; at
 * cpu:2 the caller shares a core with the workers only between jobs, when
 * the spins' yields hand it over: linreg 40-43 -> 12-21 us a step, quiet,
 * and 33 -> 19-22 us with two busy loops), else 0: there a spinning
 * worker takes turns from the caller or from a worker still in its job
 * (cpu:4 on 2 cores: 56-60 -> 32-37 us quiet but 58-67 -> 79-126 us beside
 * two busy loops; the collectives' waits, which know whether their last
 * wait was short, spin there instead: ring.c).
 * TD_WORKER_SPIN_US overrides it (0 turns it off; for measurements). */
static uint64_t worker_spin_ns(const td_mesh *mesh, uint32_t worker_threads)
{
    const char *env = getenv("TD_WORKER_SPIN_US");
    if (env && *env) {
        char *end;
        const unsigned long long us = strtoull(env, &end, 10);
        if (*end == '\0' && us <= 1000000ull)
            return us * 1000ull;
        td_log(mesh->ctx, TD_LOG_WARN, "TD_WORKER_SPIN_US='%s' is not a count of microseconds up to 1000000; ignored",
               env);
    }
    const uint32_t threads = td_host_pool_default_threads(mesh->ctx->options.cpu_threads);
    /* One thread (one core, or a core's share among processes): the
     * caller and the worker always share it; that case was not measured
     * with the spins on, so it keeps sleeping at once. */
    return threads > 1 && worker_threads <= threads ? 50000u : 0u;
}

/* Under the lock: waits for the job after the one numbered *seen, and
 * takes it (true), or sees the pool stopping (false). */
static bool wait_for_job(td_worker_pool *pool, td_worker *w, uint64_t *seen, uint64_t done_at)
{
    /* Small steps come back to back: a worker whose last wait for a job
     * was short watches for the next one a while before it sleeps (a sleep
     * and its wake-up cost tens of microseconds, more than a small step's
     * work). */
    if (!pool->stopping && pool->generation == *seen && w->last_gap_ns <= pool->spin_ns && may_spin(pool)) {
        td_mutex_unlock(&pool->lock);
        if (spin_while_u64(pool, &pool->generation, *seen, pool->spin_ns))
            lock_after_spin(&pool->lock);
        else
            td_mutex_lock(&pool->lock);
    }
    while (!pool->stopping && pool->generation == *seen)
        td_cond_wait(&pool->job_posted, &pool->lock);
    if (done_at)
        w->last_gap_ns = pool->posted_ns > done_at ? pool->posted_ns - done_at : 0;
    if (pool->stopping)
        return false;
    *seen = pool->generation;
    return true;
}

/* A device's job ended with `s`: the last one to end wakes the caller. */
static void finish_job(td_worker_pool *pool, td_worker *w, td_status s)
{
    __atomic_sub_fetch(&workers_in_jobs, 1u, __ATOMIC_ACQ_REL);
    td_mutex_lock(&pool->lock);
    w->busy = false;
    if (s != TD_OK && (pool->first_failure == TD_OK || pool->first_failure == TD_ERR_ABORTED))
        pool->first_failure = s;
    if (__atomic_sub_fetch(&pool->pending, 1u, __ATOMIC_RELEASE) == 0) {
        pool->done_ns = td_platform_now_ns();
        td_cond_broadcast(&pool->job_done);
    }
    td_mutex_unlock(&pool->lock);
}

static void worker_main(void *p)
{
    td_worker *w = p;
    td_worker_pool *pool = w->pool;
    current_position = (int)w->position;
    uint64_t seen = 0;
    uint64_t done_at = 0;
    td_mutex_lock(&pool->lock);
    while (wait_for_job(pool, w, &seen, done_at)) {
        td_job_fn fn = pool->fn;
        void *arg = pool->arg;
        __atomic_add_fetch(&workers_in_jobs, 1u, __ATOMIC_ACQ_REL);
        td_mutex_unlock(&pool->lock);
        finish_job(pool, w, fn(arg, w->position));
        done_at = td_platform_now_ns();
        td_mutex_lock(&pool->lock);
    }
    td_mutex_unlock(&pool->lock);
}

/* ---- devices as fibers on carrier threads ---- */

/* A device's fiber: one job per resume from its carrier, which read the
 * job under the pool's lock before resuming it. Returns when the pool
 * stops. */
static void device_fiber_main(void *p)
{
    td_worker *w = p;
    td_worker_pool *pool = w->pool;
    while (!__atomic_load_n(&pool->stopping, __ATOMIC_ACQUIRE)) {
        finish_job(pool, w, pool->fn(pool->arg, w->position));
        w->in_job = false;
        td_fiber_suspend();
    }
}

/* A carrier's devices are carrier, carrier + carriers, ... */
#define FOR_CARRIED(pool, carrier, i) for (uint32_t i = (carrier); i < (pool)->mesh->count; i += (pool)->carriers)

/* The longest a carrier with every device waiting sleeps without a ring:
 * the devices' waits check their deadlines (context timeouts) only when
 * they run. */
#define DOORBELL_NAP_NS 10000000u

/* Every device of the carrier waits: watches the doorbell until it moves
 * from `bell`, a device's wake-up time comes, or the nap ends. */
static void wait_for_doorbell(td_worker_pool *pool, uint32_t carrier, uint64_t bell)
{
    uint64_t until = td_platform_now_ns() + DOORBELL_NAP_NS;
    FOR_CARRIED(pool, carrier, i)
    {
        const td_worker *w = &pool->workers[i];
        if (w->in_job && w->wake_at_ns && w->wake_at_ns < until)
            until = w->wake_at_ns;
    }
    const uint64_t now = td_platform_now_ns();
    if (until <= now)
        return;
    const uint64_t spin = until - now < pool->spin_ns ? until - now : pool->spin_ns;
    if (spin && may_spin(pool) && spin_while_u64(pool, &pool->doorbell, bell, spin))
        return;
    td_mutex_lock(&pool->doorbell_lock);
    __atomic_add_fetch(&pool->doorbell_sleepers, 1u, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&pool->doorbell, __ATOMIC_SEQ_CST) == bell &&
           td_cond_wait_until(&pool->doorbell_rung, &pool->doorbell_lock, until) != ETIMEDOUT)
        ;
    __atomic_sub_fetch(&pool->doorbell_sleepers, 1u, __ATOMIC_SEQ_CST);
    td_mutex_unlock(&pool->doorbell_lock);
}

/* Runs the current job on every device of the carrier, a turn each in
 * position order, until all are done. */
static void run_turns(td_worker_pool *pool, uint32_t carrier)
{
    uint32_t left = 0;
    FOR_CARRIED(pool, carrier, i)
    {
        pool->workers[i].in_job = true;
        pool->workers[i].wake_at_ns = 0;
        __atomic_add_fetch(&workers_in_jobs, 1u, __ATOMIC_ACQ_REL);
        left++;
    }
    while (left) {
        const uint64_t bell = __atomic_load_n(&pool->doorbell, __ATOMIC_SEQ_CST);
        FOR_CARRIED(pool, carrier, i)
        {
            td_worker *w = &pool->workers[i];
            if (!w->in_job)
                continue;
            current_position = (int)i;
            carried_worker = w;
            td_fiber_resume(w->fiber);
            carried_worker = NULL;
            current_position = -1;
            if (!w->in_job)
                left--;
        }
        /* Anything a waiting device may have been waiting for -- a peer's
         * progress, on this carrier too -- rang the doorbell since `bell`. */
        if (left && __atomic_load_n(&pool->doorbell, __ATOMIC_SEQ_CST) == bell)
            wait_for_doorbell(pool, carrier, bell);
    }
}

static void carrier_main(void *p)
{
    td_worker *c = p;
    td_worker_pool *pool = c->pool;
    uint64_t seen = 0;
    uint64_t done_at = 0;
    td_mutex_lock(&pool->lock);
    while (wait_for_job(pool, c, &seen, done_at)) {
        td_mutex_unlock(&pool->lock);
        run_turns(pool, c->position);
        done_at = td_platform_now_ns();
        td_mutex_lock(&pool->lock);
    }
    td_mutex_unlock(&pool->lock);
    /* Let every fiber of this carrier return (each is between jobs, or
     * never ran and returns at once): the sanitizers then see its stack
     * unwound. */
    FOR_CARRIED(pool, c->position, i)
    {
        if (!td_fiber_finished(pool->workers[i].fiber))
            td_fiber_resume(pool->workers[i].fiber);
    }
}

/* Devices sharing a thread: every device a CPU one, more of them than the
 * context's threads, fibers available, one process (the exchange with
 * other processes waits on its own thread, which a fiber's carrier must
 * not block on), and TD_FIBERS not "0" (for measurements). */
static uint32_t carrier_count(const td_mesh *mesh)
{
    const char *env = getenv("TD_FIBERS");
    if (env && strcmp(env, "0") == 0)
        return 0;
    const uint32_t threads = td_host_pool_default_threads(mesh->ctx->options.cpu_threads);
    if (mesh->count <= threads || !td_fiber_available() || td_context_processes(mesh->ctx))
        return 0;
    for (uint32_t i = 0; i < mesh->count; i++)
        if (strcmp(mesh->devices[i].info.backend, "cpu") != 0)
            return 0;
    return threads;
}

/* A fiber's stack: the size of a thread's on Linux (the kernels' frames
 * are sized for one); only the pages a device touches are backed. */
#define DEVICE_FIBER_STACK_BYTES ((size_t)8 << 20)

/* carried_worker is set only while a carrier runs a device's fiber. */
bool td_worker_on_fiber(void)
{
    return carried_worker != NULL;
}

void td_worker_take_turn(uint64_t wake_at_ns)
{
    td_worker *w = carried_worker;
    if (!w)
        return;
    w->wake_at_ns = wake_at_ns;
    td_fiber_suspend();
    w->wake_at_ns = 0;
}

bool td_worker_first_on_carrier(void)
{
    const td_worker *w = carried_worker;
    return w && w->position < w->pool->carriers;
}

void td_mesh_ring_doorbell(td_mesh *mesh)
{
    td_worker_pool *pool = mesh->pool;
    if (!pool || !pool->carriers)
        return;
    __atomic_add_fetch(&pool->doorbell, 1u, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool->doorbell_sleepers, __ATOMIC_SEQ_CST)) {
        td_mutex_lock(&pool->doorbell_lock);
        td_cond_broadcast(&pool->doorbell_rung);
        td_mutex_unlock(&pool->doorbell_lock);
    }
}

td_status td_worker_pool_create(td_mesh *mesh)
{
    td_context *ctx = mesh->ctx;
    td_worker_pool *pool = td_alloc_zeroed(ctx, sizeof *pool);
    if (!pool)
        return TD_OOM(ctx, "the worker pool", sizeof *pool);
    pool->mesh = mesh;
    pool->workers = td_alloc_zeroed(ctx, sizeof *pool->workers * mesh->count);
    if (!pool->workers) {
        td_free(ctx, pool);
        return TD_OOM(ctx, "the workers", sizeof *pool->workers * mesh->count);
    }
    if (td_mutex_init(&pool->lock) != 0 || td_cond_init(&pool->job_posted) != 0 || td_cond_init(&pool->job_done) != 0 ||
        td_cond_init(&pool->released) != 0 || td_mutex_init(&pool->doorbell_lock) != 0 ||
        td_cond_init(&pool->doorbell_rung) != 0) {
        td_free(ctx, pool->workers);
        td_free(ctx, pool);
        return td_error_set(ctx, TD_ERR_OUT_OF_MEMORY, "could not set up the worker pool's lock and conditions");
    }
    td_once_run(&exit_wait_once, register_exit_wait);
    raise_exit_wait(join_bound_ms(mesh));
    pool->carriers = carrier_count(mesh);
    pool->spin_ns = worker_spin_ns(mesh, pool->carriers ? pool->carriers : mesh->count);
    mesh->pool = pool;
    for (uint32_t i = 0; i < mesh->count; i++) {
        td_worker *w = &pool->workers[i];
        w->position = i;
        w->pool = pool;
        mesh->devices[i].worker = w;
        if (!pool->carriers)
            continue;
        const int rc = td_fiber_create(&w->fiber, DEVICE_FIBER_STACK_BYTES, device_fiber_main, w);
        if (rc != 0) {
            td_worker_pool_destroy(mesh);
            return td_error_set(ctx, TD_ERR_OUT_OF_MEMORY, "could not make the fiber of device %u (errno %d)", i, rc);
        }
    }
    const uint32_t threads = pool->carriers ? pool->carriers : mesh->count;
    for (uint32_t i = 0; i < threads; i++) {
        td_worker *w = &pool->workers[i];
        int rc = td_thread_start(&w->thread, pool->carriers ? carrier_main : worker_main, w);
        if (rc != 0) {
            td_worker_pool_destroy(mesh);
            return td_error_set(ctx, TD_ERR_OUT_OF_MEMORY, "could not start %s %u (errno %d)",
                                pool->carriers ? "the carrier thread" : "the worker thread for device", i, rc);
        }
        w->started = true;
    }
    return TD_OK;
}

bool td_worker_pool_destroy(td_mesh *mesh)
{
    td_worker_pool *pool = mesh->pool;
    if (!pool)
        return !mesh->stranded;
    td_mutex_lock(&pool->lock);
    __atomic_store_n(&pool->stopping, true, __ATOMIC_RELEASE);
    /* A worker still inside a job is in one that timed out (td_mesh_run
     * returns only when every other one is done): it was cancelled when it
     * was fenced off, and is again here for the paths that give up on it
     * without a fence. */
    for (uint32_t i = 0; i < mesh->count; i++)
        if (pool->workers[i].busy) /* only a job sets it, and jobs run on a whole pool */
            cancel_device(&mesh->devices[i]);
    td_cond_broadcast(&pool->job_posted);
    td_cond_broadcast(&pool->released); /* injected hangs end with the mesh */
    td_mutex_unlock(&pool->lock);
    td_mesh_ring_doorbell(mesh);
    const uint64_t bound_ms = join_bound_ms(mesh);
    const uint64_t deadline = td_platform_deadline_after_ms(bound_ms);
    bool stranded = false;
    for (uint32_t i = 0; i < mesh->count; i++) {
        if (!pool->workers[i].started)
            continue;
        if (!td_thread_join_until(&pool->workers[i].thread, deadline)) {
            /* Stuck in a driver call past its own timeout: leave it rather
             * than hang the caller. Nothing it may touch -- the pool, the
             * mesh, its devices, the context -- is freed (mesh.c), and exit
             * waits for it, bounded. */
            stranded = true;
        }
    }
    mesh->pool = NULL;
    if (stranded) {
        td_log(mesh->ctx, TD_LOG_ERROR, "a worker thread of mesh '%s' did not stop within %llu ms; it is left running",
               mesh->spec, (unsigned long long)bound_ms);
        mesh->stranded = true;
        return false;
    }
    for (uint32_t i = 0; i < mesh->count; i++)
        td_fiber_destroy(pool->workers[i].fiber);
    td_cond_destroy(&pool->job_posted);
    td_cond_destroy(&pool->job_done);
    td_cond_destroy(&pool->released);
    td_cond_destroy(&pool->doorbell_rung);
    td_mutex_destroy(&pool->doorbell_lock);
    td_mutex_destroy(&pool->lock);
    td_free(mesh->ctx, pool->workers);
    td_free(mesh->ctx, pool);
    return true;
}

/* Under the pool's lock: waits until no worker is inside a job, at most
 * `ms`. Returns whether none is. */
static bool wait_idle(td_worker_pool *pool, uint64_t ms)
{
    const uint64_t deadline = td_platform_deadline_after_ms(ms);
    int rc = 0;
    while (pool->pending != 0 && rc != ETIMEDOUT)
        rc = td_cond_wait_until(&pool->job_done, &pool->lock, deadline);
    return pool->pending == 0;
}

/* Under the lock: "2 (cpu:1@hang=3), 3 (cpu:1)" for the busy workers. */
static void busy_list(const td_mesh *mesh, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < mesh->count && used < size; i++)
        if (mesh->pool->workers[i].busy)
            used += (size_t)snprintf(out + used, size - used, "%s%u (%s)", used ? ", " : "", i,
                                     mesh->devices[i].item);
}

bool td_mesh_quiesce(td_mesh *mesh)
{
    td_worker_pool *pool = mesh->pool;
    if (!pool)
        return !mesh->stranded;
    td_mutex_lock(&pool->lock);
    bool idle = wait_idle(pool, td_context_timeout_ms(mesh->ctx));
    td_mutex_unlock(&pool->lock);
    return idle;
}

/* Under the lock, after a failed wait for quiet. */
static td_status still_busy(td_mesh *mesh)
{
    char names[512];
    busy_list(mesh, names, sizeof names);
    return td_error_set(mesh->ctx, TD_ERR_TIMEOUT,
                        "device(s) %s still inside a job that timed out earlier, another timeout later: they are "
                        "lost and the mesh cannot run; destroy it",
                        names);
}

/* A mesh without workers: one would not stop (stranded), or they could
 * not be started again after dropping lost devices. */
static td_status no_workers(td_mesh *mesh)
{
    if (mesh->stranded)
        return td_error_set(mesh->ctx, TD_ERR_TIMEOUT,
                            "mesh '%s': a worker thread did not stop after a timeout; the mesh cannot run, destroy it",
                            mesh->spec);
    return td_error_set(mesh->ctx, TD_ERR_STATE, "mesh '%s' has no worker threads; destroy it", mesh->spec);
}

td_status td_mesh_wait_quiet(td_mesh *mesh)
{
    td_worker_pool *pool = mesh->pool;
    if (!pool)
        return mesh->stranded ? no_workers(mesh) : TD_OK;
    td_mutex_lock(&pool->lock);
    td_status s = wait_idle(pool, td_context_timeout_ms(mesh->ctx)) ? TD_OK : still_busy(mesh);
    td_mutex_unlock(&pool->lock);
    return s;
}

td_status td_mesh_run(td_mesh *mesh, td_job_fn fn, void *arg)
{
    td_worker_pool *pool = mesh->pool;
    if (current_position >= 0)
        return td_error_set(mesh->ctx, TD_ERR_STATE, "td_mesh_run called from worker %d (jobs do not nest)",
                            current_position);
    if (!pool)
        return no_workers(mesh);
    char names[512];
    td_mutex_lock(&pool->lock);
    /* A job that timed out earlier may still be ending on a fenced-off
     * device (an injected hang wakes up, a slow kernel finishes): posting
     * now would race with it, so wait for it, within the timeout. */
    if (pool->pending != 0 && !wait_idle(pool, td_context_timeout_ms(mesh->ctx))) {
        td_status s = still_busy(mesh);
        td_mutex_unlock(&pool->lock);
        return s;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->first_failure = TD_OK;
    pool->pending = mesh->count;
    for (uint32_t i = 0; i < mesh->count; i++)
        pool->workers[i].busy = true;
    const uint64_t posted_at = td_platform_now_ns();
    pool->posted_ns = posted_at;
    __atomic_store_n(&pool->generation, pool->generation + 1, __ATOMIC_RELEASE);
    td_cond_broadcast(&pool->job_posted);

    /* A short job is watched for rather than slept on when the last one
     * was short too (the caller's core is otherwise idle; see spin_ns). */
    if (pool->last_job_ns <= pool->spin_ns && may_spin(pool)) {
        td_mutex_unlock(&pool->lock);
        if (spin_until_zero_u32(pool, &pool->pending, pool->spin_ns))
            lock_after_spin(&pool->lock);
        else
            td_mutex_lock(&pool->lock);
    }

    /* Every wait inside a job is bounded by the context timeout (a
     * collective's wait for a peer by twice it); a job makes a handful of
     * them, so four timeouts is the bound (tandem/context.h). At three the
     * collectives are aborted, so devices waiting on a stalled peer return
     * and only the stalled ones are still inside at four. */
    const uint64_t timeout_ms = td_context_timeout_ms(mesh->ctx), limit_ms = 4ull * timeout_ms;
    bool idle = wait_idle(pool, 3ull * timeout_ms);
    if (!idle) {
        if (mesh->collectives && mesh->collectives_abort) {
            td_mutex_unlock(&pool->lock); /* the ring takes its own locks; workers may need the pool's */
            mesh->collectives_abort(mesh->collectives, TD_ERR_TIMEOUT);
            td_mutex_lock(&pool->lock);
        }
        idle = wait_idle(pool, timeout_ms);
    }
    pool->last_job_ns = (idle && pool->done_ns > posted_at ? pool->done_ns : td_platform_now_ns()) - posted_at;
    td_status result = pool->first_failure;
    uint32_t stuck = pool->pending;
    if (!idle) {
        /* Fence the devices still inside the job off: they are lost, their
         * later runs fail at once, an injected hang or slowdown ends now,
         * and a CPU device stops at its next GEMM tile or kernel call (a
         * GPU device's run at its next segment, pmap_run.c), so the worker
         * is soon out. Nothing it may touch is freed while it is inside
         * (see td_mesh_quiesce). */
        busy_list(mesh, names, sizeof names);
        for (uint32_t i = 0; i < mesh->count; i++)
            if (pool->workers[i].busy) {
                __atomic_store_n(&mesh->devices[i].lost, true, __ATOMIC_RELEASE);
                cancel_device(&mesh->devices[i]);
            }
        td_cond_broadcast(&pool->released);
    }
    td_mutex_unlock(&pool->lock);
    if (!idle)
        td_mesh_ring_doorbell(mesh);
    if (stuck != 0) /* a job's own timeout already said who waited for whom */
        return td_error_set(mesh->ctx, TD_ERR_TIMEOUT,
                            "%u of %u devices did not finish within %llu ms (4 x the context timeout): device(s) %s, "
                            "now fenced off as lost",
                            stuck, mesh->count, (unsigned long long)limit_ms, names);
    return result;
}

bool td_mesh_device_lost(td_mesh *mesh, uint32_t position)
{
    return __atomic_load_n(&mesh->devices[position].lost, __ATOMIC_ACQUIRE);
}

/* Whether the device was fenced off (lost) or its pool is stopping. */
static bool fenced(const td_mesh_device *md, const td_worker_pool *pool)
{
    return __atomic_load_n(&md->lost, __ATOMIC_ACQUIRE) || __atomic_load_n(&pool->stopping, __ATOMIC_ACQUIRE);
}

/* An injected hang's or slowdown's wait: until the device is fenced off or
 * the pool stops (true), or the deadline passes (false; UINT64_MAX: none).
 * On a fiber the carrier runs its other devices meanwhile, as a slow
 * device of its own would leave them their cores. A slowdown must end on
 * time: the condition variable sleeps to TD_COND_WAIT_SLACK_NS short of
 * the deadline and the rest is yielded away (on Windows, where a timed
 * wait rounded up to its millisecond made a 3x slowdown of 0.3 ms
 * segments measure 9x and auto balance starve the device). */
static bool wait_for_fence(const td_mesh_device *md, td_worker_pool *pool, uint64_t deadline)
{
    if (td_worker_on_fiber()) {
        while (!fenced(md, pool) && td_platform_now_ns() < deadline)
            td_worker_take_turn(deadline);
        return fenced(md, pool);
    }
    const uint64_t sleep_until = deadline > TD_COND_WAIT_SLACK_NS ? deadline - TD_COND_WAIT_SLACK_NS : 0;
    td_mutex_lock(&pool->lock);
    int rc = 0;
    while (!fenced(md, pool) && rc != ETIMEDOUT) {
        if (deadline == UINT64_MAX)
            td_cond_wait(&pool->released, &pool->lock);
        else
            rc = td_cond_wait_until(&pool->released, &pool->lock, sleep_until);
    }
    td_mutex_unlock(&pool->lock);
    while (!fenced(md, pool) && td_platform_now_ns() < deadline)
        td_platform_yield();
    return fenced(md, pool);
}

td_status td_mesh_device_begin_run(td_mesh *mesh, uint32_t position)
{
    td_mesh_device *md = &mesh->devices[position];
    td_worker_pool *pool = md->worker->pool; /* mesh->pool is gone once a stranded worker was left */
    /* Every run asks: a lock-free read, the flag only ever goes to true. */
    if (__atomic_load_n(&md->lost, __ATOMIC_ACQUIRE))
        return td_error_set(mesh->ctx, TD_ERR_DEVICE_LOST, "device %u (%s) was lost earlier in this mesh", position,
                            md->item);
    const uint64_t run = ++md->runs;
    if (md->faults.fail_at == run) {
        __atomic_store_n(&md->lost, true, __ATOMIC_RELEASE);
        return td_error_set(mesh->ctx, TD_ERR_DEVICE_LOST, "device %u (%s): injected failure in its run %llu",
                            position, md->item, (unsigned long long)run);
    }
    if (md->faults.hang_at == run) {
        /* Stops answering: no timeout here on purpose, the mesh's job
         * timeout is what ends it. */
        (void)wait_for_fence(md, pool, UINT64_MAX);
        __atomic_store_n(&md->lost, true, __ATOMIC_RELEASE);
        /* No message: the job already timed out and said which device
         * hung; the caller may be reading that message right now. */
        return TD_ERR_DEVICE_LOST;
    }
    return TD_OK;
}

td_status td_mesh_device_drain(td_mesh *mesh, uint32_t position)
{
    td_mesh_device *md = &mesh->devices[position];
    uint64_t ticket;
    td_status s = md->ops->submit(md->dev, &ticket);
    if (s == TD_OK)
        s = md->ops->wait(md->dev, ticket, td_context_timeout_ms(mesh->ctx));
    const bool wedged = s == TD_ERR_TIMEOUT;
    if (wedged && !md->wedged)
        td_log(mesh->ctx, TD_LOG_ERROR,
               "device %u (%s) is still running work after the timeout: what it may use is left allocated", position,
               md->item);
    md->wedged = wedged;
    return s;
}

bool td_mesh_any_wedged(const td_mesh *mesh)
{
    for (uint32_t i = 0; i < mesh->count; i++)
        if (mesh->devices[i].wedged)
            return true;
    return false;
}

td_status td_mesh_device_slow_down(td_mesh *mesh, uint32_t position, uint64_t elapsed_ns)
{
    td_mesh_device *md = &mesh->devices[position];
    if (!(md->faults.slow > 1.0f))
        return TD_OK;
    td_worker_pool *pool = md->worker->pool;
    const uint64_t extra_ns = (uint64_t)((double)elapsed_ns * (double)(md->faults.slow - 1.0f));
    const uint64_t now = td_platform_now_ns();
    const uint64_t deadline = extra_ns > UINT64_MAX - now ? UINT64_MAX : now + extra_ns;
    /* Fenced: the job timed out and its message named this device; a
     * stale worker records nothing the caller may be reading. */
    return wait_for_fence(md, pool, deadline) ? TD_ERR_DEVICE_LOST : TD_OK;
}
