/* What the trainer uses of a compiled program. */
#ifndef TD_PROGRAM_INTERNAL_H
#define TD_PROGRAM_INTERNAL_H

#include "tandem/pmap.h"
#include "td_mesh_internal.h"
#include "td_plan.h"
#include "td_ring.h"

/* Runs on every device's worker after the plan's steps, inside the same job
 * (the trainer's fused gradient all-reduce + update lives here). */
typedef td_status (*td_program_hook)(void *user, uint32_t position);

/* td_pmap_compile, plus: the gradient of params[i] is grads[i], laid out in
 * the gradient buffer at the parameter's offset, `training` goes to the
 * plan (td_plan.training), and every GEMM of the plan (the matrix products
 * and convolutions, forward and backward) runs in `gemm_precision`
 * (td_gemm_precision, td_kernel.h). */
td_status td_program_compile(td_graph *g, td_mesh *mesh, const uint32_t *split, uint32_t n_outputs,
                             const td_node *outputs, uint32_t n_grads, const td_node *params,
                             const td_node *grads, bool training, int32_t gemm_precision, td_program **out);
/* Every GEMM of the program in `gemm_precision` from now on: a planned
 * program reads its parameters back and is planned again with them. */
td_status td_program_set_gemm_precision(td_program *p, int32_t gemm_precision);
/* td_program_run / set_param / read_param with `fn` naming the public call
 * in messages (the trainer's, the evaluator's). */
td_status td_program_run_for(td_program *p, uint32_t n_bindings, const td_binding *bindings, const char *fn);
td_status td_program_set_param_for(td_program *p, td_node param, const td_tensor *value, const char *fn);
td_status td_program_read_param_for(td_program *p, td_node param, uint32_t device, td_tensor *out, const char *fn);
/* Makes the program owned by its caller (the trainer) rather than the context. */
void td_program_disown(td_program *p);
void td_program_set_hook(td_program *p, td_program_hook hook, void *user);

/* Buckets of the parameter (and gradient) buffer whose all-reduce may run
 * while backward goes on: bucket b is elements [bounds[b], bounds[b+1]).
 * A run calls fn(user, pos, b) for every bucket, on each device's worker,
 * as soon as the device has run the last kernel call that reads or writes
 * bucket b of its parameter or gradient buffer -- after that no call of
 * the step touches those elements, so the bucket's gradients are complete
 * and its parameters may change. The buckets come in one order on every
 * device (that of device 0's calls), at the same places among the plan's
 * in-graph collectives, as collectives must. n_buckets 0 turns it off.
 * bounds is copied; call between runs.
 *
 * With `begin` (devices whose kernels run on a queue of their own, GPUs),
 * a ready bucket gets begin(user, pos, b) at once and fn one piece later:
 * after the next piece of backward is enqueued and flushed (or before the
 * next in-graph collective, or at the end), so the device runs that piece
 * while the host reduces the bucket. NULL: fn at once (CPU devices, whose
 * kernels run on the worker that would reduce). */
typedef td_status (*td_program_bucket_fn)(void *user, uint32_t position, uint32_t bucket);
td_status td_program_set_buckets(td_program *p, uint32_t n_buckets, const size_t *bounds, td_program_bucket_fn begin,
                                 td_program_bucket_fn fn, void *user);
/* The buckets the last run finished on device `position` before its hook. */
uint32_t td_program_buckets_done(const td_program *p, uint32_t position);
/* The last run's seconds in the bucket function on that device: inside its
 * compute phase (td_program_phase_seconds), though not its work. */
double td_program_bucket_seconds(const td_program *p, uint32_t position);
/* Writes `params` (the whole parameter buffer, plan->size[TD_BUF_PARAMS]
 * floats) to every device. */
td_status td_program_write_all_params(td_program *p, const float *params);
/* The parameters' initial values, laid out as the parameter buffer
 * (plan->size[TD_BUF_PARAMS] floats), as written to every device at compile. */
const float *td_program_initial_params(const td_program *p);
const td_plan *td_program_plan(const td_program *p);
/* The plan device `position` runs (an uneven split has one per row count). */
const td_plan *td_program_plan_of(const td_program *p, uint32_t position);
td_buffer *td_program_buffer(const td_program *p, uint32_t position, int which);
/* The mesh's ring the program runs its collectives on: the trainer's fused
 * all-reduce uses the same one. */
td_ring *td_program_ring(const td_program *p);
const td_node_def *td_program_node(const td_program *p, td_node node);
/* The phases of a run on one device, timed on the host clock by the
 * device's worker: inputs up, the plan's segments and collectives, the
 * hook, outputs down (with the final wait for the device). */
typedef enum td_program_phase {
    TD_PHASE_UPLOAD = 0,
    TD_PHASE_COMPUTE = 1,
    TD_PHASE_HOOK = 2,
    TD_PHASE_DOWNLOAD = 3,
    TD_PHASE_COUNT = 4,
} td_program_phase;
/* With waits on, the worker also waits for the device after the upload and
 * after the compute, so an asynchronous device's time is charged to the
 * phase that queued the work (two device round trips per run); off, the
 * device's time lands in the phase where the host first waits. Devices in
 * host memory run synchronously and pay nothing either way. */
void td_program_set_phase_waits(td_program *p, bool on);
/* Before the mesh drops lost devices (td_mesh_drop_lost): reads the
 * parameters back from a surviving device and releases every device's
 * part; the next job plans the program again for the smaller mesh
 * (td_program_refresh), with those parameter values. For a program held
 * by a trainer or evaluator, which calls this from its own hook. */
void td_program_before_shrink(td_program *p);
/* Plans a program marked by td_program_before_shrink again for its
 * mesh now; nothing for an up-to-date one. Every job does this first. */
td_status td_program_refresh(td_program *p);
/* The batch split the program's next plan uses: rows[d] examples of the
 * global batch (their sum; every sharded input's axis 0) on device d of
 * the n devices the mesh has then. Shapes, arenas and the example offsets
 * of each device follow its rows, and td_graph_shard_weight is
 * N x rows[d] / total. NULL (or a split for another device count) divides
 * each sharded input evenly. Copies rows; plans nothing by itself. */
td_status td_program_set_split(td_program *p, uint32_t n, const uint32_t *rows);
/* Plans the program again now, for its split, with `params` (the whole
 * parameter buffer) on every device. On failure the program is left to
 * plan again at its next use, with those parameters. */
td_status td_program_replan(td_program *p, const float *params);
/* The mesh the program runs on. */
td_mesh *td_program_mesh(const td_program *p);
/* Devices the program is planned for now. */
uint32_t td_program_device_count(const td_program *p);
/* The name each device's run takes in a trace ("run" unless set): a
 * static string. */
void td_program_set_trace_name(td_program *p, const char *name);
/* seconds[0..TD_PHASE_COUNT) = device `position`'s phases in the last run
 * (zeros before any). */
void td_program_phase_seconds(const td_program *p, uint32_t position, double *seconds);
/* The last run's time device `position` spent on its own work: uploading
 * and computing, less the in-graph collectives (waiting for its peers).
 * Exact for devices that run synchronously (CPU); an asynchronous device's
 * needs phase waits on (td_program_set_phase_waits) for that run. */
double td_program_busy_seconds(const td_program *p, uint32_t position);
/* td_graph_shard_weight's value on device `position` under the split. */
float td_program_shard_weight(const td_program *p, uint32_t position);
/* Host copy of output `index` as computed by `device` (valid after a run). */
const float *td_program_output_host(const td_program *p, uint32_t index, uint32_t device);

#endif
