/* tandem — host tensors: a dtype, a shape of at most TD_MAX_RANK dimensions
 * (row-major) and host memory from the context's allocator hooks. They carry
 * data in and out of programs; device copies live inside compiled programs.
 *
 * A tensor is the caller's value, not the context's: td_context_destroy
 * leaves it alone, and it may be used and destroyed after its context (it
 * keeps a copy of the allocator hooks, which must stay callable until then).
 * A tensor that is never destroyed leaks, as malloc'd memory does. */
#ifndef TANDEM_TENSOR_H
#define TANDEM_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "tandem/context.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_MAX_RANK 4

/* Element types. Compute is f32 today; i32 carries class labels. The other
 * values are reserved so the enum stays stable as kernels arrive.
 * Since 0.1. */
typedef enum td_dtype {
    TD_F32 = 0,
    TD_F16 = 1,
    TD_BF16 = 2,
    TD_I32 = 3,
    TD_U8 = 4,
    TD_DTYPE_COUNT
} td_dtype;

/* Since 0.1. */
typedef struct td_tensor td_tensor;

/* Bytes per element of `dtype`; TD_ERR_INVALID_ARGUMENT for an unknown one.
 * Since 0.1. */
TD_API td_status td_dtype_size(td_dtype dtype, size_t *bytes);

/* Name of a dtype ("f32"); "unknown" outside the enum.
 * Since 0.1. */
TD_API const char *td_dtype_name(td_dtype dtype);

/* Creates a zero-filled host tensor. rank 0 is a scalar (one element); dims
 * must be >= 0 (0 gives an empty tensor).
 * Since 0.1. */
TD_API td_status td_tensor_create(td_context *ctx, td_dtype dtype, uint32_t rank, const int64_t *dims,
                                  td_tensor **out);

/* Frees the tensor, before or after its context's destroy. NULL is ignored.
 * Since 0.1. */
TD_API void td_tensor_destroy(td_tensor *tensor);

/* The tensor's memory: prod(dims) elements of its dtype, row-major, 64-byte
 * aligned, valid until destroy.
 * Since 0.1. */
TD_API td_status td_tensor_data(const td_tensor *tensor, void **data);

/* Shape: *rank and dims[0..rank-1] (dims must hold TD_MAX_RANK values).
 * Since 0.1. */
TD_API td_status td_tensor_shape(const td_tensor *tensor, uint32_t *rank, int64_t *dims);

/* Since 0.1. */
TD_API td_status td_tensor_dtype(const td_tensor *tensor, td_dtype *dtype);

/* Number of elements (product of dims).
 * Since 0.1. */
TD_API td_status td_tensor_count(const td_tensor *tensor, size_t *count);

#ifdef __cplusplus
}
#endif
#endif
