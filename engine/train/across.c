/* Runs across processes (td_across.h): the agreement after each run, going
 * on after a lost device, and binding each process's rows again. */
#include <string.h>

#include "td_across.h"

td_status td_across_agree(td_context *ctx, td_mesh *mesh, td_ring *ring, td_status local, float *rows, uint32_t per,
                          size_t *offsets, bool *kept, bool *any_lost)
{
    const uint32_t processes = td_ring_process_count(ring), first = td_ring_global_position(ring, 0);
    td_procs *procs = td_procs_of(ctx);
    *any_lost = false;
    /* A process that did not answer in time broke the group here: there is
     * nothing to agree on -- the others time out on it too -- and the job
     * must end. */
    if (local != TD_OK && td_procs_broken(procs))
        return local;
    for (uint32_t d = 0; d < mesh->count; d++) {
        float *row = rows + (size_t)(first + d) * per;
        row[0] = (float)local;
        row[1] = td_mesh_device_lost(mesh, d) ? 0.0f : 1.0f;
    }
    if (local != TD_OK)
        td_procs_signal_abort(procs, local); /* the others stop waiting for this process now */
    for (uint32_t q = 0; q <= processes; q++) {
        uint32_t at = td_ring_global_count(ring);
        if (q < processes)
            td_ring_process_devices(ring, q, &at);
        offsets[q] = (size_t)at * per;
    }
    char cause[512] = ""; /* this process's own failure, kept across the exchanges below */
    if (local != TD_OK)
        td_error_copy(ctx, cause, sizeof cause);
    td_status s = td_procs_agree_blocks(procs, rows, offsets);
    if (s != TD_OK)
        return local != TD_OK ? td_error_set(ctx, local, "%s; and agreeing with the other processes failed", cause)
                              : s;
    int32_t failed = -1;
    td_status failed_status = TD_OK;
    for (uint32_t q = 0; q < processes; q++) {
        uint32_t at = 0;
        const uint32_t n = td_ring_process_devices(ring, q, &at);
        for (uint32_t d = at; d < at + n; d++) {
            const float *row = rows + (size_t)d * per;
            kept[d] = row[1] != 0.0f;
            *any_lost = *any_lost || !kept[d];
            if (row[0] != 0.0f && failed < 0) {
                failed = (int32_t)q;
                failed_status = (td_status)row[0];
            }
        }
    }
    if (failed < 0)
        return TD_OK;
    /* Somebody failed: every process fails the run, and the exchanges it
     * interrupted are let go of on every process at once. */
    if ((s = td_procs_renew(procs)) != TD_OK)
        return s;
    if (local != TD_OK)
        return td_error_set(ctx, local, "%s", cause);
    return td_error_set(ctx, TD_ERR_ABORTED, "process %d of %u failed this run (%s)%s", failed, processes,
                        td_status_name(failed_status), *any_lost ? ": it lost a device" : "");
}

td_status td_across_continue(td_context *ctx, td_mesh *mesh, td_ring *ring, const bool *kept, td_status failure)
{
    char cause[1024];
    td_error_copy(ctx, cause, sizeof cause);
    /* Every process reads the same flags, so every process decides alike. */
    const uint32_t processes = td_ring_process_count(ring), global = td_ring_global_count(ring);
    const uint32_t first = td_ring_global_position(ring, 0);
    uint32_t survivors = 0, lost_here = 0;
    for (uint32_t q = 0; q < processes; q++) {
        uint32_t at = 0, k = 0;
        const uint32_t n = td_ring_process_devices(ring, q, &at);
        for (uint32_t d = at; d < at + n; d++)
            k += kept[d];
        if (k == 0)
            return td_error_set(ctx, TD_ERR_DEVICE_LOST,
                                "%s; process %u lost every device it had, and the job cannot go on without a process "
                                "(resume from the last checkpoint with fewer processes)",
                                cause, q);
        survivors += k;
    }
    if (survivors == global)
        return failure;
    for (uint32_t d = 0; d < mesh->count; d++)
        lost_here += !kept[first + d];
    /* The record first: the drop below runs every object's before_shrink,
     * and the ring it reads goes with it. */
    td_status s = td_mesh_note_job_keep(mesh, kept, global);
    uint32_t dropped = 0;
    /* A process that lost devices drops them; the others only plan again.
     * Either way the mesh's ring goes and is made again, learning every
     * process's device count anew. */
    if (s == TD_OK)
        s = lost_here ? td_mesh_drop_lost(mesh, &dropped) : td_mesh_replan(mesh);
    if (s != TD_OK) {
        char why[1024];
        td_error_copy(ctx, why, sizeof why);
        return td_error_set(ctx, s, "%s; continuing on the surviving devices of the job failed: %s", cause, why);
    }
    td_log(ctx, TD_LOG_WARN, "%s; going on with the job's %u devices left of %u", cause, survivors, global);
    return TD_OK;
}

void td_across_row_offsets(const td_ring *ring, const uint32_t *rows, uint64_t batch, uint64_t *offsets)
{
    const uint32_t processes = td_ring_process_count(ring);
    for (uint32_t q = 0; q < processes; q++) {
        uint32_t first = 0;
        td_ring_process_devices(ring, q, &first);
        offsets[q] = 0;
        for (uint32_t d = 0; d < first; d++)
            offsets[q] += rows[d];
    }
    offsets[processes] = batch;
}

void td_rebound_free(td_context *ctx, td_rebound *r)
{
    for (uint32_t i = 0; r->tensors && i < r->n; i++)
        td_tensor_destroy(r->tensors[i]);
    td_free(ctx, r->tensors);
    td_free(ctx, r->bindings);
    *r = (td_rebound){0};
}

td_status td_across_rebind(td_context *ctx, const td_program *program, uint32_t processes, uint32_t n,
                           const td_binding *bindings, const uint64_t *old_rows, uint64_t first, uint64_t count,
                           td_rebound *out)
{
    const uint32_t me = td_procs_rank(td_procs_of(ctx)), P = processes;
    td_status s = TD_OK;
    td_rebound next = {td_alloc_zeroed(ctx, sizeof *next.bindings * (n + 1)),
                    td_alloc_zeroed(ctx, sizeof *next.tensors * (n + 1)), n};
    size_t *offsets = td_alloc(ctx, sizeof *offsets * (P + 1));
    if (s == TD_OK && (!next.bindings || !next.tensors || !offsets))
        s = TD_OOM(ctx, "the batch bound again after a loss", sizeof *next.bindings * n);
    for (uint32_t i = 0; i < n && s == TD_OK; i++) {
        next.bindings[i] = bindings[i];
        const td_node_def *nd = td_program_node(program, bindings[i].node);
        if (!nd || nd->placement != TD_SHARDED)
            continue;
        uint32_t rank;
        int64_t dims[TD_MAX_RANK];
        size_t elems, unit;
        td_dtype dtype;
        void *mine, *fresh;
        td_tensor_shape(bindings[i].value, &rank, dims);
        td_tensor_count(bindings[i].value, &elems);
        td_tensor_dtype(bindings[i].value, &dtype);
        td_dtype_size(dtype, &unit);
        td_tensor_data(bindings[i].value, &mine);
        const uint64_t held = old_rows[me + 1] - old_rows[me];
        if (rank == 0 || (uint64_t)dims[0] != held) {
            s = td_error_set(ctx, TD_ERR_SHAPE_MISMATCH,
                             "td_trainer_step: input '%s' has %lld rows, expected this process's %llu", nd->name,
                             (long long)(rank ? dims[0] : 0), (unsigned long long)held);
            break;
        }
        const size_t row_bytes = held ? elems * unit / held : 0;
        char *whole = td_alloc(ctx, (size_t)old_rows[P] * row_bytes + 1);
        if (!whole) {
            s = TD_OOM(ctx, "a batch gathered after a loss", (size_t)old_rows[P] * row_bytes);
            break;
        }
        memcpy(whole + old_rows[me] * row_bytes, mine, held * row_bytes);
        for (uint32_t q = 0; q <= P; q++)
            offsets[q] = (size_t)old_rows[q] * row_bytes;
        s = td_procs_allgather_bytes(td_procs_of(ctx), whole, offsets);
        dims[0] = (int64_t)count;
        if (s == TD_OK && (s = td_tensor_create(ctx, dtype, rank, dims, &next.tensors[i])) == TD_OK) {
            td_tensor_data(next.tensors[i], &fresh);
            memcpy(fresh, whole + first * row_bytes, count * row_bytes);
            next.bindings[i].value = next.tensors[i];
        }
        td_free(ctx, whole);
    }
    td_free(ctx, offsets);
    td_rebound_free(ctx, out); /* the previous re-run's, if this is the second loss of the step */
    if (s != TD_OK) {
        td_rebound_free(ctx, &next);
        return s;
    }
    *out = next;
    return TD_OK;
}
