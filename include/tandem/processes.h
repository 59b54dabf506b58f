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
 * TD_ERR_UNSUPPORTED.
 *
 * A process that fails. Open MPI 4.1 cannot go on without a process, so
 * the job ends; what bounds it:
 *   - one that dies: mpirun sees it and ends the job (about 1 s later on
 *     one machine), naming its rank and signal;
 *   - one that stops answering: every call of the others that exchanges
 *     with it (td_processes_join, td_mesh_create on a joined context, a
 *     step, td_processes_sum, ...) fails after 2 x the context timeout
 *     with TD_ERR_TIMEOUT naming it ("process 0 of 3: the reduce-scatter
 *     between processes waited 4000 ms for process(es) 1, which did not
 *     answer"). The group is then broken: its later exchanges answer
 *     TD_ERR_STATE at once (the late messages of the failed one must not
 *     be taken for theirs), and td_context_destroy leaves MPI unfinalized
 *     (MPI_Finalize would wait for the silent process for ever). Such a
 *     process should end the job: td_processes_abort, or exit with a
 *     non-zero status; mpirun ends the job on either (and on an exit
 *     without MPI_Finalize). A local abort or an MPI error inside an
 *     exchange breaks the group the same way.
 * Not bounded, being blocking calls of MPI that wait for every process:
 * MPI_Init_thread (a process that never starts MPI holds the others
 * there) and MPI_Finalize once every exchange has succeeded (a process
 * that stops after its last exchange holds the others' td_context_destroy
 * there). tests/mpi/mpi_rank_faults.c measures these bounds. */
#ifndef TANDEM_PROCESSES_H
#define TANDEM_PROCESSES_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/context.h"
#include "tandem/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether this library was built with MPI (-Dmpi).
 * Since 0.1. */
TD_API bool td_processes_available(void);

/* Whether this process was started by an MPI launcher (mpirun's
 * environment), so a tool can join only then.
 * Since 0.1. */
TD_API bool td_processes_launched(void);

/* Joins the job's processes: initializes MPI if nobody has (the matching
 * MPI_Finalize then runs at td_context_destroy of the last joined
 * context, unless an exchange failed: see above), or uses the caller's
 * initialization (which must provide MPI_THREAD_SERIALIZED or more).
 * Collective: every process of MPI_COMM_WORLD calls it. It first sends one
 * small message to every process on MPI_COMM_WORLD (tag 7101), so that a
 * process that does not join within 2 x the context timeout is named
 * (TD_ERR_TIMEOUT); a caller that initialized MPI must have no receive
 * pending there that could take it. Meshes created afterwards on ctx span
 * every process. TD_ERR_STATE when ctx already joined.
 * Since 0.1. */
TD_API td_status td_processes_join(td_context *ctx);

/* This process's rank and the job's process count; 0 and 1 for a context
 * that joined nothing.
 * Since 0.1. */
TD_API td_status td_processes_rank(td_context *ctx, uint32_t *rank, uint32_t *count);

/* Ends the whole job at once with `code` (MPI_Abort): what a process that
 * failed does so that no other process waits for it. For a context that
 * joined nothing, returns TD_ERR_STATE and ends nothing.
 * Since 0.1. */
TD_API td_status td_processes_abort(td_context *ctx, int code);

/* The global mesh `mesh` belongs to: its device count over every process
 * and the global position of this process's local device 0 (the mesh's
 * own count and 0 in one process).
 * Since 0.1. */
TD_API td_status td_processes_mesh(td_mesh *mesh, uint32_t *global_size, uint32_t *first_position);

/* values[i] summed over every process, in process order (so every process
 * gets bitwise the same sums), for i < n; in place. Collective. For a
 * context that joined nothing, the values are unchanged.
 * Since 0.1. */
TD_API td_status td_processes_sum(td_context *ctx, double *values, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif
