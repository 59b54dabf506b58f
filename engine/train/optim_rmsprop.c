/* optax.rmsprop (scale_by_rms, then an optional momentum trace):
 *   v' = (1 - decay) g^2 + decay v,   u = g / sqrt(v' + eps),
 *   with momentum u = trace(u),       p' = p - lr * u.
 * optax multiplies by rsqrt(v' + eps); a correctly rounded divide by the
 * square root is the same value up to rounding and is the same on every
 * machine, which an approximate rsqrt is not. */
#include <math.h>

#include "td_optimizer.h"

static uint32_t rmsprop_state_floats(const td_trainer_options *o)
{
    return o->momentum > 0.0f ? 2 : 1;
}

static void rmsprop_update(const td_optimizer_args *a)
{
    const td_trainer_options *o = a->options;
    const float decay = o->decay, one_minus_decay = 1.0f - decay, eps = o->eps, lr = a->learning_rate;
    const float momentum = o->momentum;
    const int with_momentum = momentum > 0.0f, nesterov = o->nesterov;
    const float *v = a->state, *trace = a->state + a->state_stride;
    float *v_next = a->next_state, *trace_next = a->next_state + a->state_stride;
    for (size_t i = 0; i < a->count; i++) {
        float g = a->grad[i];
        float vi = one_minus_decay * (g * g) + decay * v[i];
        v_next[i] = vi;
        float u = g / sqrtf(vi + eps);
        if (with_momentum)
            u = td_optimizer_trace(u, trace[i], momentum, nesterov, &trace_next[i]);
        a->next[i] = a->param[i] - lr * u;
    }
}

const td_optimizer td_optimizer_rmsprop = {"rmsprop", rmsprop_state_floats, rmsprop_update, {"nu", "trace"}};
