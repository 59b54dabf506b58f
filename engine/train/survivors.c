/* Continuing on the surviving devices: the one place that decides whether
 * a failed run may go on with fewer devices, drops them and words what
 * happened, so a step and an evaluation survive a loss the same way. */
#include "td_survivors.h"

static bool any_device_lost(td_mesh *mesh)
{
    for (uint32_t d = 0; d < mesh->count; d++)
        if (td_mesh_device_lost(mesh, d))
            return true;
    return false;
}

td_status td_continue_on_survivors(td_mesh *mesh, td_on_device_loss policy, td_status failure, const char *what,
                                   td_replan_fn replan, void *object, uint32_t *dropped)
{
    *dropped = 0;
    if (policy != TD_ON_DEVICE_LOSS_CONTINUE || !any_device_lost(mesh))
        return failure; /* a failure of the work itself: running it again would fail again */
    td_context *ctx = mesh->ctx;
    char cause[1024];
    td_error_copy(ctx, cause, sizeof cause);
    const uint32_t before = mesh->count;
    td_status s = td_mesh_drop_lost(mesh, dropped);
    if (s == TD_OK && *dropped == 0)
        return failure;
    if (s == TD_OK)
        s = replan(object);
    if (s != TD_OK) {
        char why[1024];
        td_error_copy(ctx, why, sizeof why);
        return td_error_set(ctx, s, "%s; continuing on the surviving devices failed: %s", cause, why);
    }
    td_log(ctx, TD_LOG_WARN, "%s: %s; running it again on the %u devices left of %u", what, cause, mesh->count, before);
    return TD_OK;
}
