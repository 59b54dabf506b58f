/* Host tensors. */
#include <string.h>

#include "tandem/tensor.h"
#include "td_context_internal.h"

struct td_tensor {
    td_allocator allocator; /* the context's hooks: the tensor may outlive it */
    td_dtype dtype;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    size_t count;
    void *data;
};

td_status td_dtype_size(td_dtype dtype, size_t *bytes)
{
    static const size_t sizes[TD_DTYPE_COUNT] = {4, 2, 2, 4, 1};
    if (!bytes || (unsigned)dtype >= TD_DTYPE_COUNT)
        return TD_ERR_INVALID_ARGUMENT;
    *bytes = sizes[dtype];
    return TD_OK;
}

const char *td_dtype_name(td_dtype dtype)
{
    static const char *const names[TD_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "u8"};
    return (unsigned)dtype < TD_DTYPE_COUNT ? names[dtype] : "unknown";
}

td_status td_dtype_error(td_context *ctx, const char *fn, const char *what, td_dtype dtype, const char *expected)
{
    if ((unsigned)dtype < TD_DTYPE_COUNT)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected %s", fn, what, td_dtype_name(dtype),
                            expected);
    return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s is %d (not a td_dtype), expected %s", fn, what,
                        (int)dtype, expected);
}

td_status td_tensor_create(td_context *ctx, td_dtype dtype, uint32_t rank, const int64_t *dims, td_tensor **out)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!out)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_tensor_create: out is NULL");
    *out = NULL;
    size_t esize;
    if (td_dtype_size(dtype, &esize) != TD_OK)
        return td_dtype_error(ctx, "td_tensor_create", "dtype", dtype, "f32, f16, bf16, i32 or u8");
    if (rank > TD_MAX_RANK)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_tensor_create: rank %u exceeds the maximum %d", rank,
                            TD_MAX_RANK);
    if (rank > 0 && !dims)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_tensor_create: dims is NULL for rank %u", rank);
    size_t count = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (dims[i] < 0 || (dims[i] > 0 && count > SIZE_MAX / 16 / (size_t)dims[i]))
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "td_tensor_create: dimension %u is %lld (expected >= 0 and a size that fits in memory)",
                                i, (long long)dims[i]);
        count *= (size_t)dims[i];
    }
    td_tensor *t = td_alloc_zeroed(ctx, sizeof *t);
    void *data = td_alloc_zeroed(ctx, count * esize);
    if (!t || !data) {
        td_free(ctx, t);
        td_free(ctx, data);
        return TD_OOM(ctx, "a tensor", count * esize);
    }
    t->allocator = td_context_allocator(ctx);
    t->dtype = dtype;
    t->rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        t->dims[i] = dims[i];
    t->count = count;
    t->data = data;
    *out = t;
    return TD_OK;
}

void td_tensor_destroy(td_tensor *t)
{
    if (!t)
        return;
    td_free_with(&t->allocator, t->data);
    td_free_with(&t->allocator, t);
}

td_status td_tensor_data(const td_tensor *t, void **data)
{
    if (!t || !data)
        return TD_ERR_INVALID_ARGUMENT;
    *data = t->data;
    return TD_OK;
}

td_status td_tensor_shape(const td_tensor *t, uint32_t *rank, int64_t *dims)
{
    if (!t || !rank || !dims)
        return TD_ERR_INVALID_ARGUMENT;
    *rank = t->rank;
    for (uint32_t i = 0; i < t->rank; i++)
        dims[i] = t->dims[i];
    return TD_OK;
}

td_status td_tensor_dtype(const td_tensor *t, td_dtype *dtype)
{
    if (!t || !dtype)
        return TD_ERR_INVALID_ARGUMENT;
    *dtype = t->dtype;
    return TD_OK;
}

td_status td_tensor_count(const td_tensor *t, size_t *count)
{
    if (!t || !count)
        return TD_ERR_INVALID_ARGUMENT;
    *count = t->count;
    return TD_OK;
}
