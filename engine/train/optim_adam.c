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

#if defined(__x86_64__) && defined(__GNUC__)
#define ADAM_X86 1
#include <immintrin.h>
#else
#define ADAM_X86 0
#endif

static uint32_t adam_state_floats(const td_trainer_options *o)
{
    (void)o;
    return 2;
}

/* The update's constants for one call. */
typedef struct adam_constants {
    float b1, b2, one_minus_b1, one_minus_b2, bc1, bc2, eps, lr, weight_decay;
} adam_constants;

/* Elements [from, count): the rule, one element at a time. */
static void adam_elements(const td_optimizer_args *a, const adam_constants *k, size_t from)
{
    const float *m = a->state, *v = a->state + a->state_stride;
    float *m_next = a->next_state, *v_next = a->next_state + a->state_stride;
    for (size_t i = from; i < a->count; i++) {
        float g = a->grad[i];
        float mi = k->one_minus_b1 * g + k->b1 * m[i];
        float vi = k->one_minus_b2 * (g * g) + k->b2 * v[i];
        m_next[i] = mi;
        v_next[i] = vi;
        float u = (mi / k->bc1) / (sqrtf(vi / k->bc2) + k->eps);
        if (k->weight_decay != 0.0f)
            u = u + k->weight_decay * a->param[i];
        a->next[i] = a->param[i] - k->lr * u;
    }
}

#if ADAM_X86
/* Sixteen elements at a time, each lane the loop above's operations in
 * its order: multiplies and adds rounded apart (the project builds with
 * -ffp-contract=off, so nothing here becomes a fused multiply-add), and
 * division and square root correctly rounded in a vector as in a scalar
 * (IEEE 754), so the bits are the loop's. The scalar loop, with its two
 * divisions and a square root an element, was the MLP's whole update: 2.9
 * ms of a 6.3 ms step at batch 256 on cpu:1. Every element is loaded
 * before its results are stored, so `next` may be `param` itself. Returns
 * the elements done. */
__attribute__((target("avx512f"))) static size_t adam_avx512(const td_optimizer_args *a, const adam_constants *k)
{
    const float *m = a->state, *v = a->state + a->state_stride;
    float *m_next = a->next_state, *v_next = a->next_state + a->state_stride;
    const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2);
    const __m512 one_minus_b1 = _mm512_set1_ps(k->one_minus_b1), one_minus_b2 = _mm512_set1_ps(k->one_minus_b2);
    const __m512 bc1 = _mm512_set1_ps(k->bc1), bc2 = _mm512_set1_ps(k->bc2), eps = _mm512_set1_ps(k->eps);
    const __m512 lr = _mm512_set1_ps(k->lr), weight_decay = _mm512_set1_ps(k->weight_decay);
    const bool decay = k->weight_decay != 0.0f;
    size_t i = 0;
    for (; i + 16 <= a->count; i += 16) {
        const __m512 g = _mm512_loadu_ps(a->grad + i), p = _mm512_loadu_ps(a->param + i);
        const __m512 mi = _mm512_add_ps(_mm512_mul_ps(one_minus_b1, g), _mm512_mul_ps(b1, _mm512_loadu_ps(m + i)));
        const __m512 vi = _mm512_add_ps(_mm512_mul_ps(one_minus_b2, _mm512_mul_ps(g, g)),
                                        _mm512_mul_ps(b2, _mm512_loadu_ps(v + i)));
        __m512 u = _mm512_div_ps(_mm512_div_ps(mi, bc1), _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vi, bc2)), eps));
        if (decay)
            u = _mm512_add_ps(u, _mm512_mul_ps(weight_decay, p));
        _mm512_storeu_ps(m_next + i, mi);
        _mm512_storeu_ps(v_next + i, vi);
        _mm512_storeu_ps(a->next + i, _mm512_sub_ps(p, _mm512_mul_ps(lr, u)));
    }
    return i;
}

/* The same eight at a time, for CPUs with AVX but not AVX-512. */
__attribute__((target("avx"))) static size_t adam_avx(const td_optimizer_args *a, const adam_constants *k)
{
    const float *m = a->state, *v = a->state + a->state_stride;
    float *m_next = a->next_state, *v_next = a->next_state + a->state_stride;
    const __m256 b1 = _mm256_set1_ps(k->b1), b2 = _mm256_set1_ps(k->b2);
    const __m256 one_minus_b1 = _mm256_set1_ps(k->one_minus_b1), one_minus_b2 = _mm256_set1_ps(k->one_minus_b2);
    const __m256 bc1 = _mm256_set1_ps(k->bc1), bc2 = _mm256_set1_ps(k->bc2), eps = _mm256_set1_ps(k->eps);
    const __m256 lr = _mm256_set1_ps(k->lr), weight_decay = _mm256_set1_ps(k->weight_decay);
    const bool decay = k->weight_decay != 0.0f;
    size_t i = 0;
    for (; i + 8 <= a->count; i += 8) {
        const __m256 g = _mm256_loadu_ps(a->grad + i), p = _mm256_loadu_ps(a->param + i);
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(one_minus_b1, g), _mm256_mul_ps(b1, _mm256_loadu_ps(m + i)));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(one_minus_b2, _mm256_mul_ps(g, g)),
                                        _mm256_mul_ps(b2, _mm256_loadu_ps(v + i)));
        __m256 u = _mm256_div_ps(_mm256_div_ps(mi, bc1), _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, bc2)), eps));
        if (decay)
            u = _mm256_add_ps(u, _mm256_mul_ps(weight_decay, p));
        _mm256_storeu_ps(m_next + i, mi);
        _mm256_storeu_ps(v_next + i, vi);
        _mm256_storeu_ps(a->next + i, _mm256_sub_ps(p, _mm256_mul_ps(lr, u)));
    }
    return i;
}
#endif

static adam_constants constants_for(const td_optimizer_args *a, float weight_decay)
{
    const td_trainer_options *o = a->options;
    /* 1 - b^t in double, rounded once: in float, b2^t for b2 = 0.999 loses
     * most of its digits to the subtraction within the first steps, and the
     * bias correction multiplies that error into every update. b^t by
     * squaring (td_fixed_double.h), not the C library's pow, whose last
     * bit differs between machines. */
    return (adam_constants){
        .b1 = o->b1,
        .b2 = o->b2,
        .one_minus_b1 = 1.0f - o->b1,
        .one_minus_b2 = 1.0f - o->b2,
        .bc1 = (float)(1.0 - td_fixed_pow_whole((double)o->b1, a->count_inc)),
        .bc2 = (float)(1.0 - td_fixed_pow_whole((double)o->b2, a->count_inc)),
        .eps = o->eps,
        .lr = a->learning_rate,
        .weight_decay = weight_decay,
    };
}

/* Whether this CPU has the vectors of a loop `width` elements wide. */
static bool cpu_has_width(int width)
{
    switch (width) {
    case 1: return true;
#if ADAM_X86
    case 8: __builtin_cpu_init(); return __builtin_cpu_supports("avx");
    case 16: __builtin_cpu_init(); return __builtin_cpu_supports("avx512f");
#endif
    default: return false;
    }
}

/* The update `width` elements at a time (a width cpu_has_width), the
 * tail by the rule's own loop. */
static void adam_with(const td_optimizer_args *a, const adam_constants *k, int width)
{
    size_t done = 0;
#if ADAM_X86
    if (width == 16)
        done = adam_avx512(a, k);
    else if (width == 8)
        done = adam_avx(a, k);
#endif
    (void)width; /* only one loop without x86's vectors */
    adam_elements(a, k, done);
}

bool td_optimizer_adam_width(const td_optimizer_args *a, float weight_decay, int width)
{
    if (!cpu_has_width(width))
        return false;
    const adam_constants k = constants_for(a, weight_decay);
    adam_with(a, &k, width);
    return true;
}

static void adam_run(const td_optimizer_args *a, float weight_decay)
{
    const adam_constants k = constants_for(a, weight_decay);
    adam_with(a, &k, cpu_has_width(16) ? 16 : cpu_has_width(8) ? 8 : 1);
}

static void adam_update(const td_optimizer_args *a)
{
    adam_run(a, 0.0f);
}

static void adamw_update(const td_optimizer_args *a)
{
    adam_run(a, a->options->weight_decay);
}

const td_optimizer td_optimizer_adam = {"adam", adam_state_floats, adam_update, {"mu", "nu"}};
const td_optimizer td_optimizer_adamw = {"adamw", adam_state_floats, adamw_update, {"mu", "nu"}};
