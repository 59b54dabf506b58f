/* The CPU backend's GEMM: CBLAS in tiles of the output, so that a device
 * the engine gives up on leaves a long GEMM within one tile
 * (td_backend_ops.cancel) instead of staying inside OpenBLAS. */
#ifndef TD_CPU_GEMM_H
#define TD_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "td_kernel.h"

/* About 2^27 multiply-adds per tile (a few milliseconds on one current
 * core), in whole rows of C, a multiple of 192 of them (see cpu_gemm.c). */
#define TD_CPU_GEMM_TILE_MACS (INT64_C(1) << 27)
#define TD_CPU_GEMM_TILE_ROWS 192

/* The rows of C in each tile for g: g->m when one tile does; otherwise a
 * multiple of TD_CPU_GEMM_TILE_ROWS, the last tile taking the remainder. */
int64_t td_cpu_gemm_tile_rows(const td_gemm_params *g);

/* C = alpha op(A) op(B) + beta C (td_kernel.h), tile by tile. Before each
 * tile it reads *cancel (atomically; NULL: never cancelled) and returns
 * false, C partly written, once it is set; true when all of C was
 * computed. Every element is bitwise the one a single CBLAS call computes:
 * tiles split the rows of C, never the sum over k. */
bool td_cpu_gemm(const td_gemm_params *g, float *c, const float *a, const float *b, const bool *cancel);

#endif
