/* tandem — several processes as one job (Open MPI).
 *
 * A job of P processes (started by mpirun, Slurm, PBS or Kubernetes' MPI
 * operator) trains as one: each process drives its own local devices, and
 * every mesh the context creates after td_processes_join is a *global*
 * mesh -- the local devices of process 0, then those of process 1, and so
 * on. Global position g = (devices of the processes before) + local
 * position. Collectives (the trainer's gradient all-reduce, psum, pmean,
 * all_gather, broadcast, axis_index) then run over every device of every
 * process: inside a process over tandem's ring, between processes over MPI
 * (non-blocking calls polled against the context timeout, so no wait is
 * unbounded). The processes must make the same calls in the same order
 * (SPMD), as with any MPI program.
 *
 * tandem calls MPI from one thread at a time (MPI_THREAD_SERIALIZED): the
 * caller must not use MPI_COMM_WORLD concurrently with a tandem call on a
 * joined context. Without MPI in the build every call here answers
 * TD_ERR_UNSUPPORTED. */
#ifndef TANDEM_PROCESSES_H
#define TANDEM_PROCESSES_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/context.h"
#include "tandem/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this library was built with MPI (-Dmpi). */
TD_API bool td_processes_available(void);

/* Whether this process was started by an MPI launcher (mpirun's
 * environment), so a tool can join only then. */
TD_API bool td_processes_launched(void);

/* Joins the job's processes: initializes MPI if nobody has (the matching
 * MPI_Finalize then runs at td_context_destroy of the last joined
 * context), or uses the caller's initialization (which must provide
 * MPI_THREAD_SERIALIZED or more). Collective: every process of
 * MPI_COMM_WORLD calls it. Meshes created afterwards on ctx span every
 * process. TD_ERR_STATE when ctx already joined. */
TD_API td_status td_processes_join(td_context *ctx);

/* This process's rank and the job's process count; 0 and 1 for a context
 * that joined nothing. */
TD_API td_status td_processes_rank(td_context *ctx, uint32_t *rank, uint32_t *count);

/* Ends the whole job at once with `code` (MPI_Abort): what a process that
 * failed does so that no other process waits for it. For a context that
 * joined nothing, returns TD_ERR_STATE and ends nothing. */
TD_API td_status td_processes_abort(td_context *ctx, int code);

/* The global mesh `mesh` belongs to: its device count over every process
 * and the global position of this process's local device 0 (the mesh's
 * own count and 0 in one process). */
TD_API td_status td_processes_mesh(td_mesh *mesh, uint32_t *global_size, uint32_t *first_position);

/* values[i] summed over every process, in process order (so every process
 * gets bitwise the same sums), for i < n; in place. Collective. For a
 * context that joined nothing, the values are unchanged. */
TD_API td_status td_processes_sum(td_context *ctx, double *values, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif
