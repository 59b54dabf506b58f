/* A run across processes -- a trainer's step, an evaluator's batch --
 * succeeds or fails on every process together, and goes on after a lost
 * device the same way for both: one agreement, one way to continue, one
 * way to bind each process's rows again. */
#ifndef TD_ACROSS_H
#define TD_ACROSS_H

#include "tandem/train.h"
#include "td_mesh_internal.h"
#include "td_procs.h"
#include "td_program_internal.h"
#include "td_ring.h"

/* After a run with outcome `local` on a mesh whose ring spans processes:
 * every process learns every device's row. `rows` holds `per` floats per
 * device of the job (global positions); this fills the first two of this
 * process's rows ([status, kept]) -- the caller fills the others before --
 * and gathers every process's. offsets: processes + 1 scratch. On
 * success TD_OK with every row in place. On a failure anywhere: kept[g]
 * for every device of the job, *any_lost, the group renewed, and the
 * failure returned -- `local`, or TD_ERR_ABORTED naming the process that
 * failed. A failure that broke the group (a timeout) returns at once:
 * nothing can be agreed on, the job must end. */
td_status td_across_agree(td_context *ctx, td_mesh *mesh, td_ring *ring, td_status local, float *rows, uint32_t per,
                          size_t *offsets, bool *kept, bool *any_lost);

/* on_device_loss = continue after an agreed failure that lost devices:
 * every process drops its own lost devices, or only re-plans (the job's
 * mesh changed under it), and the mesh notes the job's kept devices
 * (td_mesh_note_job_keep) for every object on it. TD_OK: the caller plans
 * again and runs again; `failure` when nothing was lost; TD_ERR_DEVICE_LOST
 * when a process lost every device it had. */
td_status td_across_continue(td_context *ctx, td_mesh *mesh, td_ring *ring, const bool *kept, td_status failure);

/* offsets[q] = process q's first row of a batch split rows[g] per device
 * of the job, offsets[P] = the batch. */
void td_across_row_offsets(const td_ring *ring, const uint32_t *rows, uint64_t batch, uint64_t *offsets);

/* A batch bound again after the split changed: each process's rows moved,
 * and other processes may hold them. */
typedef struct td_rebound {
    td_binding *bindings;
    td_tensor **tensors; /* the new rows' tensors, NULL where the caller's binding stands */
    uint32_t n;
} td_rebound;

void td_rebound_free(td_context *ctx, td_rebound *r);

/* Every sharded input of `bindings` (this process's rows old[me] ..
 * old[me+1] of the batch) gathered between processes -- only after a loss
 * -- and bound again as rows [first, first + count): *out (its previous
 * contents freed). The caller's tensors are left alone. */
td_status td_across_rebind(td_context *ctx, const td_program *program, uint32_t processes, uint32_t n,
                           const td_binding *bindings, const uint64_t *old, uint64_t first, uint64_t count,
                           td_rebound *out);

#endif
