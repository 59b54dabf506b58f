/* The CPU backend's bf16 GEMM (cpu_gemm_bf16.c): td_gemm_params.precision
 * == TD_GEMM_BF16, inputs rounded to bfloat16 (td_bf16_round), products
 * summed in float. Two kernels compute it: one on AVX512_BF16's dot
 * products where the CPU has them, and a portable one (rounded float
 * copies through the own GEMM, cpu_gemm_own.c) everywhere else and in
 * deterministic mode. */
#ifndef TD_CPU_GEMM_BF16_H
#define TD_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "td_kernel.h"

typedef enum td_cpu_bf16_kernel {
    /* AVX512_BF16 when this CPU and this build have it, else portable. */
    TD_CPU_BF16_FASTEST,
    /* The own GEMM's rule on rounded inputs: every element is
     *     acc = 0; for p = 0..k-1: acc = acc + r(opA[i,p]) * r(opB[p,j])
     * (r = td_bf16_round, each operation rounded apart), then alpha and
     * beta as the fp32 GEMM: the same bits on every machine. */
    TD_CPU_BF16_PORTABLE,
} td_cpu_bf16_kernel;

/* Whether TD_CPU_BF16_FASTEST runs the AVX512_BF16 kernel here. */
bool td_cpu_gemm_bf16_native(void);

/* C = alpha op(A) op(B) + beta C in bf16 (td_kernel.h) in tiles of rows
 * of C (td_cpu_gemm_tile_rows), reading *cancel (atomically; NULL: never
 * cancelled) before each and returning false, C partly written, once it is
 * set. Either kernel sums each element over k in one fixed order whatever
 * rows of C the call covers, so any split of the rows (tiles, the host
 * pool's parts) gives the bits of one call. */
bool td_cpu_gemm_bf16(const td_gemm_params *g, float *c, const float *a, const float *b, td_cpu_bf16_kernel kernel,
                      const bool *cancel);

/* The portable rule one element at a time, unpacked: the fallback when
 * the portable kernel's scratch cannot be allocated, and what tests
 * compare it with, bitwise. */
void td_cpu_gemm_bf16_unpacked(const td_gemm_params *g, float *c, const float *a, const float *b);

#endif
