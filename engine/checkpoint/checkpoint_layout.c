/* The list of a trainer's checkpoint tensors (see td_checkpoint_layout.h).
 * Node order, not the caller's parameter order, so that two trainers of one
 * graph write the same file whatever order their parameters were listed
 * in. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "td_checkpoint_layout.h"

static bool is_trained(const td_trainer_view *v, td_node id)
{
    for (uint32_t i = 0; i < v->n_params; i++)
        if (v->params[i] == id)
            return true;
    return false;
}

td_status td_ckpt_layout(const td_trainer_view *v, const char *who, td_ckpt_tensor **tensors, uint32_t *count)
{
    *tensors = NULL;
    *count = 0;
    const td_plan *plan = td_program_plan(v->program);
    uint32_t n_nodes = 0;
    for (td_node id = 0; id < plan->n_nodes; id++) {
        const td_node_def *nd = td_program_node(v->program, id);
        if (nd->op != TD_OP_PARAM)
            continue;
        if (strncmp(nd->name, TD_CKPT_OPT_PREFIX, strlen(TD_CKPT_OPT_PREFIX)) == 0)
            return td_error_set(v->ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: parameter '%s' (node %u): names starting with '" TD_CKPT_OPT_PREFIX
                                "' are reserved for the optimizer state in checkpoints; rename it",
                                who, nd->name, id);
        n_nodes++;
    }
    const size_t n = (size_t)n_nodes + (size_t)v->state_floats * v->n_params;
    td_ckpt_tensor *list = td_alloc_zeroed(v->ctx, sizeof *list * (n + 1));
    if (!list)
        return TD_OOM(v->ctx, "the checkpoint's tensor list", sizeof *list * (n + 1));
    uint32_t at = 0;
    for (int32_t slot = -1; slot < (int32_t)v->state_floats; slot++) {
        for (td_node id = 0; id < plan->n_nodes; id++) {
            const td_node_def *nd = td_program_node(v->program, id);
            if (nd->op != TD_OP_PARAM || (slot >= 0 && !is_trained(v, id)))
                continue;
            td_ckpt_tensor *t = &list[at++];
            if (slot < 0)
                snprintf(t->name, sizeof t->name, "%s", nd->name);
            else
                snprintf(t->name, sizeof t->name, TD_CKPT_OPT_PREFIX "%s/%s", v->optimizer->slot_names[slot],
                         nd->name);
            t->node = id;
            t->slot = slot;
            t->shape = &plan->shapes[id];
            t->offset = plan->slots[id].offset;
            t->count = (size_t)td_shape_count(&plan->shapes[id]);
        }
    }
    *tensors = list;
    *count = at;
    return TD_OK;
}

td_status td_ckpt_check_finite(td_context *ctx, td_status status, const char *who, const char *where,
                               const td_ckpt_tensor *tensor, const float *values, size_t count, size_t first,
                               const char *why)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(values[i]))
            return td_error_set(ctx, status, "%s: %s: tensor '%s' holds %g at element %zu%s", who, where, tensor->name,
                                (double)values[i], first + i, why);
    return TD_OK;
}
