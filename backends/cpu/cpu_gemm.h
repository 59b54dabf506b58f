/* The CPU backend's GEMM: CBLAS, or tandem's own (cpu_gemm_own.h), in
 * tiles of the output, so that a device the engine gives up on leaves a
 * long GEMM within one tile (td_backend_ops.cancel) instead of staying
 * inside OpenBLAS. */
#ifndef TD_CPU_GEMM_H
#define TD_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "td_kernel.h"

/* About 2^27 multiply-adds per tile (a few milliseconds on one current
 * core), in whole rows of C, a multiple of 192 of them (see cpu_gemm.c). */
#define TD_CPU_GEMM_TILE_MACS (INT64_C(1) << 27)
#define TD_CPU_GEMM_TILE_ROWS 192

/* Which GEMM computes a call. Built without CBLAS (-Dblas=none), a call
 * asked to run CBLAS runs the own one. */
typedef enum td_cpu_gemm_engine {
    TD_CPU_GEMM_CBLAS,
    TD_CPU_GEMM_OWN,     /* cpu_gemm_own.c: multiply and add rounded apart (deterministic mode's) */
    TD_CPU_GEMM_OWN_FMA, /* cpu_gemm_own_fma.c: fused multiply-adds */
} td_cpu_gemm_engine;

/* The engine for new segments outside deterministic mode. TD_CPU_GEMM in
 * the environment picks one ("cblas", "own", "own-fma": tests and
 * bench/gemm run every engine in one build this way; "cblas" without a
 * CBLAS gives the default below). Otherwise a fixed rule on the CPU's
 * feature flags, never a timing, so every device and process on a machine
 * makes the same choice: the own FMA GEMM where the CPU has AVX-512F or
 * AVX2 + FMA (measured faster than OpenBLAS's kernels there,
 * bench/RESULTS.md "GEMM engines"), else CBLAS, else the own one. */
td_cpu_gemm_engine td_cpu_gemm_engine_chosen(void);

/* The engine's name as TD_CPU_GEMM spells it ("cblas", "own", "own-fma"). */
const char *td_cpu_gemm_engine_name(td_cpu_gemm_engine engine);

/* The rows of C in each tile for g: g->m when one tile does; otherwise a
 * multiple of TD_CPU_GEMM_TILE_ROWS, the last tile taking the remainder. */
int64_t td_cpu_gemm_tile_rows(const td_gemm_params *g);

/* The host pool's parts of a GEMM call on `engine` (cpu_backend.c). On
 * CBLAS, cpu_split.c's: whole 192-row tiles, the rule under which a part is
 * bitwise the single call. The own GEMMs' bits depend on no split of the
 * rows, so their parts are balanced runs of whole 12-row micro-panels
 * (a multiple of every MR): a 128- or 256-row MLP layer gets two even
 * parts instead of one, or 192 + 64. Where the rows give fewer parts than
 * the team (a convolution's kernel gradient, 9 rows of C), the own GEMMs
 * and every bf16 call (its kernels' bits depend on no split either) cut
 * C's columns instead, in whole 32-column panels. Same contract as
 * td_cpu_split_parts and td_cpu_split_part (cpu_split.h). */
int64_t td_cpu_gemm_split_parts(const td_kernel_call *c, td_cpu_gemm_engine engine, uint32_t team, bool any_size);
void td_cpu_gemm_split_part(const td_kernel_call *c, td_cpu_gemm_engine engine, int64_t parts, int64_t part,
                            td_kernel_call *sub);

/* The rows of C that the host pool's parts of a GEMM on `engine` start at
 * multiples of: whole 192-row tiles on CBLAS (the rule under which a part
 * is bitwise the single call), 12-row micro-panels on the own GEMMs (every
 * MR divides 12; their bits depend on no split of the rows). */
int64_t td_cpu_gemm_part_rows(td_cpu_gemm_engine engine);

/* One tile of rows of a GEMM: C = alpha op(A) op(B) + beta C for the
 * tile's g->m rows, a and c already at the tile's first row. */
typedef void (*td_cpu_gemm_tile_fn)(const void *user, const td_gemm_params *g, float *c, const float *a,
                                    const float *b);

/* The frame every CPU GEMM runs in (CBLAS, the own ones, bf16): an empty C
 * returns at once, k = 0 gives C = beta C (beta == 0 does not read C), and
 * otherwise tile_fn runs on tiles of rows of C (td_cpu_gemm_tile_rows),
 * after reading *cancel (atomically; NULL: never cancelled) before each;
 * false, C partly written, once it is set. */
bool td_cpu_gemm_in_tiles(const td_gemm_params *g, float *c, const float *a, const float *b,
                          td_cpu_gemm_tile_fn tile_fn, const void *user, const bool *cancel);

/* C = alpha op(A) op(B) + beta C (td_kernel.h) on `engine`, tile by tile.
 * Before each tile it reads *cancel (atomically; NULL: never cancelled)
 * and returns false, C partly written, once it is set; true when all of C
 * was computed. Every element is bitwise the one a single call of that
 * engine computes: tiles split the rows of C, never the sum over k. */
bool td_cpu_gemm(const td_gemm_params *g, float *c, const float *a, const float *b, td_cpu_gemm_engine engine,
                 const bool *cancel);

#endif
