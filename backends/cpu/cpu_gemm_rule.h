/* The GEMM contract (td_kernel.h) one element at a time: the operands
 * op(A)[i,p] and op(B)[p,j] where A and B lie, and C's final scaling. The
 * own GEMM, the FMA GEMM and the bf16 GEMM (cpu_gemm_own.c,
 * cpu_gemm_own_fma.c, cpu_gemm_bf16.c) all read operands and finish
 * outputs this way in their element-wise paths and edges; only the sum
 * between the two differs. Header-only, so the own GEMM still compiles
 * alone (tests/engine's ISA builds, scripts/check-aarch64-bits). */
#ifndef TD_CPU_GEMM_RULE_H
#define TD_CPU_GEMM_RULE_H

#include <stdbool.h>
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

/* A matrix-vector product: C of one row or one column, at most max_macs
 * multiply-adds. The own and FMA GEMMs run these without their blocks,
 * whose padding was the whole cost there (cpu_gemm_own.c,
 * cpu_gemm_own_fma.c), a few elements of C's row or column at a time. */
static inline bool td_gemm_is_vector(const td_gemm_params *g, int64_t max_macs)
{
    return (g->m == 1 || g->n == 1) && g->m * g->n <= max_macs / g->k;
}

/* Whether a vector product's elements lie along C's one row (else its one
 * column). */
static inline bool td_gemm_vector_along_row(const td_gemm_params *g)
{
    return g->m == 1 && g->n > 1;
}

/* Elements at .. at+count-1 of a vector product's C, from their sums. */
static inline void td_gemm_finish_vector(const td_gemm_params *g, float *c, int64_t at, int64_t count,
                                         const float *sums)
{
    const bool along_row = td_gemm_vector_along_row(g);
    for (int64_t r = 0; r < count; r++) {
        float *cij = along_row ? &c[at + r] : &c[(at + r) * g->ldc];
        *cij = td_gemm_finish(g, sums[r], cij);
    }
}

#endif
