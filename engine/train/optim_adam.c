/* optax.adam and optax.adamw (scale_by_adam, add_decayed_weights, then
 * the learning rate):
 *   m' = (1 - b1) g + b1 m          v' = (1 - b2) g^2 + b2 v
 *   u  = (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) + eps)
 *   adamw: u += weight_decay * p    p' = p - lr * u
 * with t the step count after its increment (1 on the first step). */
#include <math.h>
#include <stdbool.h>

#include "td_fixed_double.h"
#include "td_optimizer.h"
#include "td_platform.h"

static uint32_t adam_state_floats(const td_trainer_options *o)
{
    (void)o;
    return 2;
}

/* The rule's loop, in copies for AVX-512 and AVX2 chosen at load time
 * (TD_SIMD_CLONES), as RMSProp's (optim_rmsprop.c says why every copy
 * gives the scalar rule's bits and why TD_IVDEP). Scalar, with its two
 * divisions and a square root an element, it was the MLP's whole update:
 * 2.9 ms of a 6.3 ms step at batch 256 on cpu:1; in vectors it runs at
 * the speed of its seven streams through memory. bc1 and bc2 are
 * 1 - b^t in double, rounded once: in float, b2^t for b2 = 0.999 loses
 * most of its digits to the subtraction within the first steps, and the
 * bias correction multiplies that error into every update. b^t by
 * squaring (td_fixed_double.h), not the C library's pow, whose last bit
 * differs between machines. */
TD_SIMD_CLONES static void adam_elements(const td_optimizer_args *a, float weight_decay)
{
    const td_trainer_options *o = a->options;
    const float b1 = o->b1, b2 = o->b2, one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2, eps = o->eps;
    const float bc1 = (float)(1.0 - td_fixed_pow_whole((double)b1, a->count_inc));
    const float bc2 = (float)(1.0 - td_fixed_pow_whole((double)b2, a->count_inc));
    const float lr = a->learning_rate;
    const float *grad = a->grad, *param = a->param, *m = a->state, *v = a->state + a->state_stride;
    float *next = a->next, *m_next = a->next_state, *v_next = a->next_state + a->state_stride;
    const size_t count = a->count;
    const bool decayed = weight_decay != 0.0f; /* not u + 0 * p: an infinite p would make it NaN */
    TD_IVDEP
    for (size_t i = 0; i < count; i++) {
        const float g = grad[i], p = param[i];
        const float mi = one_minus_b1 * g + b1 * m[i];
        const float vi = one_minus_b2 * (g * g) + b2 * v[i];
        m_next[i] = mi;
        v_next[i] = vi;
        float u = (mi / bc1) / (sqrtf(vi / bc2) + eps);
        if (decayed)
            u = u + weight_decay * p;
        next[i] = p - lr * u;
    }
}

static void adam_update(const td_optimizer_args *a)
{
    adam_elements(a, 0.0f);
}

static void adamw_update(const td_optimizer_args *a)
{
    adam_elements(a, a->options->weight_decay);
}

const td_optimizer td_optimizer_adam = {"adam", adam_state_floats, adam_update, {"mu", "nu"}};
const td_optimizer td_optimizer_adamw = {"adamw", adam_state_floats, adamw_update, {"mu", "nu"}};
