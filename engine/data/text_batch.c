/* Language-model batches cut from a text: training windows at seeded
 * positions, validation windows at fixed stride. Both run every step, so
 * they only check and copy.
 *
 * Training positions come from the counter-based generator with the row in
 * the counter: row b of step k is the same whichever process or device
 * assembles it and however many rows the batch has. Sampling positions
 * (rather than walking the text in order, as llm.c's loader does) needs no
 * cursor to save in a checkpoint: the step count is the whole data state. */
#include <string.h>

#include "td_random.h"
#include "td_text.h"
#include "td_trace.h"

/* Checks the common part of every call: a live text and sizes >= 1. */
static td_status check_text(const td_text *text, const char *fn, size_t B, size_t T)
{
    if (!text)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&text->owned, fn);
    if (s != TD_OK)
        return s;
    if (B == 0 || T == 0)
        return td_error_set(text->ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s is 0, expected at least 1", fn,
                            B == 0 ? "B" : "T");
    return TD_OK;
}

/* inputs or targets: a TD_I32 [B, T] tensor. */
static td_status check_rows(td_context *ctx, const char *fn, const char *what, const td_tensor *t, size_t B,
                            size_t T)
{
    if (!t)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s is NULL, expected an i32 [B, T] = [%zu, %zu] tensor",
                            fn, what, B, T);
    td_dtype dtype;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    td_tensor_dtype(t, &dtype);
    td_tensor_shape(t, &rank, dims);
    if (dtype != TD_I32)
        return td_dtype_error(ctx, fn, what, dtype, "i32");
    if (rank != 2)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s: %s has rank %u, expected 2 ([B, T] = [%zu, %zu])", fn,
                            what, rank, B, T);
    if ((uint64_t)dims[0] != B || (uint64_t)dims[1] != T)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s: %s is [%lld, %lld], expected [B, T] = [%zu, %zu]", fn,
                            what, (long long)dims[0], (long long)dims[1], B, T);
    return TD_OK;
}

static td_status check_pair(td_context *ctx, const char *fn, const td_tensor *inputs, const td_tensor *targets,
                            size_t B, size_t T)
{
    td_status s = check_rows(ctx, fn, "inputs", inputs, B, T);
    if (s == TD_OK)
        s = check_rows(ctx, fn, "targets", targets, B, T);
    if (s == TD_OK && inputs == targets)
        s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: inputs and targets are the same tensor, expected two", fn);
    return s;
}

/* Row `row` of inputs and targets from the window of T + 1 tokens at
 * `window`. */
static void copy_window(const uint16_t *window, size_t T, size_t row, int32_t *inputs, int32_t *targets)
{
    int32_t *in = inputs + row * T, *out = targets + row * T;
    for (size_t t = 0; t < T; t++) {
        in[t] = window[t];
        out[t] = window[t + 1];
    }
}

static int32_t *i32_data(const td_tensor *t)
{
    void *data;
    td_tensor_data(t, &data);
    return data;
}

td_status td_text_batch(const td_text *text, uint64_t seed, uint64_t step, size_t B, size_t T, td_tensor *inputs,
                        td_tensor *targets)
{
    const char *fn = "td_text_batch";
    td_status s = check_text(text, fn, B, T);
    if (s != TD_OK)
        return s;
    td_context *ctx = text->ctx;
    /* The step and the row are counter words. */
    if (step > UINT32_MAX)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: step is %llu, expected below 2^32", fn,
                            (unsigned long long)step);
    if (B > UINT32_MAX)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: B is %zu, expected below 2^32", fn, B);
    s = check_pair(ctx, fn, inputs, targets, B, T);
    if (s != TD_OK)
        return s;
    if (text->n_train <= T)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: the training text holds %zu tokens, fewer than T + 1 = %zu (one window)", fn,
                            text->n_train, T + 1);
    td_trace *tr = td_trace_of(ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    int32_t *in = i32_data(inputs), *out = i32_data(targets);
    const uint32_t purpose = td_random_name_hash(fn);
    const uint64_t starts = text->n_train - T;
    for (size_t b = 0; b < B; b++) {
        td_random_stream stream;
        td_random_stream_init(&stream, seed, purpose, (uint32_t)step, (uint32_t)b);
        const uint64_t start = td_random_below_u64(&stream, starts);
        copy_window(text->tokens + start, T, b, in, out);
    }
    if (tr)
        td_trace_span(tr, TD_TRACE_HOST, "copy", "text batch", NULL, begin, td_trace_now(),
                      2 * (uint64_t)B * T * sizeof(int32_t));
    return TD_OK;
}

static size_t val_windows(const td_text *text, size_t T)
{
    return text->n_val > 0 ? (text->n_val - 1) / T : 0;
}

td_status td_text_val_windows(const td_text *text, size_t T, size_t *count)
{
    const char *fn = "td_text_val_windows";
    td_status s = check_text(text, fn, 1, T);
    if (s != TD_OK)
        return s;
    if (!count)
        return td_error_set(text->ctx, TD_ERR_INVALID_ARGUMENT, "%s: count is NULL, expected a size_t *", fn);
    *count = val_windows(text, T);
    return TD_OK;
}

static td_status check_mask(td_context *ctx, const char *fn, const td_tensor *mask, size_t B)
{
    if (!mask)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: mask is NULL, expected an f32 [B] = [%zu] tensor", fn,
                            B);
    td_dtype dtype;
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
    td_tensor_dtype(mask, &dtype);
    td_tensor_shape(mask, &rank, dims);
    if (dtype != TD_F32 && dtype != TD_U8)
        return td_dtype_error(ctx, fn, "mask", dtype, "f32 or u8");
    if (rank != 1)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s: mask has rank %u, expected 1 ([B] = [%zu])", fn, rank, B);
    if ((uint64_t)dims[0] != B)
        return td_error_set(ctx, TD_ERR_SHAPE_MISMATCH, "%s: mask is [%lld], expected [B] = [%zu]", fn,
                            (long long)dims[0], B);
    return TD_OK;
}

td_status td_text_val_batch(const td_text *text, size_t T, size_t first_window, size_t B, td_tensor *inputs,
                            td_tensor *targets, td_tensor *mask, size_t *valid)
{
    const char *fn = "td_text_val_batch";
    td_status s = check_text(text, fn, B, T);
    if (s != TD_OK)
        return s;
    td_context *ctx = text->ctx;
    if (!valid)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: valid is NULL, expected a size_t *", fn);
    s = check_pair(ctx, fn, inputs, targets, B, T);
    if (s == TD_OK)
        s = check_mask(ctx, fn, mask, B);
    if (s != TD_OK)
        return s;
    const size_t count = val_windows(text, T);
    if (first_window > count)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "%s: first_window is %zu, expected at most the %zu validation windows of T = %zu", fn,
                            first_window, count, T);
    const size_t n = count - first_window < B ? count - first_window : B;
    int32_t *in = i32_data(inputs), *out = i32_data(targets);
    const uint16_t *val = text->tokens + text->n_train;
    for (size_t row = 0; row < n; row++)
        copy_window(val + (first_window + row) * T, T, row, in, out);
    memset(in + n * T, 0, (B - n) * T * sizeof *in);
    memset(out + n * T, 0, (B - n) * T * sizeof *out);
    td_data_batch_mask(ctx, mask, n);
    *valid = n;
    return TD_OK;
}
