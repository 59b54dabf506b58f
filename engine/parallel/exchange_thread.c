/* The exchange thread (td_exchange_thread.h): a one-slot mailbox between
 * a device's worker and a thread that makes the process's MPI exchanges
 * while the worker computes. */
#include "td_exchange_thread.h"

#include "td_platform.h"

struct td_exchange_thread {
    td_mutex lock;
    td_cond cond; /* a job queued, a job done, or stop */
    td_thread thread;
    td_allocator allocator; /* an orphaned thread frees the state with it, after its context */
    td_exchange_fn fn;
    void *arg;
    bool queued;   /* a job waits to be taken */
    bool running;  /* the thread is inside a job */
    bool stopping; /* no more jobs: the thread returns */
    bool orphaned; /* stop gave up waiting: the thread frees the state */
    td_status status; /* the last finished job's */
};

static void release(td_exchange_thread *x)
{
    const td_allocator allocator = x->allocator;
    td_mutex_destroy(&x->lock);
    td_cond_destroy(&x->cond);
    td_free_with(&allocator, x);
}

static void exchange_main(void *arg)
{
    td_exchange_thread *x = arg;
    td_mutex_lock(&x->lock);
    for (;;) {
        while (!x->queued && !x->stopping)
            td_cond_wait(&x->cond, &x->lock); /* idle between jobs: stop or submit always signals */
        if (!x->queued)
            break;
        td_exchange_fn fn = x->fn;
        void *job = x->arg;
        x->queued = false;
        x->running = true;
        td_mutex_unlock(&x->lock);
        const td_status s = fn(job);
        td_mutex_lock(&x->lock);
        x->status = s;
        x->running = false;
        td_cond_broadcast(&x->cond);
    }
    const bool orphaned = x->orphaned;
    td_mutex_unlock(&x->lock);
    if (orphaned)
        release(x);
}

td_exchange_thread *td_exchange_thread_start(td_context *ctx)
{
    td_exchange_thread *x = td_alloc_zeroed(ctx, sizeof *x);
    if (!x)
        return NULL;
    x->allocator = td_context_allocator(ctx);
    if (td_mutex_init(&x->lock) != 0) {
        td_free(ctx, x);
        return NULL;
    }
    if (td_cond_init(&x->cond) != 0) {
        td_mutex_destroy(&x->lock);
        td_free(ctx, x);
        return NULL;
    }
    if (td_thread_start(&x->thread, exchange_main, x) != 0) {
        release(x);
        return NULL;
    }
    return x;
}

td_status td_exchange_thread_submit(td_exchange_thread *x, td_exchange_fn fn, void *arg)
{
    td_mutex_lock(&x->lock);
    const bool free_slot = !x->queued && !x->running && !x->stopping;
    if (free_slot) {
        x->fn = fn;
        x->arg = arg;
        x->queued = true;
        x->status = TD_OK;
        td_cond_broadcast(&x->cond);
    }
    td_mutex_unlock(&x->lock);
    return free_slot ? TD_OK : TD_ERR_STATE;
}

td_status td_exchange_thread_wait(td_exchange_thread *x, uint64_t timeout_ms, td_status *job_status)
{
    const uint64_t deadline = td_platform_deadline_after_ms(timeout_ms);
    td_mutex_lock(&x->lock);
    while ((x->queued || x->running) && td_cond_wait_until(&x->cond, &x->lock, deadline) == 0) {
    }
    const bool ended = !x->queued && !x->running;
    *job_status = x->status;
    td_mutex_unlock(&x->lock);
    return ended ? TD_OK : TD_ERR_TIMEOUT;
}

bool td_exchange_thread_busy(td_exchange_thread *x)
{
    td_mutex_lock(&x->lock);
    const bool busy = x->queued || x->running;
    td_mutex_unlock(&x->lock);
    return busy;
}

void td_exchange_thread_stop(td_exchange_thread *x, uint64_t timeout_ms)
{
    if (!x)
        return;
    td_mutex_lock(&x->lock);
    x->stopping = true;
    x->queued = false; /* a job not yet taken is dropped */
    td_cond_broadcast(&x->cond);
    td_mutex_unlock(&x->lock);
    if (td_thread_join_until(&x->thread, td_platform_deadline_after_ms(timeout_ms))) {
        release(x);
        return;
    }
    /* Still inside a job past the bound: it frees the state when it returns. */
    td_mutex_lock(&x->lock);
    const bool ended = !x->running;
    x->orphaned = !ended;
    td_mutex_unlock(&x->lock);
    if (ended)
        release(x);
}
