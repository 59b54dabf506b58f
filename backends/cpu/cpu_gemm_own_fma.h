/* tandem's own GEMM with fused multiply-adds (cpu_gemm_own_fma.c): the
 * CPU backend's fast engine outside deterministic mode, on CPUs with FMA. */
#ifndef TD_CPU_GEMM_OWN_FMA_H
#define TD_CPU_GEMM_OWN_FMA_H

#include <stdbool.h>

#include "td_kernel.h"

/* The code paths of the FMA GEMM. All of them give the same bits. */
typedef enum td_gemm_fma_isa {
    TD_GEMM_FMA_PORTABLE, /* C's fmaf, one element at a time: any CPU, slow without FMA hardware */
    TD_GEMM_FMA_AVX2,     /* x86-64 AVX2 + FMA: 6 x 16 micro-tiles on 256-bit vectors */
    TD_GEMM_FMA_AVX512,   /* x86-64 AVX-512F: 12 x 32 micro-tiles on 512-bit vectors */
} td_gemm_fma_isa;

/* The fastest path this CPU runs, chosen once from its feature flags
 * (never by timing: every device and process on the machine picks the
 * same, and every path gives the same bits anyway). */
td_gemm_fma_isa td_cpu_gemm_own_fma_best_isa(void);

/* Whether this CPU (and this build) can run `isa`. */
bool td_cpu_gemm_own_fma_isa_runs(td_gemm_fma_isa isa);

/* The path's name: "avx512", "avx2" or "portable". */
const char *td_cpu_gemm_own_fma_isa_name(td_gemm_fma_isa isa);

/* C = alpha op(A) op(B) + beta C (td_gemm_params, td_kernel.h), in one
 * thread, on the best path. Each element is
 *     acc = 0; for p = 0, 1, ..., k-1: acc = fma(opA[i,p], opB[p,j], acc)
 *     C[i,j] = alpha * acc  (+ beta * C[i,j], two more roundings)
 * so, as for td_cpu_gemm_own, any split of the rows or columns of C gives
 * the bits of one call, on every path and every CPU with an exact fma. */
void td_cpu_gemm_own_fma(const td_gemm_params *g, float *c, const float *a, const float *b);

/* The same on a given path; false (C untouched) when this CPU cannot run
 * it. Tests compare the paths bitwise this way. */
bool td_cpu_gemm_own_fma_on(td_gemm_fma_isa isa, const td_gemm_params *g, float *c, const float *a,
                            const float *b);

#endif
