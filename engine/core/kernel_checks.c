/* td_kernel_checks.h: sizes and ranges of kernel calls, checked the same
 * way on every backend. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "td_kernel_checks.h"

int64_t td_ew_count(const td_ew_params *p)
{
    int64_t n = 1;
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        n *= p->dims[k];
    return n;
}

int64_t td_reduce_out_count(const td_reduce_params *p)
{
    int64_t n = 1;
    for (int k = 0; k < TD_KERNEL_RANK; k++)
        n *= p->out_dims[k];
    return n;
}

int td_gemm_check(const td_gemm_params *p, char *why, size_t why_size)
{
    if (p->precision == TD_GEMM_FP32 || p->precision == TD_GEMM_BF16)
        return 0;
    snprintf(why, why_size, "precision %d is unknown (expected %d for fp32 or %d for bf16)", (int)p->precision,
             TD_GEMM_FP32, TD_GEMM_BF16);
    return -1;
}

#define CONV_DIM_MAX 2147483647LL /* every size and step fits an int32 */

/* Product of v[0..count) when each factor is in [0, CONV_DIM_MAX] and the
 * product stays below 2^62; -1 otherwise. */
static int64_t checked_product(const int64_t *v, int count)
{
    int64_t r = 1;
    for (int k = 0; k < count; k++) {
        if (v[k] < 0 || v[k] > CONV_DIM_MAX)
            return -1;
        if (v[k] != 0 && r > ((int64_t)1 << 62) / v[k])
            return -1;
        r *= v[k];
    }
    return r;
}

const char *td_conv_check(const td_conv_params *p, int pool)
{
    const int64_t sizes[] = {p->n, p->h, p->w, p->c, p->kh, p->kw, p->oh, p->ow};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        if (sizes[k] < 0 || sizes[k] > CONV_DIM_MAX)
            return "a size (n, h, w, c, kh, kw, oh, ow) is negative or above 2^31 - 1";
    if (p->kh < 1 || p->kw < 1)
        return "the window is empty (kh and kw must be at least 1)";
    const int64_t steps[] = {p->stride_h, p->stride_w, p->dil_h, p->dil_w};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
        if (steps[k] < 1 || steps[k] > CONV_DIM_MAX)
            return "a stride or dilation is below 1 or above 2^31 - 1";
    if (p->pad_top < -CONV_DIM_MAX || p->pad_top > CONV_DIM_MAX || p->pad_left < -CONV_DIM_MAX ||
        p->pad_left > CONV_DIM_MAX)
        return "a padding is beyond +-(2^31 - 1)";
    if (pool && (p->dil_h != 1 || p->dil_w != 1))
        return "pooling takes no dilation (dil_h and dil_w must be 1)";
    if (td_conv_image_count(p) < 0 || td_conv_patch_count(p) < 0)
        return "the image or patch matrix has more than 2^62 elements";
    return NULL;
}

const char *td_pool_check(const td_pool_params *p)
{
    if (p->mode != TD_POOL_MAX && p->mode != TD_POOL_AVG)
        return "the pooling mode is neither TD_POOL_MAX (0) nor TD_POOL_AVG (1)";
    return td_conv_check(&p->geo, 1);
}

int64_t td_conv_image_count(const td_conv_params *p)
{
    const int64_t v[] = {p->n, p->h, p->w, p->c};
    return checked_product(v, 4);
}

int64_t td_conv_patch_count(const td_conv_params *p)
{
    const int64_t v[] = {p->n, p->oh, p->ow, p->kh, p->kw, p->c};
    return checked_product(v, 6);
}

int64_t td_conv_pooled_count(const td_conv_params *p)
{
    const int64_t v[] = {p->n, p->oh, p->ow, p->c};
    return checked_product(v, 4);
}

/* a * b for sizes already known to be >= 0, or -1 past INT64_MAX. */
static int64_t mul_or_neg(int64_t a, int64_t b)
{
    if (a != 0 && b > INT64_MAX / a)
        return -1;
    return a * b;
}

bool td_is_row_kernel(int32_t kernel)
{
    switch (kernel) {
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX:
    case TD_KERNEL_CAST:
    case TD_KERNEL_DROPOUT_MASK:
    case TD_KERNEL_GATHER_ROWS:
    case TD_KERNEL_SCATTER_ADD_ROWS:
    case TD_KERNEL_LAYER_NORM:
    case TD_KERNEL_LAYER_NORM_BACKWARD: return true;
    default: return false;
    }
}

int td_row_kernel_extents(const td_kernel_call *c, int64_t need[TD_ROW_SLOTS], char *why, size_t why_size)
{
    for (int s = 0; s < TD_ROW_SLOTS; s++)
        need[s] = 0;
    switch (c->kernel) {
    case TD_KERNEL_SOFTMAX:
    case TD_KERNEL_ARGMAX: {
        const td_rows_params *p = &c->p.rows;
        int64_t n = p->rows < 0 || p->cols < 0 ? -1 : mul_or_neg(p->rows, p->cols);
        if (n < 0) {
            snprintf(why, why_size, "rows %lld x cols %lld, expected sizes >= 0 with a product below 2^63",
                     (long long)p->rows, (long long)p->cols);
            return -1;
        }
        if (c->kernel == TD_KERNEL_SOFTMAX && (p->mode & ~(1 | TD_ROWS_CAUSAL)) != 0) {
            snprintf(why, why_size, "mode %d, expected 0 (softmax) or 1 (log-softmax), plus %d when causal",
                     (int)p->mode, TD_ROWS_CAUSAL);
            return -1;
        }
        need[TD_ROW_OUT] = c->kernel == TD_KERNEL_SOFTMAX ? n : p->rows;
        need[TD_ROW_A] = n;
        return 0;
    }
    case TD_KERNEL_LAYER_NORM:
    case TD_KERNEL_LAYER_NORM_BACKWARD: {
        const td_rows_params *p = &c->p.rows;
        int64_t n = p->rows < 0 || p->cols < 0 ? -1 : mul_or_neg(p->rows, p->cols);
        int64_t n_stats = p->rows < 0 ? -1 : mul_or_neg(p->rows, 2);
        if (n < 0 || n_stats < 0) {
            snprintf(why, why_size, "rows %lld x cols %lld, expected sizes >= 0 with a product below 2^63",
                     (long long)p->rows, (long long)p->cols);
            return -1;
        }
        if (c->kernel == TD_KERNEL_LAYER_NORM && !(p->epsilon > 0.0f && p->epsilon < INFINITY)) {
            snprintf(why, why_size, "epsilon %g, expected a finite value > 0", (double)p->epsilon);
            return -1;
        }
        need[TD_ROW_OUT] = n;
        need[TD_ROW_A] = n;
        if (c->kernel == TD_KERNEL_LAYER_NORM) {
            need[TD_ROW_OUT2] = n_stats;
        } else {
            need[TD_ROW_B] = n;
            need[TD_ROW_C] = n_stats;
        }
        return 0;
    }
    case TD_KERNEL_CAST: {
        const td_cast_params *p = &c->p.cast;
        if (p->n < 0 || p->n > INT64_MAX - 3) {
            snprintf(why, why_size, "n %lld, expected 0 <= n < 2^63 - 3", (long long)p->n);
            return -1;
        }
        if (p->from != TD_CAST_U8 && p->from != TD_CAST_I32) {
            snprintf(why, why_size, "from %d, expected %d (u8) or %d (i32)", (int)p->from, TD_CAST_U8, TD_CAST_I32);
            return -1;
        }
        need[TD_ROW_OUT] = p->n;
        need[TD_ROW_A] = p->from == TD_CAST_U8 ? (p->n + 3) / 4 : p->n;
        return 0;
    }
    case TD_KERNEL_DROPOUT_MASK: {
        const td_dropout_params *p = &c->p.dropout;
        int64_t n = p->rows < 0 || p->cols < 0 ? -1 : mul_or_neg(p->rows, p->cols);
        if (n < 0) {
            snprintf(why, why_size, "rows %lld x cols %lld, expected sizes >= 0 with a product below 2^63",
                     (long long)p->rows, (long long)p->cols);
            return -1;
        }
        need[TD_ROW_OUT] = n;
        need[TD_ROW_B] = n > 0 ? 2 : 0;
        return 0;
    }
    case TD_KERNEL_GATHER_ROWS:
    case TD_KERNEL_SCATTER_ADD_ROWS: {
        const td_gather_params *p = &c->p.gather;
        int64_t rows = -1, table = -1;
        if (p->n >= 0 && p->vocab >= 0 && p->dim >= 0) {
            rows = mul_or_neg(p->n, p->dim);
            table = mul_or_neg(p->vocab, p->dim);
        }
        if (rows < 0 || table < 0) {
            snprintf(why, why_size, "n %lld, vocab %lld, dim %lld, expected sizes >= 0 with products below 2^63",
                     (long long)p->n, (long long)p->vocab, (long long)p->dim);
            return -1;
        }
        bool gather = c->kernel == TD_KERNEL_GATHER_ROWS;
        need[TD_ROW_OUT] = gather ? rows : table;
        need[TD_ROW_A] = gather ? table : rows;
        need[TD_ROW_B] = p->n;
        return 0;
    }
    default:
        snprintf(why, why_size, "kernel %d is not a row kernel", (int)c->kernel);
        return -1;
    }
}
