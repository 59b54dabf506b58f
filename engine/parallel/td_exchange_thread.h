/* A thread of its own for the exchanges between processes, so a device's
 * worker can go on with backward while a bucket's blocks travel.
 *
 * One per ring (so one per process and mesh), started with the ring when
 * the job has other processes, stopped with it. Jobs run one at a time in
 * the order handed over, from a queue of TD_EXCHANGE_THREAD_DEPTH: the
 * bucketed schedule keeps at most a bucket's gather and the next bucket's
 * exchange in flight. Whoever hands jobs over must not enter MPI itself
 * until td_exchange_thread_wait has seen the last of them end: MPI is
 * initialized MPI_THREAD_SERIALIZED, and the queue's mutex is what orders
 * the two threads' MPI calls. Every wait is bounded. */
#ifndef TD_EXCHANGE_THREAD_H
#define TD_EXCHANGE_THREAD_H

#include <stdbool.h>
#include <stdint.h>

#include "td_context_internal.h"

#define TD_EXCHANGE_THREAD_DEPTH 2

typedef struct td_exchange_thread td_exchange_thread;

/* The work of one job; it must itself be bounded (the processes'
 * exchanges are, by twice the context timeout). */
typedef td_status (*td_exchange_fn)(void *arg);

/* NULL when the thread cannot be started (the caller then runs its
 * exchanges inline). */
td_exchange_thread *td_exchange_thread_start(td_context *ctx);

/* Queues fn(arg) and gives its ticket (1, 2, ... in order). TD_ERR_STATE
 * when the queue is full -- DEPTH jobs handed over and not yet waited for
 * -- or the thread is stopping. */
td_status td_exchange_thread_submit(td_exchange_thread *x, td_exchange_fn fn, void *arg, uint64_t *ticket);

/* Waits up to timeout_ms for job `ticket` (and so every earlier one) to
 * end: TD_OK, with its status in *job_status; the slots of it and of the
 * jobs before it are free again. TD_ERR_TIMEOUT leaves the job running:
 * the caller must not enter MPI, and must wait again before it reuses
 * the job's memory. */
td_status td_exchange_thread_wait(td_exchange_thread *x, uint64_t ticket, uint64_t timeout_ms, td_status *job_status);

/* Whether a job is queued or running. */
bool td_exchange_thread_busy(td_exchange_thread *x);

/* Stops and joins the thread after its current job, dropping the ones
 * not yet begun (waiting up to timeout_ms; past that the thread is left to
 * end on its own and frees its state itself). */
void td_exchange_thread_stop(td_exchange_thread *x, uint64_t timeout_ms);

#endif
