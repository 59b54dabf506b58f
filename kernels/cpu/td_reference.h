/* The CPU reference implementation of every td_kernel_call: plain, serial C
 * that every backend's results are compared against. The CPU backend runs
 * these too, except GEMM, which it hands to CBLAS (and the tests compare that
 * against td_reference_gemm). Pointers are already offset to the tensors.
 * The argument checks that come before any launch are not the reference's
 * but the contract's: td_kernel_checks.h, included here for the callers. */
#ifndef TD_REFERENCE_H
#define TD_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "td_kernel.h"
#include "td_kernel_checks.h"

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
void td_reference_layer_norm(float *out, float *stats, const float *a, const td_rows_params *p);
void td_reference_layer_norm_backward(float *out, const float *g, const float *xhat, const float *stats,
                                      const td_rows_params *p);
void td_reference_softmax(float *out, const float *a, const td_rows_params *p);
void td_reference_argmax(float *out, const float *a, const td_rows_params *p);
void td_reference_cast(float *out, const void *a, const td_cast_params *p);
void td_reference_dropout_mask(float *out, const uint32_t *b, const td_dropout_params *p);
void td_reference_gather_rows(float *out, const float *table, const int32_t *ids, const td_gather_params *p);
void td_reference_scatter_add_rows(float *out, const float *g, const int32_t *ids, const td_gather_params *p);

/* Convolution and pooling (td_reference_conv.c). Pointers as above; for
 * POOL_BACKWARD x, y and gy are the call's a, b and c. */
void td_reference_im2col(float *out, const float *a, const td_conv_params *p);
void td_reference_col2im(float *out, const float *a, const td_conv_params *p);
void td_reference_pool(float *out, const float *a, const td_pool_params *p);
void td_reference_pool_backward(float *gx, const float *x, const float *y, const float *gy,
                                 const td_pool_params *p);

#endif
