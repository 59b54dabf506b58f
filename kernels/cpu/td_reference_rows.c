/* Serial reference of the row kernels of td_kernel.h: softmax, argmax, cast,
 * dropout mask, gather and scatter-add of rows. The GPU kernels follow the
 * same per-element order, so the ones built from + - * and comparisons only
 * match these bitwise. */
#include "td_reference.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "td_random.h"

/* The counter's last word names dropout's stream ("drop"): other users of
 * the same seed (initializers, the data order) never draw the same words. */
#define TD_DROPOUT_STREAM 0x64726f70u

void td_reference_softmax(float *out, const float *a, const td_rows_params *p)
{
    for (int64_t r = 0; r < p->rows; r++) {
        const float *row = a + r * p->cols;
        float *orow = out + r * p->cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < p->cols; c++)
            m = row[c] > m ? row[c] : m;
        float s = 0.0f;
        for (int64_t c = 0; c < p->cols; c++)
            s += expf(row[c] - m);
        if (p->mode == 0) {
            /* exp again rather than a stored copy: out may be a itself. */
            float inv = 1.0f / s;
            for (int64_t c = 0; c < p->cols; c++)
                orow[c] = expf(row[c] - m) * inv;
        } else {
            float ls = logf(s);
            for (int64_t c = 0; c < p->cols; c++)
                orow[c] = (row[c] - m) - ls;
        }
    }
}

void td_reference_argmax(float *out, const float *a, const td_rows_params *p)
{
    for (int64_t r = 0; r < p->rows; r++) {
        const float *row = a + r * p->cols;
        if (p->cols == 0) {
            out[r] = NAN; /* no column to name */
            continue;
        }
        int64_t best = 0;
        float m = row[0];
        for (int64_t c = 1; c < p->cols && !isnan(m); c++)
            if (isnan(row[c]) || row[c] > m) {
                m = row[c];
                best = c;
            }
        out[r] = (float)best;
    }
}

void td_reference_cast(float *out, const void *a, const td_cast_params *p)
{
    if (p->from == TD_CAST_U8) {
        const uint8_t *bytes = a;
        for (int64_t i = 0; i < p->n; i++)
            out[i] = (float)bytes[i];
    } else {
        /* Converted one by one before the store: out may alias a exactly. */
        const int32_t *words = a;
        for (int64_t i = 0; i < p->n; i++) {
            int32_t v;
            memcpy(&v, &words[i], sizeof v);
            out[i] = (float)v;
        }
    }
}

void td_reference_dropout_mask(float *out, const uint32_t *b, const td_dropout_params *p)
{
    const uint32_t key[2] = {p->seed_lo, p->seed_hi};
    uint32_t step = b[0], first = b[1];
    for (int64_t r = 0; r < p->rows; r++) {
        float *orow = out + r * p->cols;
        for (int64_t j = 0; j < p->cols; j += 4) {
            const uint32_t counter[4] = {(uint32_t)(j / 4), first + (uint32_t)r, step, TD_DROPOUT_STREAM};
            uint32_t words[4];
            td_philox4x32_10(counter, key, words);
            for (int64_t k = 0; k < 4 && j + k < p->cols; k++)
                orow[j + k] = words[k] < p->keep_threshold ? p->scale : 0.0f;
        }
    }
}

void td_reference_gather_rows(float *out, const float *table, const int32_t *ids, const td_gather_params *p)
{
    for (int64_t i = 0; i < p->n; i++) {
        float *orow = out + i * p->dim;
        int32_t id = ids[i];
        if (id < 0 || id >= p->vocab) {
            for (int64_t d = 0; d < p->dim; d++)
                orow[d] = NAN;
            continue;
        }
        const float *row = table + (int64_t)id * p->dim;
        for (int64_t d = 0; d < p->dim; d++)
            orow[d] = row[d];
    }
}

void td_reference_scatter_add_rows(float *out, const float *g, const int32_t *ids, const td_gather_params *p)
{
    for (int64_t e = 0; e < p->vocab * p->dim; e++)
        out[e] = 0.0f;
    for (int64_t i = 0; i < p->n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= p->vocab)
            continue;
        float *orow = out + (int64_t)id * p->dim;
        const float *grow = g + i * p->dim;
        for (int64_t d = 0; d < p->dim; d++)
            orow[d] += grow[d];
    }
}

/* a * b for sizes already known to be >= 0, or -1 past INT64_MAX. */
static int64_t mul_or_neg(int64_t a, int64_t b)
{
    if (a != 0 && b > INT64_MAX / a)
        return -1;
    return a * b;
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
        if (c->kernel == TD_KERNEL_SOFTMAX && p->mode != 0 && p->mode != 1) {
            snprintf(why, why_size, "mode %d, expected 0 (softmax) or 1 (log-softmax)", (int)p->mode);
            return -1;
        }
        need[TD_ROW_OUT] = c->kernel == TD_KERNEL_SOFTMAX ? n : p->rows;
        need[TD_ROW_A] = n;
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
