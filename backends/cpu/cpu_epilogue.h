/* GEMM epilogues on the CPU backend: the elementwise calls that follow a
 * GEMM in a segment and work on its output row by row (a layer's bias add
 * and activation) run on each block of rows of C right after the GEMM
 * computed it, while the block is still in cache, instead of as separate
 * passes over the whole of C through memory (issue 19 item 2, "fused
 * epilogues"). A pooling whose windows tile the activation exactly (the
 * seed CNN's 2x2 / 2 max pool) may end the chain: it reads the block's
 * rows of pixels as they are finished; so may a COL2IM whose patches are
 * C (a convolution's input gradient), over blocks of whole images.
 *
 * Nothing in the kernel contract changes: each call is the same call over
 * a range of rows, every element the same expression of the same operands,
 * and the GEMM's blocks start at multiples of TD_CPU_GEMM_TILE_ROWS (the
 * rule under which a block of C is bitwise the whole call, cpu_gemm.c). A
 * chain is taken only where running it block by block cannot change what
 * any call reads: every access to the chain's outputs is aligned row for
 * row with C, and nothing else it reads or the GEMM reads is written by
 * it. */
#ifndef TD_CPU_EPILOGUE_H
#define TD_CPU_EPILOGUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "td_kernel.h"

/* How many of the calls after calls[i] (a GEMM) form its epilogue: 0 when
 * calls[i] is not a GEMM, or when the next call is not an elementwise call
 * (or a tiling pool) that may run block by block with it. */
size_t td_cpu_epilogue_length(const td_kernel_call *calls, size_t count, size_t i);

/* The rows of C that parts and blocks of GEMM chain[0] with its `length`
 * epilogue calls start at multiples of: the GEMM engine's part rows
 * (td_cpu_gemm_part_rows), times what a final pooling needs to find whole
 * bands of windows in a block. */
int64_t td_cpu_epilogue_granule(const td_kernel_call *chain, size_t length, int64_t gemm_rows);

/* *sub = part `part` of `parts` of GEMM chain[0]: rows [granule *
 * floor(part * whole / parts), the next part's start), whole = ceil(m /
 * granule), the last part ending at m (as td_cpu_split_part). */
void td_cpu_epilogue_part(const td_kernel_call *gemm, int64_t granule, int64_t parts, int64_t part,
                          td_kernel_call *sub);

/* false when the environment sets TD_CPU_EPILOGUE=off: every call then
 * runs whole, one after the other (read at segment_create, as TD_CPU_GEMM
 * is, so that a benchmark can time both ways in one build). */
bool td_cpu_epilogues_on(void);

/* Rows of C per block: a multiple of the granule whose block of C (n
 * floats a row) stays well inside a core's L2 cache. */
int64_t td_cpu_epilogue_block_rows(int64_t n, int64_t granule);

/* *sub = epilogue call e (one that td_cpu_epilogue_length accepted after a
 * GEMM whose C has n columns) over rows [row0, row0 + rows) of C (for a
 * pooling, multiples of the granule, or up to C's end). */
void td_cpu_epilogue_rows(const td_kernel_call *e, int64_t n, int64_t row0, int64_t rows, td_kernel_call *sub);

/* Whether IM2COL calls[i - 1] runs as the prologue of GEMM calls[i] (with
 * its `epilogue` calls): the GEMM's A is exactly the patches, and nothing
 * the chain writes lies over the patches or the image. Then each block of
 * the GEMM's rows, whole images, is first written by the IM2COL of those
 * images, so the GEMM reads its patches from L2 rather than memory (a
 * convolution's forward: conv2's 29 MB of patches). The IM2COL writes
 * every patch as the whole call would, so later readers (the kernel
 * gradient) see the same buffer. */
bool td_cpu_prologue_im2col(const td_kernel_call *calls, size_t count, size_t i, size_t epilogue);

/* The chain's granule made a multiple of an image's patches too. */
int64_t td_cpu_prologue_granule(const td_kernel_call *im2col, int64_t granule);

/* *sub = the IM2COL of rows [row0, row0 + rows) of patches (whole images). */
void td_cpu_prologue_rows(const td_kernel_call *im2col, int64_t row0, int64_t rows, td_kernel_call *sub);

/* Pooling backward chains: the elementwise calls after POOL_BACKWARD
 * calls[i] that work on its output gx ([N, H, W, C]) pixel by pixel (an
 * activation's gradient: ReLU's mask of the pooled layer) run on each
 * block of whole images right after the pooling's gradient wrote it, while
 * it is in cache. Each image's gradient is its own (windows never cross
 * images), so a block of images is the call's own work for them; the
 * chain rules are the GEMM epilogue's, with gx for C (H x W x C rows of C
 * channels an image) and the pooling's x, y and gy among what the chain
 * must never write. How many calls after calls[i] form the chain: 0 when
 * calls[i] is not a POOL_BACKWARD or none may join. */
size_t td_cpu_pool_backward_epilogue_length(const td_kernel_call *calls, size_t count, size_t i);

/* Images of a block: gx of a block about BLOCK_FLOATS, at least one image. */
int64_t td_cpu_pool_backward_block_images(const td_kernel_call *pool_backward);

#endif
