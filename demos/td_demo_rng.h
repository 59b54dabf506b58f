/* A small deterministic generator for the demos and benches (splitmix64 +
 * Box-Muller), so results are the same on every machine and run. */
#ifndef TD_DEMO_RNG_H
#define TD_DEMO_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct td_demo_rng {
    uint64_t state;
} td_demo_rng;

static inline uint64_t td_demo_rng_next(td_demo_rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double td_demo_rng_uniform(td_demo_rng *r)
{
    return ((double)(td_demo_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline float td_demo_rng_normal(td_demo_rng *r)
{
    double u = td_demo_rng_uniform(r), v = td_demo_rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif
