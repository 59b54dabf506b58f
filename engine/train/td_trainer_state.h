/* The trainer's fields, shared by its files only: trainer.c (options,
 * create, the step and its fused update, mesh changes) and trainer_read.c
 * (what callers and checkpoints read of it, and the batch split). The
 * rest of the engine sees td_trainer_internal.h. */
#ifndef TD_TRAINER_STATE_H
#define TD_TRAINER_STATE_H

#include "td_balance.h"
#include "td_optimizer.h"
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
    double update_seconds; /* this step's optimizer time on the chunk (td_step_timing.update) */
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
    uint32_t devices_lost;   /* dropped from the mesh by on_device_loss = continue */
    uint32_t lost_this_step; /* during the current td_trainer_step */
    td_step_fn on_step;   /* td_trainer_on_step */
    void *on_step_user;
    float *report_metrics;          /* n_metrics, for the callback's report */
    td_step_timing *report_timing;  /* per device, likewise */
    td_balancer balance;  /* the batch split (options.balance) */
    double *busy;         /* per device: a measured step's busy seconds */
    bool *keep;           /* per device: survives a mesh change (td_balancer_shrink) */
    bool rebalanced;      /* the last call found a faster split: the next call plans for it first */
};

/* The first check of every call on a trainer: not NULL, not released. */
td_status td_trainer_check(const td_trainer *t, const char *fn);
/* Calls that read the owners' chunks need them: TD_ERR_STATE naming `fn`
 * when the mesh dropped devices and the trainer has not planned again. */
td_status td_trainer_check_planned(const td_trainer *t, const char *fn);
/* Output `index` (0 the loss, then the metrics) over the devices: the mean
 * weighted by the devices' shares of the batch. */
float td_trainer_combine_devices(const td_trainer *t, uint32_t index);
/* Every metric of the last step, combined likewise (n_metrics values). */
void td_trainer_fill_metrics(const td_trainer *t, float *values);
/* The staged copies -- the new parameters (pending) and every owner's new
 * optimizer state -- become current, and the current ones the next
 * step's scratch: a successful step's end, and a restore's. */
void td_trainer_swap_in_staged(td_trainer *t);
/* Where device `device`'s time went in the last step. */
void td_trainer_fill_timing(const td_trainer *t, uint32_t device, td_step_timing *timing);

#endif
