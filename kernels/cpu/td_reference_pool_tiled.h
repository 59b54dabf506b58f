/* Max pooling over windows that tile the image exactly, channels in whole
 * vectors, with the CPU's vector instructions (td_reference_pool_tiled.c):
 * the fast path td_reference_pool and td_reference_pool_backward take
 * first. Each returns false, having written nothing, where the call is
 * not such a pooling or the CPU lacks the instructions; the caller then
 * runs its generic loops, which give the same bits. */
#ifndef TD_REFERENCE_POOL_TILED_H
#define TD_REFERENCE_POOL_TILED_H

#include <stdbool.h>

#include "td_kernel.h"

bool td_reference_pool_tiled(float *out, const float *a, const td_pool_params *pp);
bool td_reference_pool_backward_tiled(float *gx, const float *x, const float *y, const float *gy,
                                      const td_pool_params *pp);

#endif
