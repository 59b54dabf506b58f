/* One worker thread per device. The device's queue is driven only from its
 * worker, so backends need no locking of their own; a job is a function run
 * on every worker at once, and td_mesh_run waits for all of them. */
#define _GNU_SOURCE /* pthread_timedjoin_np: tearing down never hangs on a stuck worker */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "td_clock.h"
#include "td_mesh_internal.h"

struct td_worker {
    pthread_t thread;
    bool started;
    uint32_t position;
    td_worker_pool *pool;
};

struct td_worker_pool {
    td_mesh *mesh;
    pthread_mutex_t lock;
    pthread_cond_t job_posted;
    pthread_cond_t job_done;
    uint64_t generation; /* bumped once per job */
    uint32_t pending;    /* workers still running the current job */
    td_job_fn fn;
    void *arg;
    td_status first_failure;
    bool stopping;
    td_worker *workers;
};

static _Thread_local int current_position = -1;

int td_worker_current_position(void)
{
    return current_position;
}

static void *worker_main(void *p)
{
    td_worker *w = p;
    td_worker_pool *pool = w->pool;
    current_position = (int)w->position;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->stopping && pool->generation == seen)
            pthread_cond_wait(&pool->job_posted, &pool->lock);
        if (pool->stopping)
            break;
        seen = pool->generation;
        td_job_fn fn = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->lock);

        td_status s = fn(arg, w->position);

        pthread_mutex_lock(&pool->lock);
        if (s != TD_OK && (pool->first_failure == TD_OK || pool->first_failure == TD_ERR_ABORTED))
            pool->first_failure = s;
        if (--pool->pending == 0)
            pthread_cond_broadcast(&pool->job_done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
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
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->job_posted, NULL);
    pthread_cond_init(&pool->job_done, &attr);
    pthread_condattr_destroy(&attr);
    mesh->pool = pool;
    for (uint32_t i = 0; i < mesh->count; i++) {
        td_worker *w = &pool->workers[i];
        w->position = i;
        w->pool = pool;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            td_worker_pool_destroy(mesh);
            return td_error_set(ctx, TD_ERR_OUT_OF_MEMORY, "could not start the worker thread for device %u (errno %d)",
                                i, rc);
        }
        w->started = true;
        mesh->devices[i].worker = w;
    }
    return TD_OK;
}

void td_worker_pool_destroy(td_mesh *mesh)
{
    td_worker_pool *pool = mesh->pool;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->job_posted);
    pthread_mutex_unlock(&pool->lock);
    bool abandoned = false;
    for (uint32_t i = 0; i < mesh->count; i++) {
        if (!pool->workers[i].started)
            continue;
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += (time_t)(td_context_timeout_ms(mesh->ctx) / 1000 + 1);
        if (pthread_timedjoin_np(pool->workers[i].thread, NULL, &deadline) != 0) {
            /* A worker stuck in a driver call: leave it rather than hang the
             * caller; its memory is deliberately not freed. */
            pthread_detach(pool->workers[i].thread);
            abandoned = true;
        }
    }
    if (abandoned) {
        td_log(mesh->ctx, TD_LOG_ERROR, "a worker thread did not stop; its resources are abandoned");
        mesh->pool = NULL;
        return;
    }
    pthread_cond_destroy(&pool->job_posted);
    pthread_cond_destroy(&pool->job_done);
    pthread_mutex_destroy(&pool->lock);
    td_free(mesh->ctx, pool->workers);
    td_free(mesh->ctx, pool);
    mesh->pool = NULL;
}

td_status td_mesh_run(td_mesh *mesh, td_job_fn fn, void *arg)
{
    td_worker_pool *pool = mesh->pool;
    if (current_position >= 0)
        return td_error_set(mesh->ctx, TD_ERR_STATE, "td_mesh_run called from worker %d (jobs do not nest)",
                            current_position);
    pthread_mutex_lock(&pool->lock);
    if (pool->pending != 0) {
        pthread_mutex_unlock(&pool->lock);
        return td_error_set(mesh->ctx, TD_ERR_STATE,
                            "the mesh is still running a job that timed out earlier; destroy and recreate it");
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->first_failure = TD_OK;
    pool->pending = mesh->count;
    pool->generation++;
    pthread_cond_broadcast(&pool->job_posted);

    /* Every wait inside a job is bounded by the context timeout; a job makes
     * a handful of them, so four timeouts is a generous but finite bound. */
    uint64_t limit_ms = 4ull * td_context_timeout_ms(mesh->ctx);
    struct timespec deadline;
    td_deadline_after_ms(&deadline, limit_ms);
    int rc = 0;
    while (pool->pending != 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&pool->job_done, &pool->lock, &deadline);
    td_status result = pool->pending != 0 ? TD_ERR_TIMEOUT : pool->first_failure;
    uint32_t stuck = pool->pending;
    pthread_mutex_unlock(&pool->lock);
    if (stuck != 0) /* a job's own timeout already said who waited for whom */
        return td_error_set(mesh->ctx, TD_ERR_TIMEOUT, "%u of %u workers did not finish within %llu ms", stuck,
                            mesh->count, (unsigned long long)limit_ms);
    return result;
}
