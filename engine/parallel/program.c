/* The program object that compile, run and parameter I/O share: jobs on
 * every device, the tensor check behind their messages, and what the
 * trainer reads of a program. */
#include <stdio.h>
#include <string.h>

#include "td_program_state.h"

static td_status program_job(void *arg, uint32_t pos)
{
    td_program *p = arg;
    td_status s = p->job(p, pos);
    if (s != TD_OK && s != TD_ERR_ABORTED)
        td_ring_abort(p->ring, s); /* wake the peers waiting on this device */
    /* A bucket's exchange between processes still in flight (the job's
     * hook settles it; a failed job did not get there): ended before the
     * job is, so no thread but the caller's is in MPI between jobs. */
    const td_status settled = td_ring_settle(p->ring, pos, s != TD_OK);
    return s != TD_OK ? s : settled;
}

td_status td_program_on_devices(td_program *p, td_program_device_fn fn)
{
    /* After a failure only (a failed ring, a mesh that dropped devices): a
     * job that timed out may still be ending on a fenced-off device, and it
     * must be out before the ring is reset or re-made under it.
     * td_mesh_run waits for it too, but only after this. */
    td_status quiet = TD_OK;
    if ((p->stale || td_ring_failed(p->ring)) && (quiet = td_mesh_wait_quiet(p->mesh)) != TD_OK)
        return quiet;
    if (p->stale) {
        /* The re-plan runs jobs of its own: keep the caller's arguments. */
        const td_node node = p->job_node;
        const uint32_t device = p->job_device;
        const void *src = p->job_src;
        void *dst = p->job_dst;
        if ((quiet = td_program_refresh(p)) != TD_OK)
            return quiet;
        p->job_node = node;
        p->job_device = device;
        p->job_src = src;
        p->job_dst = dst;
    }
    if (td_ring_failed(p->ring))
        td_ring_reset(p->ring); /* no worker is inside a collective between jobs */
    p->job = fn;
    return td_mesh_run(p->mesh, program_job, p);
}

td_status td_program_check_tensor(td_context *ctx, const char *fn, const td_tensor *t, td_dtype dtype,
                                  const td_shape *want, const char *what, const char *name)
{
    td_dtype dt;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    if (!t)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s '%s': the tensor is NULL", fn, what, name);
    td_tensor_dtype(t, &dt);
    td_tensor_shape(t, &rank, dims);
    if (dt != dtype) {
        char operand[96];
        snprintf(operand, sizeof operand, "the tensor for %s '%s'", what, name);
        return td_dtype_error(ctx, fn, operand, dt, td_dtype_name(dtype));
    }
    int same = rank == want->rank;
    for (uint32_t i = 0; same && i < rank; i++)
        same = dims[i] == want->dims[i];
    if (!same) {
        char got[96], exp[96];
        size_t u = 0, v = 0;
        for (uint32_t i = 0; i < rank; i++)
            u += (size_t)snprintf(got + u, sizeof got - u, "%s%lld", i ? "," : "", (long long)dims[i]);
        got[u] = 0;
        for (uint32_t i = 0; i < want->rank; i++)
            v += (size_t)snprintf(exp + v, sizeof exp - v, "%s%lld", i ? "," : "", (long long)want->dims[i]);
        exp[v] = 0;
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s: %s '%s': tensor has shape [%s], expected [%s]", fn, what,
                            name, got, exp);
    }
    return TD_OK;
}

uint32_t td_program_device_count(const td_program *p)
{
    return p->n_dev;
}

void td_program_disown(td_program *p)
{
    td_context_disown(&p->owned);
}

td_mesh *td_program_mesh(const td_program *p)
{
    return p->mesh;
}

const td_plan *td_program_plan(const td_program *p)
{
    return &p->plans[0];
}

const td_plan *td_program_plan_of(const td_program *p, uint32_t position)
{
    return &p->plans[p->plan_of[position]];
}

td_buffer *td_program_buffer(const td_program *p, uint32_t position, int which)
{
    return p->devs[position].buffers[which];
}

td_ring *td_program_ring(const td_program *p)
{
    return p->ring;
}

const td_node_def *td_program_node(const td_program *p, td_node node)
{
    return &p->graph.nodes[node];
}
