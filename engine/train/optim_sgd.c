/* optax.sgd: p' = p - lr * g, or with momentum p' = p - lr * trace(g).
 * Without momentum there is no state and the arithmetic is exactly the
 * trainer's original SGD, bit for bit. */
#include "td_optimizer.h"

static uint32_t sgd_state_floats(const td_trainer_options *o)
{
    return o->momentum > 0.0f ? 1 : 0;
}

static void sgd_update(const td_optimizer_args *a)
{
    const float lr = a->learning_rate;
    if (!(a->options->momentum > 0.0f)) {
        for (size_t i = 0; i < a->count; i++)
            a->next[i] = a->param[i] - lr * a->grad[i];
        return;
    }
    const float momentum = a->options->momentum;
    const int nesterov = a->options->nesterov;
    for (size_t i = 0; i < a->count; i++) {
        float u = td_optimizer_trace(a->grad[i], a->state[i], momentum, nesterov, &a->next_state[i]);
        a->next[i] = a->param[i] - lr * u;
    }
}

const td_optimizer td_optimizer_sgd = {"sgd", sgd_state_floats, sgd_update, {"trace", NULL}};
