/* The job's processes in a library built without MPI (-Dmpi=disabled or
 * no libopenmpi-dev): the calls exist, so the ABI does not depend on the
 * option, and say why they cannot join anything. A context never has a
 * process group here, so the rest of the engine runs as one process. */
#include "tandem/processes.h"
#include "td_procs.h"

bool td_processes_available(void)
{
    return false;
}

bool td_processes_launched(void)
{
    return false;
}

td_procs *td_procs_of(td_context *ctx)
{
    (void)ctx;
    return NULL;
}

uint32_t td_procs_rank(const td_procs *procs)
{
    (void)procs;
    return 0;
}

uint32_t td_procs_count(const td_procs *procs)
{
    (void)procs;
    return 1;
}

static td_status unsupported(td_context *ctx, const char *fn)
{
    return td_error_set(ctx, TD_ERR_UNSUPPORTED, "%s: this library was built without MPI (meson -Dmpi=enabled "
                        "with libopenmpi-dev installed)", fn);
}

td_status td_processes_join(td_context *ctx)
{
    return ctx ? unsupported(ctx, "td_processes_join") : TD_ERR_INVALID_ARGUMENT;
}

td_status td_processes_rank(td_context *ctx, uint32_t *rank, uint32_t *count)
{
    if (!ctx || !rank || !count)
        return TD_ERR_INVALID_ARGUMENT;
    *rank = 0;
    *count = 1;
    return TD_OK;
}

td_status td_processes_abort(td_context *ctx, int code)
{
    (void)code;
    return ctx ? td_error_set(ctx, TD_ERR_STATE, "td_processes_abort: the context joined no processes")
               : TD_ERR_INVALID_ARGUMENT;
}

td_status td_processes_sum(td_context *ctx, double *values, uint32_t n)
{
    return !ctx || (n && !values) ? TD_ERR_INVALID_ARGUMENT : TD_OK;
}

/* Never called: no process group exists without MPI. */
td_status td_procs_allgather(td_procs *procs, const void *mine, void *all, size_t bytes, td_procs_stop_fn should_stop,
                             void *user)
{
    (void)procs, (void)mine, (void)all, (void)bytes, (void)should_stop, (void)user;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_allgather_blocks(td_procs *procs, float *x, const size_t *offsets, td_procs_stop_fn should_stop,
                                    void *user)
{
    (void)procs, (void)x, (void)offsets, (void)should_stop, (void)user;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_exchange_blocks(td_procs *procs, const void *x, const size_t *offsets, size_t element_bytes,
                                   void *recv, td_procs_stop_fn should_stop, void *user)
{
    (void)procs, (void)x, (void)offsets, (void)element_bytes, (void)recv, (void)should_stop, (void)user;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_broadcast(td_procs *procs, uint32_t root, void *data, size_t bytes, td_procs_stop_fn should_stop,
                             void *user)
{
    (void)procs, (void)root, (void)data, (void)bytes, (void)should_stop, (void)user;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_agree_blocks(td_procs *procs, float *x, const size_t *offsets)
{
    (void)procs, (void)x, (void)offsets;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_signal_abort(td_procs *procs, td_status status)
{
    (void)procs, (void)status;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_renew(td_procs *procs)
{
    (void)procs;
    return TD_ERR_UNSUPPORTED;
}

td_status td_procs_allgather_bytes(td_procs *procs, void *x, const size_t *offsets)
{
    (void)procs, (void)x, (void)offsets;
    return TD_ERR_UNSUPPORTED;
}

bool td_procs_broken(const td_procs *procs)
{
    (void)procs;
    return false;
}
