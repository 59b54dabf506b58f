/* The exchange thread (engine/parallel/exchange_thread.c) on its own,
 * without MPI, so ThreadSanitizer can run it (scripts/test-tsan builds
 * without MPI): jobs handed over run on the thread, in order, while the
 * caller goes on; their statuses and writes come back through the wait;
 * the queue refuses a job past its depth; a wait is bounded; and stopping
 * with a job still running neither hangs nor loses the job's end. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "td_exchange_thread.h"
#include "td_platform.h"

typedef struct job {
    _Atomic int started;
    _Atomic int release; /* the job returns once this is set */
    int written;         /* plain: published to the waiter by the queue's lock */
    int order;           /* the job's place among those run */
    td_status status;
} job;

static _Atomic int jobs_run;

static td_status run_job(void *arg)
{
    job *j = arg;
    atomic_store(&j->started, 1);
    const uint64_t deadline = td_platform_deadline_after_ms(10000);
    while (!atomic_load(&j->release) && td_platform_now_ns() < deadline)
        td_platform_sleep_ns(100000);
    j->written = 42;
    j->order = atomic_fetch_add(&jobs_run, 1);
    return j->status;
}

static td_context *make_context(void)
{
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(NULL, &ctx), TD_OK);
    return ctx;
}

Test(exchange_thread, runs_beside_the_caller_in_order_and_returns_the_statuses)
{
    td_context *ctx = make_context();
    td_exchange_thread *x = td_exchange_thread_start(ctx);
    cr_assert_not_null(x);
    for (int round = 0; round < 30; round++) {
        job a = {.status = round % 3 == 2 ? TD_ERR_TIMEOUT : TD_OK}, b = {.status = TD_ERR_ABORTED}, c = {0};
        uint64_t ta = 0, tb = 0, tc = 0;
        atomic_store(&jobs_run, 0);
        cr_assert_eq(td_exchange_thread_submit(x, run_job, &a, &ta), TD_OK);
        cr_assert_eq(td_exchange_thread_submit(x, run_job, &b, &tb), TD_OK);
        cr_assert_eq(tb, ta + 1, "tickets %llu then %llu", (unsigned long long)ta, (unsigned long long)tb);
        /* The caller is not blocked: the jobs wait for it. */
        cr_assert(td_exchange_thread_busy(x));
        cr_assert_eq(td_exchange_thread_submit(x, run_job, &c, &tc), TD_ERR_STATE,
                     "round %d: a job past the queue's depth was taken", round);
        atomic_store(&b.release, 1); /* b may not run before a */
        atomic_store(&a.release, 1);
        td_status ended = TD_ERR_IO;
        cr_assert_eq(td_exchange_thread_wait(x, ta, 5000, &ended), TD_OK, "round %d", round);
        cr_assert_eq(ended, a.status, "round %d: the first job's status", round);
        cr_assert_eq(a.written, 42);
        /* One slot free again: a third job is taken before b is waited for. */
        atomic_store(&c.release, 1);
        cr_assert_eq(td_exchange_thread_submit(x, run_job, &c, &tc), TD_OK);
        cr_assert_eq(td_exchange_thread_wait(x, tb, 5000, &ended), TD_OK);
        cr_assert_eq(ended, TD_ERR_ABORTED, "round %d: the second job's status", round);
        cr_assert_eq(td_exchange_thread_wait(x, tc, 5000, &ended), TD_OK);
        cr_assert_eq(ended, TD_OK);
        cr_assert(a.order == 0 && b.order == 1 && c.order == 2, "round %d: ran in the order %d %d %d", round, a.order,
                  b.order, c.order);
        cr_assert(!td_exchange_thread_busy(x));
    }
    td_exchange_thread_stop(x, 1000);
    td_context_destroy(ctx);
}

Test(exchange_thread, a_wait_is_bounded)
{
    td_context *ctx = make_context();
    td_exchange_thread *x = td_exchange_thread_start(ctx);
    cr_assert_not_null(x);
    job j = {.status = TD_OK};
    uint64_t t = 0, t2 = 0;
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &j, &t), TD_OK);
    const uint64_t t0 = td_platform_now_ns();
    td_status ended = TD_OK;
    cr_assert_eq(td_exchange_thread_wait(x, t, 50, &ended), TD_ERR_TIMEOUT);
    const double waited_ms = (double)(td_platform_now_ns() - t0) / 1e6;
    cr_assert(waited_ms >= 45.0 && waited_ms < 5000.0, "waited %.1f ms for a 50 ms bound", waited_ms);
    /* A timed-out wait frees nothing: with one more job the queue is full. */
    job k = {.status = TD_OK};
    atomic_store(&k.release, 1);
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &k, &t2), TD_OK);
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &k, &t2), TD_ERR_STATE);
    atomic_store(&j.release, 1);
    cr_assert_eq(td_exchange_thread_wait(x, t2, 5000, &ended), TD_OK);
    cr_assert_eq(ended, TD_OK);
    td_exchange_thread_stop(x, 1000);
    td_context_destroy(ctx);
}

/* A job past stop's bound: stop returns, and the thread frees its state
 * when the job ends (no leak under LSan, no use after free under TSan). */
static job slow;

Test(exchange_thread, stop_does_not_wait_past_its_bound)
{
    td_context *ctx = make_context();
    td_exchange_thread *x = td_exchange_thread_start(ctx);
    cr_assert_not_null(x);
    uint64_t t = 0;
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &slow, &t), TD_OK);
    const uint64_t deadline = td_platform_deadline_after_ms(5000);
    while (!atomic_load(&slow.started) && td_platform_now_ns() < deadline)
        td_platform_sleep_ns(100000);
    cr_assert(atomic_load(&slow.started));
    const uint64_t t0 = td_platform_now_ns();
    td_exchange_thread_stop(x, 50);
    const double waited_ms = (double)(td_platform_now_ns() - t0) / 1e6;
    cr_assert(waited_ms < 5000.0, "stop waited %.1f ms for a 50 ms bound", waited_ms);
    atomic_store(&slow.release, 1);
    td_platform_sleep_ns(300000000); /* the orphaned thread ends and frees its state */
    td_context_destroy(ctx);
}
