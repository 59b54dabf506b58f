/* td_data_pixel_stats: a training set's pixel mean and standard
 * deviation, for td_model_options' input_mean / input_std. */
#include <math.h>
#include <stdint.h>

#include "tandem/data.h"
#include "td_context_internal.h"

td_status td_data_pixel_stats(td_context *ctx, const td_tensor *images, float *mean, float *std)
{
    const char *fn = "td_data_pixel_stats";
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (!images || !mean || !std)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                            !images ? "images" : !mean ? "mean" : "std");
    td_dtype dtype;
    td_tensor_dtype(images, &dtype);
    if (dtype != TD_U8)
        return td_dtype_error(ctx, fn, "images", dtype, "u8");
    size_t n = 0;
    td_tensor_count(images, &n);
    if (n == 0)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: images hold no values, expected at least one", fn);
    void *data;
    td_tensor_data(images, &data);
    /* A histogram: exact sums in integers, one pass, no float drift over
     * tens of millions of values. */
    uint64_t counts[256] = {0};
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++)
        counts[p[i]]++;
    double sum = 0.0;
    for (int v = 0; v < 256; v++)
        sum += (double)v * (double)counts[v];
    const double m = sum / (double)n / 255.0;
    double squares = 0.0;
    for (int v = 0; v < 256; v++) {
        const double d = (double)v / 255.0 - m;
        squares += d * d * (double)counts[v];
    }
    *mean = (float)m;
    *std = (float)sqrt(squares / (double)n);
    return TD_OK;
}
