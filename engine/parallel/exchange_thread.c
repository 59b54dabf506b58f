/* The exchange thread (td_exchange_thread.h): a bounded FIFO of jobs
 * between a device's worker and a thread that makes the process's MPI
 * exchanges while the worker computes. */
#include "td_exchange_thread.h"

#include "td_platform.h"

typedef struct exchange_job {
    td_exchange_fn fn;
    void *arg;
    td_status status;
} exchange_job;

struct td_exchange_thread {
    td_mutex lock;
    td_cond cond; /* a job queued, a job done, or stop */
    td_thread thread;
    td_allocator allocator; /* an orphaned thread frees the state with it, after its context */
    exchange_job jobs[TD_EXCHANGE_THREAD_DEPTH]; /* ticket t in jobs[t % depth] */
    uint64_t submitted; /* tickets handed out: 1, 2, ... */
    uint64_t started;   /* jobs the thread took */
    uint64_t finished;  /* jobs ended */
    uint64_t collected; /* jobs whose status was read: their slots are free */
    bool stopping;      /* no more jobs: the thread returns */
    bool orphaned;      /* stop gave up waiting: the thread frees the state */
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
        while (x->started == x->submitted && !x->stopping)
            td_cond_wait(&x->cond, &x->lock); /* idle between jobs: stop or submit always signals */
        if (x->stopping)
            break; /* jobs not yet taken are dropped */
        exchange_job *job = &x->jobs[x->started % TD_EXCHANGE_THREAD_DEPTH];
        x->started++;
        td_mutex_unlock(&x->lock);
        const td_status s = job->fn(job->arg);
        td_mutex_lock(&x->lock);
        job->status = s;
        x->finished++;
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

td_status td_exchange_thread_submit(td_exchange_thread *x, td_exchange_fn fn, void *arg, uint64_t *ticket)
{
    td_mutex_lock(&x->lock);
    const bool room = x->submitted - x->collected < TD_EXCHANGE_THREAD_DEPTH && !x->stopping;
    if (room) {
        exchange_job *job = &x->jobs[x->submitted % TD_EXCHANGE_THREAD_DEPTH];
        job->fn = fn;
        job->arg = arg;
        job->status = TD_OK;
        *ticket = ++x->submitted;
        td_cond_broadcast(&x->cond);
    }
    td_mutex_unlock(&x->lock);
    return room ? TD_OK : TD_ERR_STATE;
}

td_status td_exchange_thread_wait(td_exchange_thread *x, uint64_t ticket, uint64_t timeout_ms, td_status *job_status)
{
    const uint64_t deadline = td_platform_deadline_after_ms(timeout_ms);
    td_mutex_lock(&x->lock);
    /* Tickets are run in order: ticket t has ended once t jobs have. */
    while (x->finished < ticket && !x->stopping && td_cond_wait_until(&x->cond, &x->lock, deadline) == 0) {
    }
    const bool ended = x->finished >= ticket;
    *job_status = ended ? x->jobs[(ticket - 1) % TD_EXCHANGE_THREAD_DEPTH].status : TD_OK;
    /* Its slot, and every earlier one (those jobs ended before it), may
     * take new jobs now. */
    if (ended && ticket > x->collected)
        x->collected = ticket;
    td_mutex_unlock(&x->lock);
    return ended ? TD_OK : TD_ERR_TIMEOUT;
}

bool td_exchange_thread_busy(td_exchange_thread *x)
{
    td_mutex_lock(&x->lock);
    const bool busy = x->finished < x->submitted;
    td_mutex_unlock(&x->lock);
    return busy;
}

void td_exchange_thread_stop(td_exchange_thread *x, uint64_t timeout_ms)
{
    if (!x)
        return;
    td_mutex_lock(&x->lock);
    x->stopping = true;
    td_cond_broadcast(&x->cond);
    td_mutex_unlock(&x->lock);
    if (td_thread_join_until(&x->thread, td_platform_deadline_after_ms(timeout_ms))) {
        release(x);
        return;
    }
    /* Still inside a job past the bound: it frees the state when it returns. */
    td_mutex_lock(&x->lock);
    const bool ended = x->started == x->finished;
    x->orphaned = !ended;
    td_mutex_unlock(&x->lock);
    if (ended)
        release(x);
}
