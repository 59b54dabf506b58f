/* The exchange thread (engine/parallel/exchange_thread.c) on its own,
 * without MPI, so ThreadSanitizer can run it (scripts/test-tsan builds
 * without MPI): a job handed over runs on the thread while the caller goes
 * on, its status and its writes come back through the wait, the one slot
 * refuses a second job, a wait is bounded, and stopping with a job still
 * running neither hangs nor loses the job's end. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "td_exchange_thread.h"
#include "td_platform.h"

typedef struct job {
    _Atomic int started;
    _Atomic int release; /* the job returns once this is set */
    int written;         /* plain: published to the waiter by the thread's slot */
    td_status status;
} job;

static td_status run_job(void *arg)
{
    job *j = arg;
    atomic_store(&j->started, 1);
    const uint64_t deadline = td_platform_deadline_after_ms(10000);
    while (!atomic_load(&j->release) && td_platform_now_ns() < deadline)
        td_platform_sleep_ns(100000);
    j->written = 42;
    return j->status;
}

static td_context *make_context(void)
{
    td_context *ctx = NULL;
    cr_assert_eq(td_context_create(NULL, &ctx), TD_OK);
    return ctx;
}

Test(exchange_thread, runs_beside_the_caller_and_returns_the_status)
{
    td_context *ctx = make_context();
    td_exchange_thread *x = td_exchange_thread_start(ctx);
    cr_assert_not_null(x);
    for (int round = 0; round < 50; round++) {
        job j = {.status = round % 3 == 2 ? TD_ERR_TIMEOUT : TD_OK};
        cr_assert_eq(td_exchange_thread_submit(x, run_job, &j), TD_OK);
        /* The caller is not blocked: the job waits for it. */
        cr_assert(td_exchange_thread_busy(x));
        cr_assert_eq(td_exchange_thread_submit(x, run_job, &j), TD_ERR_STATE, "round %d: a second job was taken",
                     round);
        atomic_store(&j.release, 1);
        td_status ended = TD_ERR_IO;
        cr_assert_eq(td_exchange_thread_wait(x, 5000, &ended), TD_OK, "round %d", round);
        cr_assert_eq(ended, j.status, "round %d: the job's status", round);
        cr_assert_eq(j.written, 42);
        cr_assert(!td_exchange_thread_busy(x));
    }
    /* Nothing pending: a wait answers at once. */
    td_status none = TD_ERR_IO;
    cr_assert_eq(td_exchange_thread_wait(x, 0, &none), TD_OK);
    cr_assert_eq(none, TD_OK);
    td_exchange_thread_stop(x, 1000);
    td_context_destroy(ctx);
}

Test(exchange_thread, a_wait_is_bounded)
{
    td_context *ctx = make_context();
    td_exchange_thread *x = td_exchange_thread_start(ctx);
    cr_assert_not_null(x);
    job j = {.status = TD_OK};
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &j), TD_OK);
    const uint64_t t0 = td_platform_now_ns();
    td_status ended = TD_OK;
    cr_assert_eq(td_exchange_thread_wait(x, 50, &ended), TD_ERR_TIMEOUT);
    const double waited_ms = (double)(td_platform_now_ns() - t0) / 1e6;
    cr_assert(waited_ms >= 45.0 && waited_ms < 5000.0, "waited %.1f ms for a 50 ms bound", waited_ms);
    /* Still the job's: a new one is refused until it ends. */
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &j), TD_ERR_STATE);
    atomic_store(&j.release, 1);
    cr_assert_eq(td_exchange_thread_wait(x, 5000, &ended), TD_OK);
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
    cr_assert_eq(td_exchange_thread_submit(x, run_job, &slow), TD_OK);
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
