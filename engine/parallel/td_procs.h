/* The processes of a job, as the parallel layer uses them: MPI behind a
 * handful of exchanges, each bounded by the context timeout.
 *
 * Every exchange is collective over the job's processes (each calls it
 * with the same sizes, in the same order) and is made by one thread of a
 * process at a time (MPI_THREAD_SERIALIZED). Each is non-blocking inside:
 * the requests are polled against a deadline, and `should_stop`, when
 * given, is asked between polls, so a mesh job that is being aborted (a
 * local device failed) stops waiting for other processes too. On a timeout
 * the message names the processes that did not answer. An exchange that
 * does not complete cancels its pending receives and breaks the group:
 * every later exchange answers TD_ERR_STATE, MPI is not finalized, and
 * the caller ends the job (td_processes_abort). Sends already under way
 * may still read their buffers until then. */
#ifndef TD_PROCS_H
#define TD_PROCS_H

#include <stddef.h>
#include <stdint.h>

#include "td_context_internal.h"

typedef struct td_procs td_procs;

/* The process group ctx joined (td_processes_join), or NULL. */
td_procs *td_procs_of(td_context *ctx);
uint32_t td_procs_rank(const td_procs *procs);
uint32_t td_procs_count(const td_procs *procs);

/* Asked between polls; nonzero stops the wait with TD_ERR_ABORTED. */
typedef int (*td_procs_stop_fn)(void *user);

/* all = every process's `bytes` bytes at `mine`, in process order. */
td_status td_procs_allgather(td_procs *procs, const void *mine, void *all, size_t bytes, td_procs_stop_fn should_stop,
                             void *user);

/* `x` holds a float array split in blocks, process q's being
 * [offsets[q], offsets[q+1]). Afterwards every process's x holds every
 * block as its owner has it. */
td_status td_procs_allgather_blocks(td_procs *procs, float *x, const size_t *offsets, td_procs_stop_fn should_stop,
                                    void *user);

/* The reduce-scatter's exchange: sends block q of x (blocks as above, in
 * elements of `element_bytes` bytes: 4 for floats, 2 for bfloat16 on a
 * bf16 wire) to process q, and receives in recv, row q (this process's
 * block length each), process q's copy of this process's block -- its own
 * row included, so summing the rows in order gives bitwise the same sum
 * on whichever process does it. */
td_status td_procs_exchange_blocks(td_procs *procs, const void *x, const size_t *offsets, size_t element_bytes,
                                   void *recv, td_procs_stop_fn should_stop, void *user);

/* As td_procs_allgather_blocks for bytes (offsets in bytes). */
td_status td_procs_allgather_bytes(td_procs *procs, void *x, const size_t *offsets);

/* The step's agreement: as td_procs_allgather_blocks, but it does not
 * stop for a peer's abort (this is where every process learns every
 * outcome) and waits up to 6 x the timeout (a peer whose device hung comes
 * back after 4 x, fenced). */
td_status td_procs_agree_blocks(td_procs *procs, float *x, const size_t *offsets);

/* Whether an exchange failed past repair (a timeout, an MPI error): the
 * group refuses every exchange from then on, and the job must end. */
bool td_procs_broken(const td_procs *procs);

/* This process failed its step: tells every other process at once, so
 * their exchanges stop instead of waiting for the timeout. Once per step;
 * nothing when a peer's failure caused this one. */
td_status td_procs_signal_abort(td_procs *procs, td_status status);

/* After a failed step, on every process (collective): lets go of what the
 * interrupted exchanges left posted and moves to a fresh duplicate of the
 * communicator, so nothing of the failed step matches a later exchange. */
td_status td_procs_renew(td_procs *procs);

/* root's `bytes` bytes at data to every process's data. */
td_status td_procs_broadcast(td_procs *procs, uint32_t root, void *data, size_t bytes, td_procs_stop_fn should_stop,
                             void *user);

#endif
