/* tandem — parameter initializers.
 *
 * A td_initializer says how a parameter's first values are drawn. The
 * semantics are those of jax.nn.initializers (and so of flax's defaults):
 * variance_scaling(scale, mode, distribution) draws with variance
 * scale / fan, where for a shape [..receptive.., in, out] fan_in is
 * in * prod(receptive) and fan_out is out * prod(receptive) (a rank-1 shape
 * has fan_in = fan_out = dims[0], a scalar 1); glorot, he and lecun are
 * variance_scaling with fixed arguments.
 *
 * The values are a pure function of (seed, the parameter's name, the
 * element's index): element i of parameter "dense/kernel" draws from a
 * counter-based stream keyed by `seed` and counted by the name's hash and
 * i. They are computed once on the host when the graph is compiled, so they
 * are the same on any mesh and any backend and do not depend on the order
 * parameters were created or on the other parameters of the graph. */
#ifndef TANDEM_INIT_H
#define TANDEM_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "tandem/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef enum td_init_kind {
    TD_INIT_ZEROS = 0,
    TD_INIT_ONES = 1,
    TD_INIT_CONSTANT = 2,         /* value */
    TD_INIT_NORMAL = 3,           /* stddev * N(0, 1) */
    TD_INIT_UNIFORM = 4,          /* uniform in [a, b) */
    TD_INIT_TRUNCATED_NORMAL = 5, /* stddev * N(0, 1) conditioned on (-2, 2) */
    TD_INIT_VARIANCE_SCALING = 6, /* scale, mode, distribution */
} td_init_kind;

/* Since 0.1. */
typedef enum td_fan_mode {
    TD_FAN_IN = 0,
    TD_FAN_OUT = 1,
    TD_FAN_AVG = 2, /* (fan_in + fan_out) / 2 */
} td_fan_mode;

/* Since 0.1. */
typedef enum td_init_distribution {
    /* N(0, 1) truncated to (-2, 2), rescaled by 1 / 0.87962566103423978 so
     * the variance is still scale / fan, as jax does. */
    TD_DIST_TRUNCATED_NORMAL = 0,
    TD_DIST_NORMAL = 1,
    TD_DIST_UNIFORM = 2, /* in [-limit, limit), limit = sqrt(3 * scale / fan) */
} td_init_distribution;

/* Fill it with the td_initializer_* functions below (each sets
 * struct_size), or by hand from `{.struct_size = sizeof(td_initializer)}`;
 * only the fields of its kind are read.
 * Since 0.1. */
typedef struct td_initializer {
    size_t struct_size; /* sizeof(td_initializer): growth-safe, see tandem/export.h */
    td_init_kind kind;
    uint64_t seed;
    float value;  /* CONSTANT */
    float stddev; /* NORMAL, TRUNCATED_NORMAL: >= 0 */
    float a, b;   /* UNIFORM: a <= b */
    float scale;  /* VARIANCE_SCALING: > 0 */
    td_fan_mode mode;
    td_init_distribution distribution;
} td_initializer;

/* All zeros: what td_graph_param gives. These constructors only fill *out
 * (they return TD_ERR_INVALID_ARGUMENT when out is NULL); the values are
 * checked, with a message naming the bad one, by td_graph_param_init.
 * Since 0.1. */
TD_API td_status td_initializer_zeros(td_initializer *out);

/* All ones.
 * Since 0.1. */
TD_API td_status td_initializer_ones(td_initializer *out);

/* Every element `value` (finite).
 * Since 0.1. */
TD_API td_status td_initializer_constant(float value, td_initializer *out);

/* stddev * N(0, 1), as jax.nn.initializers.normal(stddev).
 * Since 0.1. */
TD_API td_status td_initializer_normal(float stddev, uint64_t seed, td_initializer *out);

/* Uniform in [a, b); jax.nn.initializers.uniform(scale) is a = 0, b = scale.
 * Since 0.1. */
TD_API td_status td_initializer_uniform(float a, float b, uint64_t seed, td_initializer *out);

/* stddev * a standard normal truncated to (-2, 2), as
 * jax.nn.initializers.truncated_normal(stddev): the values' standard
 * deviation is about 0.88 * stddev and no value reaches 2 * stddev.
 * Since 0.1. */
TD_API td_status td_initializer_truncated_normal(float stddev, uint64_t seed, td_initializer *out);

/* jax.nn.initializers.variance_scaling(scale, mode, distribution).
 * Since 0.1. */
TD_API td_status td_initializer_variance_scaling(float scale, td_fan_mode mode, td_init_distribution distribution,
                                                 uint64_t seed, td_initializer *out);

/* Glorot (Xavier) uniform: variance_scaling(1, fan_avg, uniform).
 * Since 0.1. */
TD_API td_status td_initializer_glorot_uniform(uint64_t seed, td_initializer *out);

/* Glorot (Xavier) normal: variance_scaling(1, fan_avg, truncated_normal).
 * Since 0.1. */
TD_API td_status td_initializer_glorot_normal(uint64_t seed, td_initializer *out);

/* He (Kaiming) normal: variance_scaling(2, fan_in, truncated_normal).
 * Since 0.1. */
TD_API td_status td_initializer_he_normal(uint64_t seed, td_initializer *out);

/* He (Kaiming) uniform: variance_scaling(2, fan_in, uniform).
 * Since 0.1. */
TD_API td_status td_initializer_he_uniform(uint64_t seed, td_initializer *out);

/* LeCun normal: variance_scaling(1, fan_in, truncated_normal); flax's
 * default kernel initializer.
 * Since 0.1. */
TD_API td_status td_initializer_lecun_normal(uint64_t seed, td_initializer *out);

/* LeCun uniform: variance_scaling(1, fan_in, uniform).
 * Since 0.1. */
TD_API td_status td_initializer_lecun_uniform(uint64_t seed, td_initializer *out);

#ifdef __cplusplus
}
#endif
#endif
