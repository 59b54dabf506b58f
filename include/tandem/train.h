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

#include "tandem/optim.h"
#include "tandem/pmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef struct td_trainer td_trainer;

/* Fields after learning_rate were added later (all of them since 0.1): a
 * caller built against the shorter struct passes its smaller struct_size
 * and gets the defaults of td_trainer_options_init for the rest. Every float field must be finite,
 * whichever optimizer reads it (TD_ERR_INVALID_ARGUMENT naming the field
 * otherwise), and within its range where the optimizer reads it. */
/* td_trainer_options.on_device_loss.
 * Since 0.1. */
typedef enum td_on_device_loss {
    TD_ON_DEVICE_LOSS_FAIL = 0,
    TD_ON_DEVICE_LOSS_CONTINUE = 1,
} td_on_device_loss;

/* td_trainer_options.balance: how each global batch is split over the
 * devices.
 * Since 0.1. */
typedef enum td_balance {
    TD_BALANCE_EVEN = 0,     /* equal shares (the remainder one example each to the first devices) */
    TD_BALANCE_AUTO = 1,     /* in proportion to each device's measured throughput on the step */
    TD_BALANCE_EXPLICIT = 2, /* in proportion to balance_weights */
} td_balance;

/* The arithmetic of a step's matrix products and convolutions (every
 * GEMM of forward and backward). Since 0.2.
 *   FP32  float inputs, float sums: the default.
 *   BF16  mixed precision: each input of a product rounded to bfloat16
 *         (round to nearest even), the products summed in float. Only the
 *         GEMMs' inputs are rounded: parameters (the master copy and each
 *         device's), optimizer state, activations in memory, the loss and
 *         the gradients on the ring stay float. CPUs with AVX512_BF16 run
 *         it about twice as fast as fp32 per multiply-add; elsewhere it
 *         gives the same answers at about fp32's speed. */
typedef enum td_precision {
    TD_PRECISION_FP32 = 0,
    TD_PRECISION_BF16 = 1,
} td_precision;

/* How the gradients travel between devices in the all-reduce. Since 0.2.
 *   FP32  as computed: the default.
 *   BF16  each partial sum is rounded to bfloat16 (round to nearest even)
 *         where it passes to another device, every addition is in float,
 *         and the complete sum is rounded to bfloat16 once more before the
 *         optimizer uses it; between processes the sums travel as 2-byte
 *         values (half the bytes of the reduce half of the exchange). The
 *         updated parameters travel back as floats, so every replica holds
 *         the same bits. Inside one process CPU devices read each other's
 *         memory in place, so nothing is saved there: the gradients are
 *         rounded the same way (the same bits on every path). A mesh with
 *         GPUs passes the sums between its devices' host staging as 2-byte
 *         values (half a float more host memory per gradient element and
 *         device). With one device in the job nothing travels and nothing
 *         is rounded. */
typedef enum td_wire {
    TD_WIRE_FP32 = 0,
    TD_WIRE_BF16 = 1,
} td_wire;

/* Since 0.1. */
typedef struct td_trainer_options {
    size_t struct_size; /* sizeof(td_trainer_options): growth-safe, see tandem/export.h */
    td_optimizer_kind optimizer;
    /* The rate when schedule.kind is TD_SCHEDULE_CONSTANT; 0 (the default)
     * takes the optimizer's own, td_optimizer_default_learning_rate (SGD
     * 0.01, ADAM, ADAMW and RMSPROP 1e-3), so that changing `optimizer`
     * alone does not keep another optimizer's rate. */
    float learning_rate;
    td_schedule schedule; /* other kinds carry their own values */
    float momentum;       /* SGD, RMSPROP: 0 = no momentum trace */
    bool nesterov;        /* SGD, RMSPROP with momentum */
    float b1, b2, eps;    /* ADAM, ADAMW (eps also RMSPROP) */
    float weight_decay;   /* ADAMW, decoupled: added to the update as weight_decay * param */
    float decay;          /* RMSPROP: decay of the squared-gradient average */
    float max_norm;       /* clip the mean gradient to this global L2 norm first; 0 = no clipping */
    /* Gradient accumulation as optax.MultiSteps: each td_trainer_step runs
     * one micro-batch; every accumulate_steps-th call applies the optimizer
     * to the mean of the round's gradients (one all-reduce per round). The
     * schedule and the optimizer's step count advance per update. Costs one
     * host copy of the parameters per device (two for devices whose memory
     * is not host memory). Default 1 (no accumulation); 0 is refused. */
    uint32_t accumulate_steps;
    /* Scalar f32 nodes computed with every step and read back by
     * td_trainer_metrics (the array is copied at create). */
    uint32_t n_metrics;
    const td_node *metrics;
    /* td_trainer_timing's split: each device's worker also waits for its
     * device after the upload and after the forward + backward, so that an
     * asynchronous device's (a GPU's) time is charged to the phase that
     * queued the work. Costs two device round trips per step; nothing on
     * CPU devices, which run synchronously. Off (the default), a GPU's
     * compute time shows up in the phase where the host first waits for it
     * (usually the all-reduce). */
    bool timing_waits;
    /* What a step does when a device fails, or is fenced off after the
     * timeout (tandem/context.h): FAIL (the default) returns the error with
     * the parameters as they were before the step. CONTINUE drops the lost
     * devices from the mesh (every program, evaluator and trainer on it
     * plans itself again for the survivors), splits the optimizer state
     * over them, and runs the same global batch again from the master
     * parameters -- the step then succeeds, and td_train_progress and the
     * step report count the devices lost. The global batch must divide by
     * the survivors' count. Gradients accumulated in an open round are
     * dropped (the round restarts). An evaluator on the same mesh has a
     * policy of its own (td_evaluator_set_on_device_loss); devices it drops
     * are the trainer's to plan around at its next call, and are counted in
     * td_train_progress.devices_lost too. */
    td_on_device_loss on_device_loss;
    /* The batch split. Every sharded input must then hold the same global
     * batch B on axis 0. EVEN gives every device B/N examples (when N does
     * not divide B, the first B mod N devices one more). AUTO starts even,
     * measures each device's busy time per example -- upload and forward +
     * backward, not the waits for its peers -- over balance_warmup steps
     * from the second step on (each device's median), splits in proportion, and measures again
     * every balance_interval steps and after td_trainer_rebalance; it
     * re-plans only for a split predicted at least 3% faster, and only
     * between accumulation rounds. EXPLICIT splits in proportion to
     * balance_weights (n_balance_weights of them: one positive weight per
     * mesh device, copied). Shares
     * come in units of balance_granularity examples (each device at least
     * one unit; what B leaves past the last whole unit goes to the device
     * that finishes it first), and each next unit goes to the device that
     * would finish it first. The gradients are combined weighted by the
     * devices' example counts (td_graph_shard_weight), so any split gives
     * the even split's update up to float rounding; the loss and metrics
     * are weighted likewise. A measured step waits for its devices twice
     * (as timing_waits): nothing on CPU devices. */
    td_balance balance;
    const float *balance_weights;
    uint32_t n_balance_weights;
    uint32_t balance_granularity; /* examples per unit; 0 = 8, halved while B < 4 x N units */
    uint32_t balance_warmup;      /* AUTO: steps per measurement (1 to 1000); 0 = 3 */
    uint32_t balance_interval;    /* AUTO: steps between measurements; 0 = 200 */
    /* Since 0.2. The step's GEMMs in FP32 (the default) or BF16
     * (td_precision). With td_context_options.deterministic, CPU devices
     * run BF16 with a kernel whose sums are written in C (the same bits on
     * every CPU, at about fp32's speed) instead of AVX512_BF16's dot
     * products, whose order and subnormal handling are the hardware's. */
    td_precision precision;
    /* Since 0.2. The gradient all-reduce in buckets of about this many
     * bytes (whole parameters each), each bucket's reduction and update
     * starting as soon as backward has written its gradients and read its
     * parameters for the last time, between the rest of backward's
     * kernels; 0 (the default) = one all-reduce after backward. The
     * parameters and optimizer state are bitwise those of the one
     * all-reduce. Taken without clipping (max_norm) and accumulation
     * (accumulate_steps > 1), on any mesh in one process and across
     * processes where every device of each process is a CPU device;
     * elsewhere the step keeps the one all-reduce. On GPUs (and mixed
     * meshes) a bucket's gradients go to the host when ready and its
     * reduction runs while the device computes the next part of
     * backward. Across processes each bucket's exchange runs on a thread
     * of its own while backward goes on. Not faster in one process on
     * CPU devices (bench/RESULTS.md), hence off. */
    uint64_t overlap_bucket_bytes;
    /* Since 0.2. The gradients on the ring in FP32 (the default) or BF16
     * (td_wire): bfloat16 between devices, float sums. */
    td_wire wire;
} td_trainer_options;

/* What the trainer has done: td_trainer_step calls that succeeded, optimizer
 * updates, gradient all-reduces run (one per update), micro-batches now
 * waiting in the accumulators, and whether the last call updated the
 * parameters (false after a failed call).
 * Since 0.1. */
typedef struct td_train_progress {
    size_t struct_size; /* sizeof(td_train_progress): growth-safe, see tandem/export.h */
    uint64_t micro_steps;
    uint64_t updates;
    uint64_t allreduces;
    uint32_t accumulated;
    bool updated;
    uint32_t devices;      /* devices the trainer runs on now */
    uint32_t devices_lost; /* devices dropped by on_device_loss = continue (a step's or an evaluator's) */
} td_train_progress;

/* Where one device's time went in a step, in seconds on the host clock of
 * its worker thread. The all-reduce and the update are one fused pass (the
 * owner updates each reduced slice of its chunk as it arrives), so `update`
 * is the time the optimizer ran on this device's chunk and `allreduce` the
 * rest of the pass: moving, summing and waiting for peers (and, with
 * gradient accumulation, reading the gradients back).
 * Since 0.1. */
typedef struct td_step_timing {
    double upload;    /* the bound inputs (and step words) to the device */
    double compute;   /* forward and backward, in-graph collectives included */
    double allreduce; /* the gradient all-reduce and all-gather, less the update */
    double update;    /* the optimizer on the parameter chunk this device owns */
    double download;  /* the loss and metrics back to the host, and the final wait */
} td_step_timing;

/* Fills `options` with the defaults: SGD without momentum at a constant
 * rate of the optimizer's default (learning_rate 0: SGD 0.01, the others
 * 1e-3), no clipping, and optax's defaults for the other optimizers (b1
 * 0.9, b2 0.999, eps 1e-8, weight_decay 1e-4, decay 0.9), so that changing
 * `optimizer` alone gives optax's optimizer of that name at its own rate.
 * Since 0.1. */
TD_API td_status td_trainer_options_init(td_trainer_options *options);

/* Builds value_and_grad of `loss` (a scalar node) with respect to `params`
 * and compiles the training step for `mesh`. n_params may be 0 (params
 * NULL): each step then computes the loss and metrics only.
 * Since 0.1. */
TD_API td_status td_trainer_create(td_graph *g, td_mesh *mesh, td_node loss, uint32_t n_params,
                                   const td_node *params, const td_trainer_options *options, td_trainer **out);

/* Releases the trainer's program, master parameters and optimizer state.
 * NULL is ignored. Valid before or after its mesh's destroy (see
 * tandem/context.h, "Lifetimes").
 * Since 0.1. */
TD_API void td_trainer_destroy(td_trainer *trainer);

/* Sets a parameter's value on every device.
 * Since 0.1. */
TD_API td_status td_trainer_set_param(td_trainer *trainer, td_node param, const td_tensor *value);

/* Reads a parameter as held by mesh device `device`.
 * Since 0.1. */
TD_API td_status td_trainer_read_param(td_trainer *trainer, td_node param, uint32_t device, td_tensor *out);

/* One synchronous data-parallel step. A schedule whose rate overflows to
 * inf at this update (an exponential decay growing without has_end_value)
 * fails with TD_ERR_STATE before anything runs. *loss (may be NULL) receives the loss
 * averaged over the devices, i.e. over the global batch (build it with
 * td_graph_masked_mean when shards hold padding). With accumulate_steps K >
 * 1 the call runs one micro-batch and updates the parameters only when it
 * completes a round of K (td_trainer_progress says whether it did); *loss
 * is then this micro-batch's loss. A failed call changes no parameter and
 * drops the round's accumulated gradients: the next call starts a new
 * round.
 * Since 0.1. */
TD_API td_status td_trainer_step(td_trainer *trainer, uint32_t n_bindings, const td_binding *bindings, float *loss);

/* The metrics' values at the last td_trainer_step, in options.metrics
 * order, each averaged over the devices in mesh order -- the global value
 * when the metric is a td_graph_masked_mean or a mean over equal shards.
 * capacity must be at least n_metrics; TD_ERR_STATE when the last call
 * failed or none ran.
 * Since 0.1. */
TD_API td_status td_trainer_metrics(const td_trainer *trainer, uint32_t capacity, float *values);

/* Zeroes *progress and sets its struct_size, ready for td_trainer_progress.
 * Since 0.1. */
TD_API td_status td_train_progress_init(td_train_progress *progress);

/* Fills *progress (see td_train_progress).
 * Since 0.1. */
TD_API td_status td_trainer_progress(const td_trainer *trainer, td_train_progress *progress);

/* *identical = whether every device holds bitwise the same parameters.
 * Since 0.1. */
TD_API td_status td_trainer_replicas_identical(td_trainer *trainer, bool *identical);

/* *state_bytes = host memory that mesh device `device`'s ring rank holds
 * for optimizer state (momentum, Adam's moments, ...). Each rank keeps the
 * state of the parameter chunk it owns in the ring, so the total is split
 * over the devices rather than copied to each; it is kept twice (current
 * and the step's pending copy) so that a failed step changes nothing.
 * Since 0.1. */
TD_API td_status td_trainer_memory(const td_trainer *trainer, uint32_t device, size_t *state_bytes);

/* What one device of a trainer holds, in bytes (seed 002's accounting).
 * The first four are device memory, the last host memory kept for it. The
 * first layout ends at `parameters`; the fields after it are since 0.1 too.
 * Since 0.1. */
typedef struct td_memory_report {
    size_t struct_size; /* sizeof(td_memory_report): growth-safe, see tandem/export.h */
    uint64_t parameters;  /* every parameter (and state) of the graph, replicated */
    uint64_t gradients;   /* the gradient bucket, one slot per parameter element */
    /* The arena at its peak: inputs, activations kept for the backward
     * pass and the backward pass's temporaries, placed by liveness (so this
     * is the peak, not the sum). It grows with the device's rows and, for a
     * transformer, with T^2 for the attention weights. */
    uint64_t activations;
    uint64_t step_words;  /* the step buffer (dropout's counters) */
    /* Host: the optimizer state of the parameter chunk the device's ring
     * rank owns (about a 1/N share; current and staged copies), and its
     * gradient accumulators (accumulate_steps > 1). */
    uint64_t optimizer_state;
    uint64_t accumulators;
} td_memory_report;

/* Zeroes *report and sets its struct_size.
 * Since 0.1. */
TD_API td_status td_memory_report_init(td_memory_report *report);

/* *report = mesh device `device`'s memory (above), up to its struct_size.
 * The same errors as td_trainer_memory.
 * Since 0.1. */
TD_API td_status td_trainer_memory_report(const td_trainer *trainer, uint32_t device, td_memory_report *report);

/* *timing = mesh device `device`'s split of the last td_trainer_step (see
 * td_step_timing and options.timing_waits). TD_ERR_STATE when the last call
 * failed or none ran; TD_ERR_INVALID_ARGUMENT for a device outside the
 * mesh. Reads values the step already measured: costs nothing.
 * Since 0.1. */
TD_API td_status td_trainer_timing(const td_trainer *trainer, uint32_t device, td_step_timing *timing);

/* Time spent inside td_trainer_step so far, in seconds, and the number of
 * optimizer updates (the calls, unless gradients are accumulated).
 * Since 0.1. */
TD_API td_status td_trainer_stats(const td_trainer *trainer, double *step_seconds, uint64_t *steps);

/* The batch split in force: rows[d] examples of each global batch on mesh
 * device d, for the n (<= capacity) devices the trainer runs on now;
 * zeros when the graph's sharded inputs share no batch size (each is then
 * divided evenly on its own).
 * Since 0.1. */
TD_API td_status td_trainer_split(const td_trainer *trainer, uint32_t capacity, uint32_t *rows, uint32_t *n);

/* Across processes (tandem/processes.h) each process binds only its own
 * rows of every sharded input: [*first, *first + *count) of the global
 * batch, for the next td_trainer_step (a split the balancer found takes
 * effect there, so ask before binding each batch). In one process: 0 and
 * the whole batch. TD_ERR_UNSUPPORTED across processes when the sharded
 * inputs share no batch size.
 * Since 0.1. */
TD_API td_status td_trainer_process_rows(const td_trainer *trainer, uint64_t *first, uint64_t *count);

/* balance = AUTO: each device's speed as last measured, in examples per
 * second of its own busy time (upload and forward + backward); zeros
 * before the first measurement and for other balances. The ideal step
 * for a global batch B is about B over their sum.
 * Since 0.1. */
TD_API td_status td_trainer_device_speeds(const td_trainer *trainer, uint32_t capacity, double *examples_per_second,
                                          uint32_t *n);

/* Reads a balance as the demos and `tandem train` spell it: "even",
 * "auto", or explicit weights "W0,W1,..." (finite numbers > 0, at most
 * `capacity` of them, written to weights and counted in *n_weights; 0 for
 * even and auto). Anything else is TD_ERR_INVALID_ARGUMENT naming it (in
 * ctx's message; ctx may be NULL to check a flag before any context).
 * Since 0.1. */
TD_API td_status td_balance_parse(td_context *ctx, const char *text, td_balance *balance, uint32_t capacity,
                                  float *weights, uint32_t *n_weights);

/* balance = AUTO: measures the devices again over the next balance_warmup
 * steps and re-splits if that is faster (a device's speed changed).
 * TD_ERR_STATE for another balance.
 * Since 0.1. */
TD_API td_status td_trainer_rebalance(td_trainer *trainer);

/* What a step callback receives after each successful td_trainer_step.
 * The pointers are the trainer's and valid during the call only.
 * Since 0.1. */
typedef struct td_step_report {
    /* The library's sizeof(td_step_report): a callback built against a
     * newer header reads a field only when struct_size covers it. */
    size_t struct_size;
    uint64_t micro_step;    /* successful td_trainer_step calls, this one included */
    uint64_t updates;       /* optimizer updates applied so far */
    bool updated;           /* this call applied one (it closed an accumulation round) */
    float loss;             /* as td_trainer_step's *loss */
    float learning_rate;    /* the schedule's rate for this call's round */
    double seconds;         /* this call's wall time */
    uint32_t n_metrics;
    const float *metrics;   /* as td_trainer_metrics */
    uint32_t n_devices;
    const td_step_timing *timing; /* per mesh device, as td_trainer_timing */
    uint32_t devices_lost;  /* dropped during this call (on_device_loss = continue) */
    const uint32_t *split;  /* examples per device in this call's batch (n_devices of them) */
    bool rebalanced;        /* the split changes from the next call on (balance = auto) */
} td_step_report;

/* Since 0.1. */
typedef void (*td_step_fn)(void *user, const td_step_report *report);

/* Calls fn(user, report) at the end of every successful td_trainer_step,
 * on the caller's thread, before td_trainer_step returns; NULL fn turns it
 * off. The report is filled from values the step already holds: no
 * allocation, no device work. fn must not call back into the trainer's
 * step.
 * Since 0.1. */
TD_API td_status td_trainer_on_step(td_trainer *trainer, td_step_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
