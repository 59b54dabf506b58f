/* The GEMM contract (td_kernel.h) one element at a time: the operands
 * op(A)[i,p] and op(B)[p,j] where A and B lie, and C's final scaling. The
 * own GEMM, the FMA GEMM and the bf16 GEMM (cpu_gemm_own.c,
 * cpu_gemm_own_fma.c, cpu_gemm_bf16.c) all read operands and finish
 * outputs this way in their element-wise paths and edges; only the sum
 * between the two differs. Header-only, so the own GEMM still compiles
 * alone (tests/engine's ISA builds, scripts/check-aarch64-bits). */
#ifndef TD_CPU_GEMM_RULE_H
#define TD_CPU_GEMM_RULE_H

#include <stdint.h>

#include "td_kernel.h"

static inline float td_gemm_op_a(const td_gemm_params *g, const float *a, int64_t i, int64_t p)
{
    return g->trans_a ? a[p * g->lda + i] : a[i * g->lda + p];
}

static inline float td_gemm_op_b(const td_gemm_params *g, const float *b, int64_t p, int64_t j)
{
    return g->trans_b ? b[j * g->ldb + p] : b[p * g->ldb + j];
}

/* alpha * acc, or alpha * acc + beta * C[i,j] (two roundings, then the
 * add); beta == 0 does not read C, so a NaN left there does not spread. */
static inline float td_gemm_finish(const td_gemm_params *g, float acc, const float *c)
{
    return g->beta == 0.0f ? g->alpha * acc : g->alpha * acc + g->beta * *c;
}

#endif
