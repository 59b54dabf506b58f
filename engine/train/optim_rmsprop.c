/* optax.rmsprop (scale_by_rms, then an optional momentum trace):
 *   v' = (1 - decay) g^2 + decay v,   u = g / sqrt(v' + eps),
 *   with momentum u = trace(u),       p' = p - lr * u.
 * optax multiplies by rsqrt(v' + eps); a correctly rounded divide by the
 * square root is the same value up to rounding and is the same on every
 * machine, which an approximate rsqrt is not. */
#include <math.h>
#include <stdbool.h>

#include "td_optimizer.h"
#include "td_platform.h"

static uint32_t rmsprop_state_floats(const td_trainer_options *o)
{
    return o->momentum > 0.0f ? 2 : 1;
}

/* The rule's loop, in copies for AVX-512 and AVX2 chosen at load time
 * (TD_SIMD_CLONES). Each lane does one element's operations in the
 * rule's order, multiplies and adds rounded apart (-ffp-contract=off),
 * and the divide and the square root are correctly rounded in a vector
 * as in a scalar (the project builds with -fno-math-errno, so sqrtf is
 * the instruction, with no errno branch to keep the loop scalar): every
 * copy gives the bits of the scalar rule. ivdep: `next` may be `param`
 * and `next_state` `state`, element for element (each element is read
 * before it is written), which a run-time alias check would take for an
 * overlap and send to the scalar loop. */
TD_SIMD_CLONES static void rmsprop_elements(const td_optimizer_args *a)
{
    const td_trainer_options *o = a->options;
    const float decay = o->decay, one_minus_decay = 1.0f - decay, eps = o->eps, lr = a->learning_rate;
    const float momentum = o->momentum;
    const int nesterov = o->nesterov;
    const float *grad = a->grad, *param = a->param, *v = a->state, *trace = a->state + a->state_stride;
    float *next = a->next, *v_next = a->next_state, *trace_next = a->next_state + a->state_stride;
    const size_t count = a->count;
    const bool traced = momentum > 0.0f;
    TD_IVDEP
    for (size_t i = 0; i < count; i++) {
        const float g = grad[i];
        const float vi = one_minus_decay * (g * g) + decay * v[i];
        v_next[i] = vi;
        float u = g / sqrtf(vi + eps);
        if (traced)
            u = td_optimizer_trace(u, trace[i], momentum, nesterov, &trace_next[i]);
        next[i] = param[i] - lr * u;
    }
}

static void rmsprop_update(const td_optimizer_args *a)
{
    rmsprop_elements(a);
}

const td_optimizer td_optimizer_rmsprop = {"rmsprop", rmsprop_state_floats, rmsprop_update, {"nu", "trace"}};
