/* Continuing on the surviving devices (on_device_loss = continue), one
 * path for every object that runs on a mesh and may find a device lost:
 * the trainer's step and the evaluator's run. */
#ifndef TD_SURVIVORS_H
#define TD_SURVIVORS_H

#include "tandem/train.h"
#include "td_mesh_internal.h"

/* Plans the caller's object for the devices the mesh has now. */
typedef td_status (*td_replan_fn)(void *object);

/* A run on `mesh` failed with `failure`, whose message is the context's.
 * Under TD_ON_DEVICE_LOSS_CONTINUE, when a device of the mesh was lost:
 * drops the lost devices (td_mesh_drop_lost: every object on the mesh
 * lets go of its devices and plans again before its next use), plans the
 * caller's object for the survivors through replan(object), logs `what`
 * ("step 9") with the failure and the devices left, and returns TD_OK:
 * the caller runs the same work again. Otherwise returns `failure` with
 * its message (another policy, no device lost), or the status of a drop
 * or a re-plan that failed, with both messages. *dropped = how many
 * devices the mesh dropped. */
td_status td_continue_on_survivors(td_mesh *mesh, td_on_device_loss policy, td_status failure, const char *what,
                                   td_replan_fn replan, void *object, uint32_t *dropped);

#endif
