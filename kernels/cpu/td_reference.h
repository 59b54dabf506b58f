/* The CPU reference implementation of every td_kernel_call: plain, serial C
 * that every backend's results are compared against. The CPU backend runs
 * these too, except GEMM, which it hands to CBLAS (and the tests compare that
 * against td_reference_gemm). Pointers are already offset to the tensors. */
#ifndef TD_REFERENCE_H
#define TD_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "td_kernel.h"

void td_reference_fill(float *out, int64_t n, float value);
void td_reference_copy(float *out, const float *a, int64_t n);
void td_reference_elementwise(float *out, const float *a, const float *b, const td_ew_params *p);
void td_reference_reduce(float *out, const float *a, const td_reduce_params *p);
void td_reference_gemm(float *c, const float *a, const float *b, const td_gemm_params *p);
void td_reference_xent_forward(float *loss, float *prob, const float *logits, const int32_t *labels,
                               const td_xent_params *p);
void td_reference_xent_backward(float *grad, const float *prob, const int32_t *labels,
                                const float *upstream, const td_xent_params *p);

/* td_reference_rows.c. cast reads bytes or int32 words from a (u8 values
 * packed 4 per element slot); dropout_mask reads the two words b[0] = step,
 * b[1] = first example. */
void td_reference_softmax(float *out, const float *a, const td_rows_params *p);
void td_reference_argmax(float *out, const float *a, const td_rows_params *p);
void td_reference_cast(float *out, const void *a, const td_cast_params *p);
void td_reference_dropout_mask(float *out, const uint32_t *b, const td_dropout_params *p);
void td_reference_gather_rows(float *out, const float *table, const int32_t *ids, const td_gather_params *p);
void td_reference_scatter_add_rows(float *out, const float *g, const int32_t *ids, const td_gather_params *p);

/* Argument slots of a call, in td_kernel_call's order. */
enum { TD_ROW_OUT = 0, TD_ROW_OUT2, TD_ROW_A, TD_ROW_B, TD_ROW_C, TD_ROW_SLOTS };

/* For the kernels of td_reference_rows.c (softmax .. scatter_add_rows): the
 * element count [0, need[slot]) each argument of c touches past its offset
 * (0: not touched), so that every backend checks the same ranges. Returns 0,
 * or -1 with a message naming the bad parameter and what was expected in
 * why (negative or overflowing sizes, an unknown mode or source type). */
int td_row_kernel_extents(const td_kernel_call *c, int64_t need[TD_ROW_SLOTS], char *why, size_t why_size);
/* Convolution and pooling (td_reference_conv.c). Pointers as above; for
 * POOL_BACKWARD x, y and gy are the call's a, b and c. */
void td_reference_im2col(float *out, const float *a, const td_conv_params *p);
void td_reference_col2im(float *out, const float *a, const td_conv_params *p);
void td_reference_pool(float *out, const float *a, const td_pool_params *p);
void td_reference_pool_backward(float *gx, const float *x, const float *y, const float *gy,
                                 const td_pool_params *p);

/* NULL when the geometry is one the kernels accept (sizes in [0, 2^31),
 * a window of at least 1x1, strides and dilations >= 1, no dilation for
 * pooling, element counts below 2^62), else the reason, for a message. */
const char *td_conv_check(const td_conv_params *p, int pool);
const char *td_pool_check(const td_pool_params *p);
/* Element counts of the image [n,h,w,c], the patches [n*oh*ow, kh*kw*c] and
 * the pooled output [n,oh,ow,c]; -1 when they overflow (see td_conv_check). */
int64_t td_conv_image_count(const td_conv_params *p);
int64_t td_conv_patch_count(const td_conv_params *p);
int64_t td_conv_pooled_count(const td_conv_params *p);

/* Element counts a call touches, for bounds checks before launch. */
int64_t td_ew_count(const td_ew_params *p);
int64_t td_reduce_out_count(const td_reduce_params *p);

#endif
