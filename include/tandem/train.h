/* tandem — the data-parallel trainer.
 *
 * One step = on every device forward + backward on its shard of the batch,
 * then the gradients are summed by the ring (reduce-scatter), each chunk's
 * owner applies the optimizer to its chunk of the parameters once, in host
 * code, and the updated parameters are all-gathered to every device. Since
 * each parameter is computed exactly once and copied, the replicas stay
 * bitwise identical on any mix of devices and vendors. */
#ifndef TANDEM_TRAIN_H
#define TANDEM_TRAIN_H

#include "tandem/pmap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_trainer td_trainer;

typedef enum td_optimizer_kind {
    TD_OPTIMIZER_SGD = 0,
} td_optimizer_kind;

typedef struct td_trainer_options {
    size_t struct_size; /* sizeof(td_trainer_options); 0 = current */
    td_optimizer_kind optimizer;
    float learning_rate;
} td_trainer_options;

TD_API td_status td_trainer_options_init(td_trainer_options *options);

/* Builds value_and_grad of `loss` (a scalar node) with respect to `params`
 * and compiles the training step for `mesh`. */
TD_API td_status td_trainer_create(td_graph *g, td_mesh *mesh, td_node loss, uint32_t n_params,
                                   const td_node *params, const td_trainer_options *options, td_trainer **out);

TD_API void td_trainer_destroy(td_trainer *trainer);

/* Sets a parameter's value on every device. */
TD_API td_status td_trainer_set_param(td_trainer *trainer, td_node param, const td_tensor *value);

/* Reads a parameter as held by mesh device `device`. */
TD_API td_status td_trainer_read_param(td_trainer *trainer, td_node param, uint32_t device, td_tensor *out);

/* One synchronous data-parallel step. *loss (may be NULL) receives the loss
 * averaged over the devices, i.e. over the global batch. */
TD_API td_status td_trainer_step(td_trainer *trainer, uint32_t n_bindings, const td_binding *bindings, float *loss);

/* *identical = whether every device holds bitwise the same parameters. */
TD_API td_status td_trainer_replicas_identical(td_trainer *trainer, bool *identical);

/* Time spent inside td_trainer_step so far, in seconds, and the step count. */
TD_API td_status td_trainer_stats(const td_trainer *trainer, double *step_seconds, uint64_t *steps);

#ifdef __cplusplus
}
#endif
#endif
