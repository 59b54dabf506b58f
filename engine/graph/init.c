/* Parameter initializers: jax.nn.initializers' distributions drawn from
 * per-element Philox streams. Each element gets its own stream, counted by
 * (name hash, element index), so an element's value never depends on how
 * many draws the elements before it needed (the truncated normal rejects a
 * variable number) nor on any other parameter. */
#include <math.h>
#include <string.h>

#include "td_init_internal.h"
#include "td_random.h"

/* The standard deviation of N(0, 1) truncated to (-2, 2); jax divides by it
 * so a truncated variance_scaling keeps the variance scale / fan. */
#define TRUNCATED_STDDEV 0.87962566103423978

/* Rejection needs fewer than two draws on average (95.4% accepted). The cap
 * only guarantees termination: 64 rejections in a row has probability
 * 0.0455^64, so the fallback value is never reached in practice. */
#define TRUNCATED_MAX_DRAWS 64

static td_status set(td_initializer *out, td_init_kind kind, uint64_t seed)
{
    if (!out)
        return TD_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->kind = kind;
    out->seed = seed;
    return TD_OK;
}

td_status td_initializer_zeros(td_initializer *out)
{
    return set(out, TD_INIT_ZEROS, 0);
}

td_status td_initializer_ones(td_initializer *out)
{
    return set(out, TD_INIT_ONES, 0);
}

td_status td_initializer_constant(float value, td_initializer *out)
{
    td_status s = set(out, TD_INIT_CONSTANT, 0);
    if (s == TD_OK)
        out->value = value;
    return s;
}

td_status td_initializer_normal(float stddev, uint64_t seed, td_initializer *out)
{
    td_status s = set(out, TD_INIT_NORMAL, seed);
    if (s == TD_OK)
        out->stddev = stddev;
    return s;
}

td_status td_initializer_uniform(float a, float b, uint64_t seed, td_initializer *out)
{
    td_status s = set(out, TD_INIT_UNIFORM, seed);
    if (s == TD_OK) {
        out->a = a;
        out->b = b;
    }
    return s;
}

td_status td_initializer_truncated_normal(float stddev, uint64_t seed, td_initializer *out)
{
    td_status s = set(out, TD_INIT_TRUNCATED_NORMAL, seed);
    if (s == TD_OK)
        out->stddev = stddev;
    return s;
}

td_status td_initializer_variance_scaling(float scale, td_fan_mode mode, td_init_distribution distribution,
                                          uint64_t seed, td_initializer *out)
{
    td_status s = set(out, TD_INIT_VARIANCE_SCALING, seed);
    if (s == TD_OK) {
        out->scale = scale;
        out->mode = mode;
        out->distribution = distribution;
    }
    return s;
}

td_status td_initializer_glorot_uniform(uint64_t seed, td_initializer *out)
{
    return td_initializer_variance_scaling(1.0f, TD_FAN_AVG, TD_DIST_UNIFORM, seed, out);
}

td_status td_initializer_glorot_normal(uint64_t seed, td_initializer *out)
{
    return td_initializer_variance_scaling(1.0f, TD_FAN_AVG, TD_DIST_TRUNCATED_NORMAL, seed, out);
}

td_status td_initializer_he_normal(uint64_t seed, td_initializer *out)
{
    return td_initializer_variance_scaling(2.0f, TD_FAN_IN, TD_DIST_TRUNCATED_NORMAL, seed, out);
}

td_status td_initializer_he_uniform(uint64_t seed, td_initializer *out)
{
    return td_initializer_variance_scaling(2.0f, TD_FAN_IN, TD_DIST_UNIFORM, seed, out);
}

td_status td_initializer_lecun_normal(uint64_t seed, td_initializer *out)
{
    return td_initializer_variance_scaling(1.0f, TD_FAN_IN, TD_DIST_TRUNCATED_NORMAL, seed, out);
}

td_status td_initializer_lecun_uniform(uint64_t seed, td_initializer *out)
{
    return td_initializer_variance_scaling(1.0f, TD_FAN_IN, TD_DIST_UNIFORM, seed, out);
}

void td_init_fans(uint32_t rank, const int64_t *dims, double *fan_in, double *fan_out)
{
    if (rank == 0) {
        *fan_in = *fan_out = 1.0;
        return;
    }
    if (rank == 1) {
        *fan_in = *fan_out = (double)dims[0];
        return;
    }
    double receptive = 1.0;
    for (uint32_t i = 0; i + 2 < rank; i++)
        receptive *= (double)dims[i];
    *fan_in = (double)dims[rank - 2] * receptive;
    *fan_out = (double)dims[rank - 1] * receptive;
}

td_status td_init_check(td_context *ctx, const td_initializer *init, const char *fn, const char *name)
{
    if (!init)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter '%s': the initializer is NULL", fn, name);
    switch (init->kind) {
    case TD_INIT_ZEROS:
    case TD_INIT_ONES:
        return TD_OK;
    case TD_INIT_CONSTANT:
        if (!isfinite(init->value))
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter '%s': constant value %g, expected a finite value",
                                fn, name, (double)init->value);
        return TD_OK;
    case TD_INIT_NORMAL:
    case TD_INIT_TRUNCATED_NORMAL:
        if (!isfinite(init->stddev) || init->stddev < 0.0f)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter '%s': stddev %g, expected finite and >= 0", fn,
                                name, (double)init->stddev);
        return TD_OK;
    case TD_INIT_UNIFORM:
        if (!isfinite(init->a) || !isfinite(init->b) || init->a > init->b)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: parameter '%s': uniform bounds [%g, %g), expected finite bounds with a <= b", fn,
                                name, (double)init->a, (double)init->b);
        return TD_OK;
    case TD_INIT_VARIANCE_SCALING:
        if (!isfinite(init->scale) || !(init->scale > 0.0f))
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter '%s': scale %g, expected finite and > 0", fn,
                                name, (double)init->scale);
        if ((unsigned)init->mode > TD_FAN_AVG)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter '%s': mode %d is not a td_fan_mode", fn, name,
                                (int)init->mode);
        if ((unsigned)init->distribution > TD_DIST_UNIFORM)
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "%s: parameter '%s': distribution %d is not a td_init_distribution", fn, name,
                                (int)init->distribution);
        return TD_OK;
    }
    return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: parameter '%s': initializer kind %d is not a td_init_kind", fn,
                        name, (int)init->kind);
}

static float truncated_normal(td_random_stream *s)
{
    for (int i = 0; i < TRUNCATED_MAX_DRAWS; i++) {
        float z = td_random_normal(s);
        if (z > -2.0f && z < 2.0f)
            return z;
    }
    return 0.0f;
}

/* Uniform in [lo, hi): computed in double and rounded, then kept below hi
 * when the rounding reached it. */
static float uniform_between(td_random_stream *s, float lo, float hi)
{
    double u = (double)td_random_uniform(s);
    float v = (float)((double)lo + ((double)hi - (double)lo) * u);
    if (v >= hi && lo < hi)
        v = nextafterf(hi, lo);
    return v;
}

void td_init_fill(const td_initializer *init, const char *name, uint32_t rank, const int64_t *dims, float *out)
{
    uint64_t count = 1;
    for (uint32_t i = 0; i < rank; i++)
        count *= (uint64_t)dims[i];
    if (init->kind == TD_INIT_ZEROS || init->kind == TD_INIT_ONES || init->kind == TD_INIT_CONSTANT) {
        float v = init->kind == TD_INIT_ZEROS ? 0.0f : init->kind == TD_INIT_ONES ? 1.0f : init->value;
        for (uint64_t i = 0; i < count; i++)
            out[i] = v;
        return;
    }
    /* Variance scaling reduces to one of the three base draws with a
     * standard deviation (or limit) computed once, in double. */
    td_init_kind base = init->kind;
    float stddev = init->stddev, lo = init->a, hi = init->b;
    if (init->kind == TD_INIT_VARIANCE_SCALING) {
        double fan_in, fan_out;
        td_init_fans(rank, dims, &fan_in, &fan_out);
        double fan = init->mode == TD_FAN_IN ? fan_in : init->mode == TD_FAN_OUT ? fan_out : (fan_in + fan_out) / 2.0;
        double variance = (double)init->scale / (fan > 0.0 ? fan : 1.0);
        if (init->distribution == TD_DIST_TRUNCATED_NORMAL) {
            base = TD_INIT_TRUNCATED_NORMAL;
            stddev = (float)(sqrt(variance) / TRUNCATED_STDDEV);
        } else if (init->distribution == TD_DIST_NORMAL) {
            base = TD_INIT_NORMAL;
            stddev = (float)sqrt(variance);
        } else {
            base = TD_INIT_UNIFORM;
            hi = (float)sqrt(3.0 * variance);
            lo = -hi;
        }
    }
    uint32_t hash = td_random_name_hash(name);
    for (uint64_t i = 0; i < count; i++) {
        td_random_stream s;
        td_random_stream_init(&s, init->seed, hash, (uint32_t)i, (uint32_t)(i >> 32));
        if (base == TD_INIT_NORMAL)
            out[i] = stddev * td_random_normal(&s);
        else if (base == TD_INIT_TRUNCATED_NORMAL)
            out[i] = stddev * truncated_normal(&s);
        else
            out[i] = uniform_between(&s, lo, hi);
    }
}
