/* tandem's own blocked GEMM (cpu_gemm_own.c): the CPU backend's GEMM in a
 * build without CBLAS, and a second engine beside CBLAS in every build. */
#ifndef TD_CPU_GEMM_OWN_H
#define TD_CPU_GEMM_OWN_H

#include "td_kernel.h"

/* C = alpha op(A) op(B) + beta C (td_gemm_params, td_kernel.h), in one
 * thread. Each element's sum runs over k in order 0..k-1 whatever m, n and
 * the blocking, so any split of the rows or columns of C gives the same
 * bits as one call. */
void td_cpu_gemm_own(const td_gemm_params *g, float *c, const float *a, const float *b);

/* The same sums, one element at a time without packing: the fallback when
 * the per-thread panels cannot be allocated, and what tests compare the
 * blocked path with, bitwise. */
void td_cpu_gemm_own_unpacked(const td_gemm_params *g, float *c, const float *a, const float *b);

#endif
