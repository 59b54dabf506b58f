/* tandem — pmap: one graph, compiled for a mesh, run on every device at once.
 *
 * td_pmap_compile traces the graph once into a per-device plan: every buffer
 * allocated up front, kernels built, command lists recorded. td_program_run
 * then uploads the inputs (each device its slice of a TD_SHARDED input, the
 * whole of a TD_REPLICATED one), runs the plan on every device concurrently,
 * including the collectives, and keeps each device's outputs for reading. */
#ifndef TANDEM_PMAP_H
#define TANDEM_PMAP_H

#include "tandem/device.h"
#include "tandem/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef struct td_program td_program;

/* One value for one graph input, given as a host tensor of the input's
 * global shape and dtype.
 * Since 0.1. */
typedef struct td_binding {
    td_node node;
    const td_tensor *value;
} td_binding;

/* Compiles `g` for `mesh`, computing `outputs`. Errors: TD_ERR_NOT_DIVISIBLE
 * when a sharded input's axis 0 does not split over the mesh (the message
 * names the size and the device count), TD_ERR_SHAPE_MISMATCH, device
 * errors. Parameters start from their initializers (zeros without one).
 * The program is an evaluation program: dropout passes x through, batch
 * norm uses its running statistics, td_graph_by_mode picks `evaluation`.
 * Since 0.1. */
TD_API td_status td_pmap_compile(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs,
                                 td_program **out);

/* The same, as a training program (what a trainer's step runs): dropout
 * draws its masks for the step set by td_program_set_step, batch norm uses
 * batch statistics, td_graph_by_mode picks `training`. State updates
 * (td_graph_state_update) are the trainer's: this program does not apply
 * them. For custom training loops and tests.
 * Since 0.1. */
TD_API td_status td_pmap_compile_training(td_graph *g, td_mesh *mesh, uint32_t n_outputs, const td_node *outputs,
                                          td_program **out);

/* The step step-keyed ops see in the next runs (dropout's masks): 0 until
 * set. A trainer sets it to its count of completed micro-batches.
 * Since 0.1. */
TD_API td_status td_program_set_step(td_program *program, uint64_t step);

/* Releases the program's device memory. NULL is ignored. Valid before or
 * after its mesh's destroy (see tandem/context.h, "Lifetimes").
 * Since 0.1. */
TD_API void td_program_destroy(td_program *program);

/* Runs one step. Every graph input must be bound exactly once.
 * Since 0.1. */
TD_API td_status td_program_run(td_program *program, uint32_t n_bindings, const td_binding *bindings);

/* Copies output `index` as computed by mesh device `device` into `out`,
 * which must have the output's per-device shape (see td_program_output_shape).
 * Since 0.1. */
TD_API td_status td_program_read_output(td_program *program, uint32_t index, uint32_t device, td_tensor *out);

/* The per-device shape of output `index`.
 * Since 0.1. */
TD_API td_status td_program_output_shape(const td_program *program, uint32_t index, uint32_t *rank, int64_t *dims);

/* Sets a parameter on every device (same bytes everywhere).
 * Since 0.1. */
TD_API td_status td_program_set_param(td_program *program, td_node param, const td_tensor *value);

/* Reads a parameter as held by mesh device `device`.
 * Since 0.1. */
TD_API td_status td_program_read_param(td_program *program, td_node param, uint32_t device, td_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
