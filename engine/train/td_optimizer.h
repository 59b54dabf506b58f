/* The trainer's optimizers behind one small interface. The trainer calls
 * `update` on contiguous runs of trainable parameters inside the chunk a
 * ring rank owns, right after that chunk's gradient is reduced; each
 * optimizer keeps `state_floats` floats of state per parameter, stored as
 * that many arrays `state_stride` floats apart. Updates read the current
 * state and write the next into a separate copy, so a step that fails
 * elsewhere leaves the state as it was. Everything is plain sequential
 * host code: the same inputs give bitwise the same outputs. */
#ifndef TD_OPTIMIZER_H
#define TD_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/train.h"

typedef struct td_optimizer_args {
    const td_trainer_options *options;
    size_t count;
    const float *grad;  /* the mean gradient, clipped when clipping is on */
    const float *param; /* the parameters before the step */
    float *next;        /* receives the parameters after the step */
    const float *state; /* state_floats arrays, state_stride apart */
    float *next_state;  /* the same layout, receives the new state */
    size_t state_stride;
    float learning_rate; /* the schedule's value at this step */
    uint64_t count_inc;  /* 1 on the first step: optax's count after its increment */
} td_optimizer_args;

/* An optimizer never keeps more than this many state floats per parameter. */
#define TD_OPTIMIZER_MAX_SLOTS 2

typedef struct td_optimizer {
    const char *name;
    uint32_t (*state_floats)(const td_trainer_options *options);
    void (*update)(const td_optimizer_args *args);
    /* The state arrays' names, as optax calls them, in storage order (the
     * first state_floats are used): checkpoints key the state on them. */
    const char *slot_names[TD_OPTIMIZER_MAX_SLOTS];
} td_optimizer;

extern const td_optimizer td_optimizer_sgd;
extern const td_optimizer td_optimizer_adam;
extern const td_optimizer td_optimizer_adamw;
extern const td_optimizer td_optimizer_rmsprop;

/* The momentum trace optax's sgd and rmsprop share (optax.trace): stores
 * t' = u + momentum * t and returns the update, t', or u + momentum * t'
 * with nesterov. */
static inline float td_optimizer_trace(float u, float trace, float momentum, int nesterov, float *next_trace)
{
    float t = u + momentum * trace;
    *next_trace = t;
    return nesterov ? u + momentum * t : t;
}

#endif
