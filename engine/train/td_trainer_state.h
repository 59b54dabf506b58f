/* The trainer's fields, shared by its files only, one job each:
 * trainer_options.c (defaults and checks of what create accepts),
 * trainer_create.c (create, release, parameters by node), trainer_step.c
 * (the step, all or nothing, and continuing on the survivors),
 * trainer_update.c (the fused all-reduce + optimizer update, clipping,
 * accumulation), trainer_plan.c (owners and accumulators over the mesh,
 * re-planned when it loses devices or the split changes) and
 * trainer_read.c (what callers and checkpoints read of it). The rest of
 * the engine sees td_trainer_internal.h. */
#ifndef TD_TRAINER_STATE_H
#define TD_TRAINER_STATE_H

#include <stdatomic.h>

#include "td_balance.h"
#include "td_optimizer.h"
#include "td_procs.h"
#include "td_program_internal.h"
#include "td_ring.h"
#include "td_schedule.h"
#include "td_trainer_internal.h"

typedef struct trainable_range {
    size_t lo, hi; /* one listed parameter, or one updated state, in the parameter buffer */
    bool state;    /* a td_graph_state: takes the reduced mean of its update's value, no optimizer */
} trainable_range;

/* What ring rank r keeps for the chunk it owns. */
typedef struct trainer_owner {
    size_t lo, hi;
    float *block;      /* holds both copies of the state */
    float *state;      /* state_floats arrays of hi - lo floats */
    float *next_state; /* the step's new state; swapped in on success */
    float g_norm;      /* this step's global gradient norm, when clipping */
    /* This step's optimizer time on the chunk (td_step_timing.update):
     * atomic, since the direct all-reduce may update slices of one chunk
     * on several threads at once. */
    _Atomic double update_seconds;
} trainer_owner;

/* A device's gradient accumulator. */
typedef struct trainer_accum {
    float *sum;     /* the round's gradients so far, param_elems floats */
    float *scratch; /* the call's gradients read back; NULL when the device's memory is host memory */
} trainer_accum;

struct td_trainer {
    td_owned owned;
    td_context *ctx;
    td_mesh *mesh;
    td_program *program;
    td_ring *ring; /* the program's */
    td_trainer_options options;
    const td_optimizer *optimizer;
    uint32_t state_floats;
    td_schedule schedule; /* with a constant schedule's value from learning_rate */
    uint32_t n_params;
    td_node *params;
    uint32_t n_ranges;       /* n_params + the graph's state updates */
    trainable_range *ranges; /* sorted by offset */
    trainer_owner *owners;   /* one per ring rank */
    float *master;  /* parameters, laid out as the device parameter buffer */
    float *pending; /* the step's new parameters; swapped in on success */
    size_t param_elems;
    size_t *bucket_bounds; /* n_buckets + 1: the overlapped all-reduce's buckets (trainer_update.c) */
    uint32_t n_buckets;    /* 0: one all-reduce after backward */
    /* Per device, the ticket of its latest bucket copy to the host
     * (td_ring_window_prefetch); NULL where buckets are reduced right where
     * they are ready (the direct all-reduce, CPU devices). */
    uint64_t *bucket_tickets;
    float step_lr;      /* the schedule at this step */
    uint64_t count_inc; /* steps + 1 during a step */
    double seconds;
    uint64_t steps;       /* optimizer updates */
    uint64_t micro_steps; /* successful td_trainer_step calls */
    uint64_t allreduces;  /* gradient all-reduces rank 0 completed */
    uint32_t n_metrics;
    td_node *metrics;
    bool has_outputs; /* the last call succeeded: outputs and metrics are readable */
    bool updated;     /* the last successful call updated the parameters */
    uint32_t micro;   /* micro-batches in the accumulators, 0..K-1 */
    trainer_accum *accum; /* per device when accumulate_steps > 1, else NULL */
    uint32_t n_owners;    /* devices the owners and accumulators were made for */
    bool stale;           /* the mesh dropped devices: trainer_refresh before use */
    float *flat_state;    /* the optimizer state across a mesh change */
    uint32_t devices_lost;   /* dropped from the mesh (on_device_loss = continue) by a step or an evaluation */
    uint32_t lost_this_step; /* during the current td_trainer_step */
    td_step_fn on_step;   /* td_trainer_on_step */
    void *on_step_user;
    float *report_metrics;          /* n_metrics, for the callback's report */
    td_step_timing *report_timing;  /* per device, likewise */
    td_balancer balance;  /* the batch split (options.balance) */
    double *busy;         /* per device of the job (global positions): a measured step's busy seconds */
    bool *keep;           /* per device: survives a mesh change (td_balancer_shrink) */
    bool rebalanced;      /* the last call found a faster split: the next call plans for it first */
    /* The global mesh (tandem/processes.h): every process's devices, and
     * this process's first. One process: the mesh and 0. */
    uint32_t global_n, first_position;
    uint32_t processes;   /* the job's processes the trainer spans (1: one process) */
    /* global_n x (3 + n_metrics): each device's [its process's step status,
     * kept (1) or lost (0), weighted loss, weighted metrics...] */
    float *device_values;
    bool agreed_loss;     /* the last agreement found devices lost somewhere in the job */
    uint32_t job_generation; /* the mesh's re-plans across processes this trainer has planned for */
    float *combined;      /* 1 + n_metrics: their combination, bitwise the same on every process */
    size_t *process_offsets; /* processes + 1, for the gathers between processes */
    float *gathered_state;   /* state_floats x param_elems: every process's state, for a save (made on the first) */
};

/* The first check of every call on a trainer: not NULL, not released. */
td_status td_trainer_check(const td_trainer *t, const char *fn);
/* Calls that read the owners' chunks or the devices need the trainer
 * planned for the mesh's devices: after the mesh dropped some, plans
 * again (td_trainer_refresh); TD_ERR_STATE naming `fn` when it cannot. */
td_status td_trainer_check_planned(const td_trainer *t, const char *fn);
/* Output `index` (0 the loss, then the metrics) over the devices: the mean
 * weighted by the devices' shares of the batch. */
float td_trainer_combine_devices(const td_trainer *t, uint32_t index);
/* Every metric of the last step, combined likewise (n_metrics values). */
void td_trainer_fill_metrics(const td_trainer *t, float *values);
/* After a step ran with outcome `local`: across processes, every process
 * learns every process's outcome and which devices it lost (one gather,
 * which also carries the values), so all succeed or all fail together;
 * a failure anywhere renews the processes' communicator and sets keep[]
 * (global) and agreed_loss. On success the loss and metrics of every
 * device, combined in global device order into t->combined (one process
 * and several compute the same sums). Returns the step's status: `local`,
 * or TD_ERR_ABORTED naming the process that failed. */
td_status td_trainer_agree_step(td_trainer *t, td_status local);
/* on_device_loss = continue across processes, after an agreed failure
 * that lost devices: every process drops its own lost devices (or only
 * re-plans), the global mesh is learned again, the batch is split over
 * the survivors and the trainer plans for them. TD_OK: run the step again;
 * otherwise `failure` or why continuing failed. */
td_status td_trainer_continue_across(td_trainer *t, td_status failure);
/* A measured step's busy seconds: this process's devices' into t->busy
 * at their global positions, then every other process's (gathered, so
 * every process's balancer finds the same split). Collective. */
td_status td_trainer_gather_busy(td_trainer *t);
/* The staged copies -- the new parameters (pending) and every owner's new
 * optimizer state -- become current, and the current ones the next
 * step's scratch: a successful step's end, and a restore's. */
void td_trainer_swap_in_staged(td_trainer *t);
/* Where device `device`'s time went in the last step. */
void td_trainer_fill_timing(const td_trainer *t, uint32_t device, td_step_timing *timing);

/* trainer_options.c: create's checks, each TD_ERR_INVALID_ARGUMENT naming
 * the field or the node. The options (every float finite, each in its
 * range for the optimizer it configures); the listed parameters (each a
 * trainable parameter node of g, none twice); the metrics (f32 scalar
 * nodes of g). */
td_status td_trainer_check_options(td_context *ctx, const td_trainer_options *o);
td_status td_trainer_check_params(td_graph *g, uint32_t n_params, const td_node *params);
td_status td_trainer_check_metrics(td_graph *g, uint32_t n, const td_node *metrics);
/* The optimizer's vtable for a checked kind. */
const td_optimizer *td_trainer_optimizer_for(td_optimizer_kind kind);

/* trainer_update.c: the step program's hook on device `pos`'s worker
 * (user is the trainer): accumulates the micro-batch's gradients, or runs
 * the fused all-reduce + update that leaves the new parameters on the
 * device and in the staged host copies. */
td_status td_trainer_update_hook(void *user, uint32_t pos);
/* Cuts the parameter buffer into the overlapped all-reduce's buckets and
 * hands them to the program, or turns them off where they cannot run
 * (td_trainer_options.overlap_bucket_bytes). At create and every re-plan. */
td_status td_trainer_plan_buckets(td_trainer *t);

/* trainer_plan.c. The trainable ranges of `listed` (the parameters, then
 * the updated states), sorted, and each ring rank's chunk with zeroed
 * optimizer state. */
td_status td_trainer_plan_owners(td_trainer *t, const td_node *listed);
/* The per-device gradient accumulators (accumulate_steps > 1), allocated
 * once so that a step never allocates. */
td_status td_trainer_plan_accumulators(td_trainer *t);
void td_trainer_free_owners(td_trainer *t);
void td_trainer_free_accumulators(td_trainer *t);
/* td_owned.before_shrink: the mesh is about to drop lost devices; the
 * optimizer state leaves the ranks' chunks for one flat copy and the
 * trainer is marked stale. */
void td_trainer_before_shrink(td_owned *self);
/* A stale trainer plans again for the mesh's devices: the program, the
 * owners (with the kept state), the accumulators, the master parameters
 * on every device. TD_OK and nothing done when it is not stale. */
td_status td_trainer_refresh(td_trainer *t);
/* The split the balancer found becomes the program's (a failure is
 * logged and the split tried again at the next step). */
void td_trainer_apply_split(td_trainer *t);

#endif
