/* Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11).
 *
 * A counter-based generator is a pure function of (key, counter): the value
 * for example 17 of step 3 is the same whether it is computed first or last,
 * on one device or on the fourth of eight. That is what lets tandem promise
 * the same initial parameters, the same data order and the same dropout mask
 * on any mesh: nothing depends on how many draws happened before.
 *
 * Only 32-bit integer arithmetic is used (a 32x32->64 multiply split into
 * high and low halves), so device kernels (OpenCL C, GLSL with
 * umulExtended) can compute bitwise the same stream. */
#ifndef TD_RANDOM_H
#define TD_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* One Philox4x32-10 block: 4 random words for (counter, key). */
void td_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* A sequential view of the counter space: counter = (block, c1, c2, c3),
 * where `block` advances by one every 4 words. Two streams with different
 * (key, c1, c2, c3) never share a word. */
typedef struct td_random_stream {
    uint32_t key[2];
    uint32_t counter[4];
    uint32_t words[4];
    uint32_t used; /* words of `words` already handed out (4 = none left) */
} td_random_stream;

/* A stream for `seed` (both key words) and the three counter words that
 * name its purpose (for instance a parameter's name hash and an epoch). */
void td_random_stream_init(td_random_stream *s, uint64_t seed, uint32_t c1, uint32_t c2, uint32_t c3);

uint32_t td_random_u32(td_random_stream *s);

/* Uniform in [0, 1) with 24 random bits: exactly representable, never 1. */
float td_random_uniform(td_random_stream *s);

/* Uniform integer in [0, bound) without modulo bias (bound > 0), by
 * rejection on the top of the 32-bit range. */
uint32_t td_random_below(td_random_stream *s, uint32_t bound);

/* The same for a 64-bit bound (bound > 0): each candidate is two words, the
 * first the high half, rejected at or above the largest multiple of bound
 * below 2^64. For positions in data larger than 2^32 elements. */
uint64_t td_random_below_u64(td_random_stream *s, uint64_t bound);

/* Standard normal by Box-Muller on two uniforms, in double precision and
 * then rounded, so host results are the same with any libm rounding of
 * the float functions. */
float td_random_normal(td_random_stream *s);

/* 32-bit FNV-1a of a string: a stable counter word for a name. */
uint32_t td_random_name_hash(const char *name);

#endif
