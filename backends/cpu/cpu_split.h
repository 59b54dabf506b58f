/* Splitting one kernel call into independent parts, so that the spare
 * cores of the host thread pool (engine/core/td_host_pool.h) can share it.
 *
 * A part is the same kernel over a contiguous range of the call's outer
 * units (rows of C, rows, images, elements), with its arguments moved to
 * that range: every output element is computed by exactly the arithmetic
 * the whole call would use, so the results are bitwise the same however
 * many parts there are. Kernels whose outputs are sums across the units
 * (SCATTER_ADD_ROWS) or whose indexing cannot be moved (DROPOUT_MASK reads
 * its first row's number from a buffer) are never split. */
#ifndef TD_CPU_SPLIT_H
#define TD_CPU_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "td_kernel.h"

/* The units of c and the granule a part starts at a multiple of. */
typedef struct td_cpu_split {
    int64_t units;   /* 0: the call is not split */
    int64_t granule; /* parts start at multiples of it, the last takes the rest */
    double work;     /* an estimate of the call's cost, in element or multiply-add units */
} td_cpu_split;

/* How c may be split (units 0 when it may not). */
td_cpu_split td_cpu_split_of(const td_kernel_call *c);

/* How many parts c is worth splitting into for a team of `team` threads:
 * at most team, at most ceil(units / granule), and (unless any_size) only while
 * each part keeps enough work to pay for its hand-over. 1: run it whole. */
int64_t td_cpu_split_parts(const td_kernel_call *c, uint32_t team, bool any_size);

/* c's work in units of a part's minimum (what makes splitting it worth a
 * hand-over to a helper): below 1, a helper would wait longer for its
 * wake-up than the work takes. */
double td_cpu_split_part_shares(const td_kernel_call *c);

/* Part `part` of `parts` of c (parts <= ceil(units / granule)): *sub is c
 * over units [granule * floor(part * whole / parts), the next part's
 * start), whole = ceil(units / granule), the last part ending at `units`
 * (so only the last part may hold less than a granule: a GEMM of 256
 * rows is parts of 192 and 64). */
void td_cpu_split_part(const td_kernel_call *c, int64_t parts, int64_t part, td_kernel_call *sub);

/* *sub = c over units [begin, begin + n) of td_cpu_split_of(c) (rows,
 * images, elements: the kernel's own unit), whatever the granule: the
 * part above is this for its range, and a pooling gradient's chain
 * (cpu_epilogue.h) runs its blocks of images through it. */
void td_cpu_split_units(const td_kernel_call *c, int64_t begin, int64_t n, td_kernel_call *sub);

/* Whether two calls may not run at once or in either order: true unless
 * both are GEMMs or REDUCEs and neither one's output overlaps the other's
 * operands or output (nor, for x == y, its own operands). */
bool td_cpu_calls_conflict(const td_kernel_call *x, const td_kernel_call *y);

#endif
