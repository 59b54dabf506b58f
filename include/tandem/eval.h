/* tandem — evaluation: the forward pass of a trained graph over a data set.
 *
 * An evaluator is a program compiled from the trainer's graph for the metric
 * nodes only (no gradients, no update, td_plan.training false, so dropout
 * and batch norm lower for inference). It takes the trainer's current
 * parameters with td_evaluator_load, then runs global batches that the
 * caller binds, the mask included: the last short batch is padded and its
 * padding rows masked out (td_data_gather_batch and td_data_batch_mask do both).
 * Each batch's metrics are weighted by its number of valid examples, so
 * the result is the average over exactly the valid examples of the data
 * set, provided each metric is a td_graph_masked_mean over the batch. */
#ifndef TANDEM_EVAL_H
#define TANDEM_EVAL_H

#include "tandem/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef struct td_evaluator td_evaluator;

/* Compiles `g` for `mesh` computing the scalar f32 nodes `metrics`. `mask`
 * is the graph's f32 [B] mask input (1 valid, 0 padding), whose bound value
 * gives each batch's weight. Errors: TD_ERR_INVALID_ARGUMENT for a NULL
 * argument, a node that does not exist, a metric that is not an f32 scalar
 * or a mask that is not an f32 rank-1 input; compile errors as
 * td_pmap_compile.
 * Since 0.1. */
TD_API td_status td_evaluator_create(td_graph *g, td_mesh *mesh, td_node mask, uint32_t n_metrics,
                                     const td_node *metrics, td_evaluator **out);

/* Releases the evaluator's program and memory. NULL is ignored. Valid
 * before or after its mesh's destroy (see tandem/context.h, "Lifetimes").
 * Since 0.1. */
TD_API void td_evaluator_destroy(td_evaluator *evaluator);

/* Copies the trainer's current parameters (its host master copy) to every
 * device of the evaluator, matching parameters by node and name: the
 * trainer must have been created from the same graph. Parameters that the
 * trainer does not train are copied too. Also starts a new tally
 * (td_evaluator_reset).
 * Since 0.1. */
TD_API td_status td_evaluator_load(td_evaluator *evaluator, const td_trainer *trainer);

/* Forgets the batches run so far.
 * Since 0.1. */
TD_API td_status td_evaluator_reset(td_evaluator *evaluator);

/* What a batch does when a device of the mesh is lost during it (see
 * td_trainer_options.on_device_loss): TD_ON_DEVICE_LOSS_FAIL (the default)
 * returns the run's error; TD_ON_DEVICE_LOSS_CONTINUE drops the lost
 * devices from the mesh, plans the evaluator for the survivors and runs
 * the same batch again, so the tally goes on as if nothing happened (the
 * result differs only by float summation order). The mesh is shared: a
 * trainer on it plans for the survivors at its next call, and counts the
 * dropped devices in td_train_progress.devices_lost. Give an evaluator the
 * trainer's policy, or an evaluation can fail where training would go on.
 * TD_ERR_INVALID_ARGUMENT for a value that is not a td_on_device_loss.
 * Since 0.1. */
TD_API td_status td_evaluator_set_on_device_loss(td_evaluator *evaluator, td_on_device_loss policy);

/* The arithmetic of the evaluation's matrix products and convolutions
 * (td_precision; TD_PRECISION_FP32 from create): give it the trainer's
 * td_trainer_options.precision to evaluate the model as it trains. A
 * change plans the evaluator's program again, keeping the parameters the
 * devices hold; call it before running batches, not between them.
 * TD_ERR_INVALID_ARGUMENT for a value that is not a td_precision.
 * Since 0.2. */
TD_API td_status td_evaluator_set_precision(td_evaluator *evaluator, td_precision precision);

/* Runs one global batch (every needed input bound, the mask included) and
 * adds its metrics, weighted by the sum of its mask, to the tally. A batch
 * whose mask is all zero adds nothing. A failed run adds nothing either;
 * a run that lost a device goes on as td_evaluator_set_on_device_loss
 * says.
 * Since 0.1. */
TD_API td_status td_evaluator_run(td_evaluator *evaluator, uint32_t n_bindings, const td_binding *bindings);

/* Across processes, the rows of each global batch this process binds:
 * [*first, *first + *count), its devices' even shares (see
 * td_trainer_process_rows). In one process: 0 and the whole batch.
 * Since 0.1. */
TD_API td_status td_evaluator_process_rows(const td_evaluator *evaluator, uint64_t *first, uint64_t *count);

/* values[i] = metric i averaged over the valid examples of the batches run
 * since the last load or reset (0 when there were none); *examples (may be
 * NULL) = how many valid examples that is (the mask's sum). capacity must
 * be at least n_metrics.
 * Since 0.1. */
TD_API td_status td_evaluator_result(const td_evaluator *evaluator, uint32_t capacity, float *values,
                                     double *examples);

#ifdef __cplusplus
}
#endif
#endif
