/* LAYER_NORM and LAYER_NORM_BACKWARD over rows of a model's width: a
 * division and a square root per row, so within bounds, element by element
 * (the sums run in the reference's column order on every backend). The
 * backward alone reads host-given xhat and statistics; the pair in one
 * segment reads the forward's own. */
#include "td_conformance.h"

#include "td_case_inputs.h"

typedef struct norm_row {
    const char *what;
    int64_t rows, cols;
    float epsilon;
} norm_row;

static const norm_row rows[] = {
    {"37 x 10", 37, 10, 1e-5f},
    {"3 x 768", 3, 768, 1e-5f},
    {"5 x 1, every row its mean", 5, 1, 1e-5f},
    {"256 x 128", 256, 128, 1e-3f},
};

/* Positive rstd in the statistics the backward-alone cases read. */
static void positive_stats(const td_conformance_case *c, float *const *buffers)
{
    const norm_row *row = c->row;
    float *stats = td_case_arg(c, buffers, 0, TD_ROW_C);
    for (int64_t r = 0; r < row->rows; r++)
        stats[2 * r + 1] = 0.5f + stats[2 * r + 1] * stats[2 * r + 1];
}

void td_cases_norm(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const norm_row *row = &rows[i];
        const int64_t n = row->rows * row->cols;
        td_rows_params p = {row->rows, row->cols, 0, row->epsilon};
        td_kernel_call forward = {.kernel = TD_KERNEL_LAYER_NORM, .p.rows = p};
        td_kernel_call backward = {.kernel = TD_KERNEL_LAYER_NORM_BACKWARD, .p.rows = p};
        /* buffer 0: x, then xhat, then stats; buffer 1: g; buffer 2: dx */
        td_case_args forward_at = {.out = {0, (uint64_t)n + 3}, .out2 = {0, 2 * (uint64_t)n + 7}, .a = {0, 1}};
        td_case_args backward_at = {.out = {2, 5}, .a = {1, 2}, .b = {0, (uint64_t)n + 3},
                                    .c = {0, 2 * (uint64_t)n + 7}};
        td_conformance_case *c = td_case_add(list, "layer norm %s", row->what);
        td_case_call(c, forward, forward_at, TD_COMPARE_ELEMENTS);
        c->row = row;
        c = td_case_add(list, "layer norm backward %s", row->what);
        td_case_call(c, backward, backward_at, TD_COMPARE_ELEMENTS);
        c->row = row;
        c->inputs = positive_stats;
        c = td_case_add(list, "layer norm then its backward in one segment, %s", row->what);
        td_case_call(c, forward, forward_at, TD_COMPARE_ELEMENTS);
        td_case_call(c, backward, backward_at, TD_COMPARE_ELEMENTS);
        c->row = row;
    }
}
