/* A thread of its own for the exchanges between processes, so a device's
 * worker can go on with backward while a bucket's blocks travel.
 *
 * One per ring (so one per process and mesh), started on the first
 * exchange handed to it and stopped with the ring. Its queue holds one
 * job: the bucketed schedule keeps one exchange in flight per process
 * (the bucket after it settles the one before), so a deeper queue would
 * never fill, and one slot makes "is MPI in use by the thread" a single
 * flag. Whoever hands a job over must not enter MPI itself until
 * td_exchange_thread_wait has returned that job's status: MPI is
 * initialized MPI_THREAD_SERIALIZED, and the slot's mutex is what orders
 * the two threads' MPI calls. Every wait is bounded. */
#ifndef TD_EXCHANGE_THREAD_H
#define TD_EXCHANGE_THREAD_H

#include <stdbool.h>
#include <stdint.h>

#include "td_context_internal.h"

typedef struct td_exchange_thread td_exchange_thread;

/* The work of one job; it must itself be bounded (the processes'
 * exchanges are, by twice the context timeout). */
typedef td_status (*td_exchange_fn)(void *arg);

/* NULL when the thread cannot be started (the caller then runs its
 * exchanges inline). */
td_exchange_thread *td_exchange_thread_start(td_context *ctx);

/* Hands fn(arg) to the thread. TD_ERR_STATE when a job is still queued
 * or running (the caller's one-in-flight rule broken) or the thread is
 * stopping. */
td_status td_exchange_thread_submit(td_exchange_thread *x, td_exchange_fn fn, void *arg);

/* Waits up to timeout_ms for the job handed over last: TD_OK once it
 * ended, its status in *job_status (TD_OK when none was pending).
 * TD_ERR_TIMEOUT leaves the job running: the caller must not enter MPI,
 * and must wait again before it reuses the job's memory. */
td_status td_exchange_thread_wait(td_exchange_thread *x, uint64_t timeout_ms, td_status *job_status);

/* Whether a job is queued or running. */
bool td_exchange_thread_busy(td_exchange_thread *x);

/* Stops and joins the thread after its current job (waiting up to
 * timeout_ms for it; past that the thread is left to end on its own and
 * frees its state itself). */
void td_exchange_thread_stop(td_exchange_thread *x, uint64_t timeout_ms);

#endif
