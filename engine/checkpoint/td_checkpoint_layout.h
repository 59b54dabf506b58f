/* What a checkpoint holds of a trainer, tensor by tensor: the one list the
 * writer and the reader both walk, so they cannot disagree on a name, a
 * shape or where the values live. */
#ifndef TD_CHECKPOINT_LAYOUT_H
#define TD_CHECKPOINT_LAYOUT_H

#include "td_trainer_internal.h"

/* "opt/" + a slot name + "/" + a 63-byte parameter name, with room. */
#define TD_CKPT_NAME_CAP 96

/* Names starting with this hold optimizer state. */
#define TD_CKPT_OPT_PREFIX "opt/"

/* The metadata format this code writes and reads. */
#define TD_CKPT_FORMAT "1"

typedef struct td_ckpt_tensor {
    char name[TD_CKPT_NAME_CAP];
    td_node node;      /* the parameter or state */
    int32_t slot;      /* -1: the node's own values; else that optimizer state slot */
    const td_shape *shape; /* the node's shape (the plan's; parameters are never sharded) */
    size_t offset;     /* in the parameter buffer */
    size_t count;
} td_ckpt_tensor;

/* Every parameter and state of the trainer's graph in node order, then for
 * each optimizer slot every trained parameter's state in node order.
 * *tensors is td_alloc'd. A graph parameter whose name starts with "opt/"
 * is refused (TD_ERR_INVALID_ARGUMENT naming it and `who`): its name could
 * be an optimizer state's. */
/* TD_OK when values[0..count-1] are all finite; else `status` with a
 * message "<who>: <where>: tensor '<name>' holds <value> at element
 * <index> (from `first`, the tensor's element of values[0])<why>" -- a
 * NaN or infinity in a checkpoint is a diverged run, which neither a save
 * nor a restore passes on. */
td_status td_ckpt_check_finite(td_context *ctx, td_status status, const char *who, const char *where,
                               const td_ckpt_tensor *tensor, const float *values, size_t count, size_t first,
                               const char *why);

td_status td_ckpt_layout(const td_trainer_view *view, const char *who, td_ckpt_tensor **tensors, uint32_t *count);

#endif
