/* SOFTMAX (both modes) and ARGMAX over rows with NaN, -inf and a row of
 * -inf only. Softmax calls exp and log: element-wise bounds. Argmax is
 * comparisons only: bitwise, on integer-valued inputs, so that rows have
 * ties and the first maximum must win. */
#include "td_conformance.h"

#include <math.h>

#include "td_case_inputs.h"

typedef enum row_data {
    SCALED,   /* random in [-10, 10) */
    INTEGERS, /* floor of random in [-8, 8): ties */
} row_data;

typedef struct row_row {
    const char *what;
    int32_t kernel;
    td_rows_params p;
    row_data data;
    td_case_args at;
} row_row;

#define ONE_BUFFER {.out = {0, 5000}, .a = {0, 11}}
#define TWO_BUFFERS {.out = {1, 5}, .a = {0, 5}}

static const row_row rows[] = {
    {"softmax 37 x 10", TD_KERNEL_SOFTMAX, {37, 10, 0, 0.0f}, SCALED, ONE_BUFFER},
    {"log-softmax 37 x 10", TD_KERNEL_SOFTMAX, {37, 10, 1, 0.0f}, SCALED, ONE_BUFFER},
    {"softmax 3 x 1000", TD_KERNEL_SOFTMAX, {3, 1000, 0, 0.0f}, SCALED, ONE_BUFFER},
    {"log-softmax 3 x 1000", TD_KERNEL_SOFTMAX, {3, 1000, 1, 0.0f}, SCALED, ONE_BUFFER},
    {"log-softmax 6 x 10, two buffers", TD_KERNEL_SOFTMAX, {6, 10, 1, 0.0f}, SCALED, TWO_BUFFERS},
    {"softmax 7 x 1", TD_KERNEL_SOFTMAX, {7, 1, 0, 0.0f}, SCALED, TWO_BUFFERS},
    /* rows of a vocabulary's length */
    {"softmax 2 x 50257", TD_KERNEL_SOFTMAX, {2, 50257, 0, 0.0f}, SCALED, TWO_BUFFERS},
    {"causal log-softmax 3 x 40000 (rows 0-2 of a block)", TD_KERNEL_SOFTMAX, {3, 40000, 3, 0.0f}, SCALED, TWO_BUFFERS},
    /* causal (TD_ROWS_CAUSAL): two 8 x 8 blocks of attention scores, and
     * three 5 x 5 blocks in log form (-inf past the diagonal) */
    {"causal softmax 2 x 8 x 8", TD_KERNEL_SOFTMAX, {16, 8, 2, 0.0f}, SCALED, ONE_BUFFER},
    {"causal log-softmax 3 x 5 x 5", TD_KERNEL_SOFTMAX, {15, 5, 3, 0.0f}, SCALED, TWO_BUFFERS},
    {"causal softmax 4 x 1 x 1", TD_KERNEL_SOFTMAX, {4, 1, 2, 0.0f}, SCALED, TWO_BUFFERS},
    {"argmax 37 x 10", TD_KERNEL_ARGMAX, {37, 10, 0, 0.0f}, INTEGERS, {.out = {0, 7000}, .a = {0, 11}}},
    {"argmax of empty rows", TD_KERNEL_ARGMAX, {3, 0, 0, 0.0f}, INTEGERS, {.out = {0, 7000}, .a = {0, 11}}},
    {"argmax 6 x 10 of distinct values, two buffers", TD_KERNEL_ARGMAX, {6, 10, 0, 0.0f}, SCALED, TWO_BUFFERS},
    {"argmax 2 x 1000", TD_KERNEL_ARGMAX, {2, 1000, 0, 0.0f}, INTEGERS, TWO_BUFFERS},
};

/* Flat positions in a: with 10 columns, row 2 holds a NaN and a -inf, row
 * 5 is all -inf and row 7 has one -inf. */
static void row_inputs(const td_conformance_case *c, float *const *buffers)
{
    const row_row *row = c->row;
    int64_t n = row->p.rows * row->p.cols;
    float *a = td_case_arg(c, buffers, 0, TD_ROW_A);
    for (int64_t i = 0; i < n; i++)
        a[i] = row->data == SCALED ? a[i] * 10.0f : floorf(a[i] * 8.0f);
    const struct {
        int64_t from, to;
        float value;
    } specials[] = {{23, 24, NAN}, {24, 25, -INFINITY}, {50, 60, -INFINITY}, {71, 72, -INFINITY}};
    for (size_t s = 0; s < sizeof specials / sizeof specials[0]; s++)
        for (int64_t i = specials[s].from; i < specials[s].to && i < n; i++)
            a[i] = specials[s].value;
}

void td_cases_rows(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row_row *row = &rows[i];
        td_conformance_case *c = td_case_add(list, "%s", row->what);
        td_case_call(c, (td_kernel_call){.kernel = row->kernel, .p.rows = row->p}, row->at,
                     row->kernel == TD_KERNEL_SOFTMAX ? TD_COMPARE_ELEMENTS : TD_COMPARE_BITWISE);
        c->row = row;
        c->inputs = row_inputs;
    }
}
