/* The argument checks of td_kernel_call that every backend runs before a
 * launch: element counts, convolution geometry, the ranges the row kernels
 * touch. They belong to the kernel contract (td_kernel.h), not to any one
 * backend, so the CPU reference, OpenCL and Vulkan reject the same calls
 * with the same words. */
#ifndef TD_KERNEL_CHECKS_H
#define TD_KERNEL_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "td_kernel.h"

/* Element counts a call touches, for bounds checks before launch. */
int64_t td_ew_count(const td_ew_params *p);
int64_t td_reduce_out_count(const td_reduce_params *p);

/* NULL when the geometry is one the kernels accept (sizes in [0, 2^31),
 * a window of at least 1x1, strides and dilations >= 1, no dilation for
 * pooling, element counts below 2^62), else the reason, for a message. */
const char *td_conv_check(const td_conv_params *p, int pool);
const char *td_pool_check(const td_pool_params *p);
/* 0 when the GEMM's precision is one the kernels know (td_gemm_precision);
 * else -1 with the reason, naming the value, in why. */
int td_gemm_check(const td_gemm_params *p, char *why, size_t why_size);
/* Element counts of the image [n,h,w,c], the patches [n*oh*ow, kh*kw*c] and
 * the pooled output [n,oh,ow,c]; -1 when they overflow (see td_conv_check). */
int64_t td_conv_image_count(const td_conv_params *p);
int64_t td_conv_patch_count(const td_conv_params *p);
int64_t td_conv_pooled_count(const td_conv_params *p);

/* Argument slots of a call, in td_kernel_call's order. */
enum { TD_ROW_OUT = 0, TD_ROW_OUT2, TD_ROW_A, TD_ROW_B, TD_ROW_C, TD_ROW_SLOTS };

/* For the row kernels (softmax, argmax, cast, dropout mask, gather and
 * scatter-add of rows, layer norm and its gradient): the element count [0, need[slot]) each argument of c touches past its offset
 * (0: not touched), so that every backend checks the same ranges. Returns 0,
 * or -1 with a message naming the bad parameter and what was expected in
 * why (negative or overflowing sizes, an unknown mode or source type). */
int td_row_kernel_extents(const td_kernel_call *c, int64_t need[TD_ROW_SLOTS], char *why, size_t why_size);
/* Whether td_row_kernel_extents knows `kernel` (the list above). */
bool td_is_row_kernel(int32_t kernel);

#endif
