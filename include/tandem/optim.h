/* tandem — optimizers and learning-rate schedules for the trainer.
 *
 * The semantics are optax's: td_optimizer_kind names optax.sgd, adam, adamw
 * and rmsprop with the same hyper-parameters and defaults, td_schedule names
 * optax.constant_schedule, exponential_decay, cosine_decay_schedule and
 * warmup_cosine_decay_schedule with the same formulas. The hyper-parameters
 * themselves live in td_trainer_options (tandem/train.h). */
#ifndef TANDEM_OPTIM_H
#define TANDEM_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem/context.h"
#include "tandem/export.h"
#include "tandem/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef enum td_optimizer_kind {
    TD_OPTIMIZER_SGD = 0,  /* optax.sgd: momentum (0 = none), nesterov */
    TD_OPTIMIZER_ADAM = 1, /* optax.adam: b1, b2, eps */
    TD_OPTIMIZER_ADAMW = 2, /* optax.adamw: adam plus decoupled weight_decay */
    TD_OPTIMIZER_RMSPROP = 3, /* optax.rmsprop: decay, eps, momentum (0 = none), nesterov */
} td_optimizer_kind;

/* The learning rate an optimizer starts from when the caller names none
 * (td_trainer_options.learning_rate 0): SGD 0.01 (with or without
 * momentum); ADAM, ADAMW and RMSPROP 1e-3, the rate optax's examples use
 * for them. 0 for a value that is no td_optimizer_kind.
 * Since 0.1. */
TD_API float td_optimizer_default_learning_rate(td_optimizer_kind kind);

/* Since 0.1. */
typedef enum td_schedule_kind {
    TD_SCHEDULE_CONSTANT = 0,          /* init_value at every step */
    TD_SCHEDULE_EXPONENTIAL_DECAY = 1, /* optax.exponential_decay */
    TD_SCHEDULE_COSINE_DECAY = 2,      /* optax.cosine_decay_schedule */
    TD_SCHEDULE_WARMUP_COSINE_DECAY = 3, /* optax.warmup_cosine_decay_schedule */
} td_schedule_kind;

/* A learning rate as a function of the step count (the number of updates
 * already applied, 0 for the first step). Fields a kind does not name are
 * ignored.
 *   CONSTANT:            init_value.
 *   EXPONENTIAL_DECAY:   init_value * decay_rate^(max(step - transition_begin, 0) / transition_steps),
 *                        the exponent floored when staircase (step decay);
 *                        clipped at end_value when has_end_value (from
 *                        below when decay_rate < 1, from above otherwise).
 *   COSINE_DECAY:        init_value * ((1 - alpha) * c + alpha), with
 *                        c = (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2.
 *   WARMUP_COSINE_DECAY: linear from init_value to peak_value over
 *                        warmup_steps, then cosine decay from peak_value to
 *                        end_value over the remaining decay_steps - warmup_steps
 *                        (decay_steps counts the warm-up, as in optax).
 * Since 0.1. */
typedef struct td_schedule {
    td_schedule_kind kind;
    float init_value;
    float peak_value;
    float end_value;
    bool has_end_value; /* EXPONENTIAL_DECAY only; WARMUP_COSINE_DECAY always uses end_value */
    float decay_rate;
    uint64_t transition_steps;
    uint64_t transition_begin;
    bool staircase;
    uint64_t decay_steps;
    uint64_t warmup_steps;
    float alpha;
} td_schedule;

/* Evaluates `schedule` at `step` into *lr, in double precision rounded once
 * to float (one scalar per step, so exactness is free). The schedule is
 * validated first: a non-finite or negative value, a decay rate <= 0, an
 * alpha outside [0, 1], zero transition or decay steps, or decay_steps not
 * above warmup_steps give TD_ERR_INVALID_ARGUMENT with a message in `ctx`
 * (which may be NULL when no message is wanted) naming the field; so does
 * a value that overflows float at `step` (decay_rate > 1 grows without
 * bound unless has_end_value caps it).
 * Since 0.1. */
TD_API td_status td_schedule_value(td_context *ctx, const td_schedule *schedule, uint64_t step, float *lr);

/* The named schedules a training run over `updates` updates picks from
 * (the demos' and `tandem train`'s --schedule), peaking at `peak`:
 *   "constant"       peak at every step;
 *   "cosine"         cosine decay from peak to 0 over the run;
 *   "warmup-cosine"  linear from 0 to peak over the first tenth of the run
 *                    (at least one update), then cosine decay to 0.
 * Another name is TD_ERR_INVALID_ARGUMENT naming it and the choices (in
 * `ctx`, which may be NULL). updates 0 is taken as 1.
 * Since 0.1. */
TD_API td_status td_schedule_for_run(td_context *ctx, const char *name, float peak, uint64_t updates,
                                     td_schedule *schedule);

#ifdef __cplusplus
}
#endif
#endif
