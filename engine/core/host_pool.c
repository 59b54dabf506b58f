/* The host thread pool (td_host_pool.h).
 *
 * A run is a job on the caller's stack, linked into the pool's list while
 * helpers may join it. Tasks are claimed with one atomic counter, so a
 * task runs exactly once, on whichever thread claims it first. The caller
 * unlinks its job once every task is claimed and then waits only for the
 * helpers still inside it: a job's memory is never touched after its
 * caller returns.
 *
 * Why helpers spin a little before sleeping: a training step is hundreds
 * of kernel calls of tens of microseconds each, and waking a sleeping
 * thread costs about as much. A helper that has just finished a task
 * watches for the next job for SPIN_NS before it sleeps; teams larger than
 * one exist only when devices leave cores idle, so that spin is on a core
 * no device is using. */
#include "td_host_pool.h"
#include "td_context_state.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "td_platform.h"

#define SPIN_NS 200000 /* 0.2 ms */

typedef struct pool_job {
    td_host_task_fn fn;
    void *arg;
    int64_t count;
    atomic_int_fast64_t next; /* the next task to claim */
    uint32_t helpers_wanted;  /* under the pool lock */
    uint32_t helpers_joined;  /* under the pool lock */
    atomic_uint helpers_inside;
    struct pool_job *link;
} pool_job;

struct td_host_pool {
    td_context *ctx;
    uint32_t threads;
    uint32_t helper_count;
    td_thread *helpers;
    td_mutex lock;
    td_cond work;           /* a job was posted, or the pool is stopping */
    td_cond left;           /* a helper left a job */
    pool_job *jobs;         /* jobs helpers may still join */
    atomic_uint generation; /* bumped at every post: what spinning helpers watch */
    uint32_t sleeping;      /* helpers waiting on `work` */
    bool stopping;
    atomic_uint users;
    atomic_bool split_everything;
};

static int64_t now_ns(void)
{
    return (int64_t)td_platform_now_ns();
}

static void work_on(pool_job *job)
{
    int64_t task;
    while ((task = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < job->count)
        job->fn(job->arg, task);
}

/* A job a helper may join: it wants more helpers and has tasks left. */
static pool_job *joinable(td_host_pool *pool)
{
    for (pool_job *j = pool->jobs; j; j = j->link)
        if (j->helpers_joined < j->helpers_wanted &&
            atomic_load_explicit(&j->next, memory_order_relaxed) < j->count)
            return j;
    return NULL;
}

static void helper_main(void *arg)
{
    td_host_pool *pool = arg;
    td_mutex_lock(&pool->lock);
    for (;;) {
        pool_job *job = joinable(pool);
        if (job) {
            job->helpers_joined++;
            atomic_fetch_add_explicit(&job->helpers_inside, 1, memory_order_relaxed);
            td_mutex_unlock(&pool->lock);
            work_on(job);
            td_mutex_lock(&pool->lock);
            /* The last access to the job: its caller may return once it
             * reads zero here. */
            atomic_fetch_sub_explicit(&job->helpers_inside, 1, memory_order_release);
            td_cond_broadcast(&pool->left);
            /* Watch for the next job a while before sleeping. */
            unsigned seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
            td_mutex_unlock(&pool->lock);
            int64_t until = now_ns() + SPIN_NS;
            while (atomic_load_explicit(&pool->generation, memory_order_acquire) == seen && now_ns() < until) {
                for (int i = 0; i < 64; i++)
                    td_platform_spin_pause();
                /* On a machine busy with other work, give its threads the
                 * core rather than spin them off it. */
                td_platform_yield();
            }
            td_mutex_lock(&pool->lock);
            continue;
        }
        if (pool->stopping)
            break;
        pool->sleeping++;
        td_cond_wait(&pool->work, &pool->lock);
        pool->sleeping--;
    }
    td_mutex_unlock(&pool->lock);
}

uint32_t td_host_pool_default_threads(uint32_t requested)
{
    if (requested)
        return requested;
    long cores = (long)td_platform_cpu_count();
    /* Processes mpirun placed on this machine share its cores. */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long sharing = local ? strtol(local, NULL, 10) : 1;
    if (sharing > 1)
        cores /= sharing;
    return cores < 1 ? 1 : (uint32_t)cores;
}

static void pool_free(td_host_pool *pool)
{
    td_mutex_lock(&pool->lock);
    pool->stopping = true;
    td_cond_broadcast(&pool->work);
    td_mutex_unlock(&pool->lock);
    for (uint32_t i = 0; i < pool->helper_count; i++)
        td_thread_join(&pool->helpers[i]);
    td_cond_destroy(&pool->left);
    td_cond_destroy(&pool->work);
    td_mutex_destroy(&pool->lock);
    td_free(pool->ctx, pool->helpers);
    td_free(pool->ctx, pool);
}

static td_host_pool *pool_create(td_context *ctx, uint32_t threads)
{
    td_host_pool *pool = td_alloc_zeroed(ctx, sizeof *pool);
    if (!pool) {
        TD_OOM(ctx, "the host thread pool", sizeof *pool);
        return NULL;
    }
    pool->ctx = ctx;
    pool->threads = threads;
    if (td_mutex_init(&pool->lock) != 0 || td_cond_init(&pool->work) != 0 || td_cond_init(&pool->left) != 0) {
        td_error_set(ctx, TD_ERR_OUT_OF_MEMORY, "host thread pool: could not set up its lock and conditions");
        td_free(ctx, pool);
        return NULL;
    }
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->users, 0);
    atomic_init(&pool->split_everything, false);
    if (threads > 1) {
        pool->helpers = td_alloc(ctx, sizeof *pool->helpers * (threads - 1));
        if (!pool->helpers) {
            TD_OOM(ctx, "the host thread pool", sizeof *pool->helpers * (threads - 1));
            pool_free(pool);
            return NULL;
        }
        for (uint32_t i = 0; i + 1 < threads; i++) {
            if (td_thread_start(&pool->helpers[i], helper_main, pool) != 0) {
                /* Fewer helpers still work: the callers take every task
                 * no helper takes. */
                td_log(ctx, TD_LOG_WARN, "host thread pool: started %u of %u helper threads", i, threads - 1);
                break;
            }
            pool->helper_count++;
        }
    }
    return pool;
}

td_host_pool *td_context_host_pool_acquire(td_context *ctx)
{
    td_mutex_lock(&ctx->pool_lock);
    if (!ctx->pool)
        ctx->pool = pool_create(ctx, td_host_pool_default_threads(ctx->options.cpu_threads));
    td_host_pool *pool = ctx->pool;
    if (pool)
        atomic_fetch_add(&pool->users, 1);
    td_mutex_unlock(&ctx->pool_lock);
    return pool;
}

void td_context_host_pool_release(td_context *ctx)
{
    td_mutex_lock(&ctx->pool_lock);
    td_host_pool *pool = ctx->pool;
    if (pool && atomic_fetch_sub(&pool->users, 1) == 1) {
        ctx->pool = NULL;
        pool_free(pool);
    }
    td_mutex_unlock(&ctx->pool_lock);
}

td_host_pool *td_context_host_pool_in_use(td_context *ctx)
{
    td_mutex_lock(&ctx->pool_lock);
    td_host_pool *pool = ctx->pool;
    td_mutex_unlock(&ctx->pool_lock);
    return pool;
}

uint32_t td_host_pool_threads(const td_host_pool *pool)
{
    return pool->threads;
}

void td_host_pool_set_split_everything(td_host_pool *pool, bool on)
{
    atomic_store(&pool->split_everything, on);
}

uint32_t td_host_pool_offers(const td_host_pool *pool)
{
    return atomic_load_explicit(&pool->generation, memory_order_relaxed);
}

bool td_host_pool_split_everything(const td_host_pool *pool)
{
    return atomic_load_explicit(&pool->split_everything, memory_order_relaxed);
}

uint32_t td_host_pool_team(const td_host_pool *pool)
{
    unsigned users = atomic_load_explicit(&pool->users, memory_order_relaxed);
    uint32_t team = users ? pool->threads / users : pool->threads;
    if (team > pool->helper_count + 1)
        team = pool->helper_count + 1;
    return team ? team : 1;
}

void td_host_pool_run(td_host_pool *pool, int64_t count, td_host_task_fn fn, void *arg)
{
    uint32_t team = td_host_pool_team(pool);
    if (count <= 0)
        return;
    if (team <= 1 || count == 1) {
        for (int64_t t = 0; t < count; t++)
            fn(arg, t);
        return;
    }
    pool_job job = {.fn = fn, .arg = arg, .count = count};
    atomic_init(&job.next, 0);
    atomic_init(&job.helpers_inside, 0);
    job.helpers_wanted = (uint64_t)count - 1 < team - 1 ? (uint32_t)(count - 1) : team - 1;
    td_mutex_lock(&pool->lock);
    job.link = pool->jobs;
    pool->jobs = &job;
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    if (pool->sleeping)
        td_cond_broadcast(&pool->work);
    td_mutex_unlock(&pool->lock);

    work_on(&job);

    /* Every task is claimed: no helper may join any more. */
    td_mutex_lock(&pool->lock);
    for (pool_job **p = &pool->jobs; *p; p = &(*p)->link)
        if (*p == &job) {
            *p = job.link;
            break;
        }
    td_mutex_unlock(&pool->lock);
    /* The helpers still inside are finishing their last task: short. */
    int64_t until = now_ns() + SPIN_NS;
    while (atomic_load_explicit(&job.helpers_inside, memory_order_acquire) && now_ns() < until)
        td_platform_spin_pause();
    if (atomic_load_explicit(&job.helpers_inside, memory_order_acquire)) {
        td_mutex_lock(&pool->lock);
        while (atomic_load_explicit(&job.helpers_inside, memory_order_acquire))
            td_cond_wait(&pool->left, &pool->lock);
        td_mutex_unlock(&pool->lock);
    }
}
