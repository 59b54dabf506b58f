/* XENT_FORWARD and XENT_BACKWARD, alone and as one segment (backward reads
 * the probabilities forward wrote). Labels outside [0, cols) give a NaN
 * loss; an infinite logit gives a row of NaN probabilities. Forward calls
 * exp and log: normalised MSE. Backward alone is exact arithmetic on the
 * given probabilities: bitwise; after a device's forward it inherits
 * forward's rounding: normalised MSE. */
#include "td_conformance.h"

#include <math.h>

#include "td_case_inputs.h"

typedef enum xent_layout {
    ONE_BUFFER,   /* every tensor in one buffer, one after another */
    SIX_BUFFERS,  /* logits, labels, upstream gradient, loss, probabilities, gradient */
} xent_layout;

typedef struct xent_row {
    const char *what;
    int64_t rows, cols;
    xent_layout layout;
    float logit_scale;         /* logits uniform in [-scale, scale) */
    const int32_t *labels;     /* these, or (r * label_step) % cols */
    int32_t label_step;
    int64_t row_above, row_below; /* rows whose label is cols, and -1 */
    int64_t inf_logit;         /* > 0: logits[inf_logit] = +inf */
} xent_row;

static const int32_t six_labels[6] = {0, 4, 9, -1, 10, 3};

static const xent_row rows[] = {
    {"37 x 10, labels out of range in rows 3 and 4", 37, 10, ONE_BUFFER, 8.0f, NULL, 1, 3, 4, 0},
    {"67 x 10, labels out of range, an infinite logit in row 20", 67, 10, SIX_BUFFERS, 20.0f, NULL, 7, 9, 4,
     20 * 10 + 3},
    {"6 x 10, labels -1 and 10", 6, 10, SIX_BUFFERS, 1.0f, six_labels, 0, 0, 0, 0},
    {"3 x 1", 3, 1, ONE_BUFFER, 4.0f, NULL, 0, 2, 1, 0},
    /* a language model over GPT-2's 50257 tokens (lavapipe left loops past
     * 65535 iterations per invocation: rows this long once came out wrong) */
    {"1 x 50257", 1, 50257, SIX_BUFFERS, 4.0f, NULL, 0, 0, 0, 0},
    {"67 x 50257", 67, 50257, SIX_BUFFERS, 4.0f, NULL, 0, 0, 0, 0},
};

typedef struct xent_places {
    td_case_at logits, labels, upstream, loss, prob, grad;
} xent_places;

static xent_places places_of(const xent_row *row)
{
    if (row->layout == SIX_BUFFERS)
        return (xent_places){{0, 3}, {1, 0}, {2, 0}, {3, 1}, {4, 2}, {5, 0}};
    /* Odd gaps between the tensors, so no two start aligned alike. */
    uint64_t rc = (uint64_t)(row->rows * row->cols), r = (uint64_t)row->rows, at = 11;
    xent_places p;
    p.logits = (td_case_at){0, at};
    p.labels = (td_case_at){0, at += rc + 3};
    p.upstream = (td_case_at){0, at += r + 5};
    p.loss = (td_case_at){0, at += r + 1};
    p.prob = (td_case_at){0, at += r + 7};
    p.grad = (td_case_at){0, at += rc + 2};
    return p;
}

static void write_labels(const xent_row *row, int32_t *labels)
{
    for (int64_t r = 0; r < row->rows; r++)
        labels[r] = row->labels ? row->labels[r] : (int32_t)((r * row->label_step) % row->cols);
    if (row->row_above || row->row_below) {
        labels[row->row_above] = (int32_t)row->cols;
        labels[row->row_below] = -1;
    }
}

/* Call 0 is forward (logits in a) or backward alone (probabilities in a);
 * either way labels are in b. */
static void xent_inputs(const td_conformance_case *c, float *const *buffers)
{
    const xent_row *row = c->row;
    size_t n = (size_t)(row->rows * row->cols);
    float *a = td_case_arg(c, buffers, 0, TD_ROW_A);
    write_labels(row, (int32_t *)td_case_arg(c, buffers, 0, TD_ROW_B));
    if (c->calls[0].kernel == TD_KERNEL_XENT_BACKWARD) {
        for (size_t i = 0; i < n; i++)
            a[i] = fabsf(a[i]);
        return;
    }
    for (size_t i = 0; i < n; i++)
        a[i] *= row->logit_scale;
    if (row->inf_logit > 0)
        a[row->inf_logit] = INFINITY;
}

void td_cases_xent(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const xent_row *row = &rows[i];
        xent_places at = places_of(row);
        td_kernel_call forward = {.kernel = TD_KERNEL_XENT_FORWARD, .p.xent = {row->rows, row->cols}};
        td_kernel_call backward = {.kernel = TD_KERNEL_XENT_BACKWARD, .p.xent = {row->rows, row->cols}};
        td_case_args forward_at = {.out = at.loss, .out2 = at.prob, .a = at.logits, .b = at.labels};
        td_case_args backward_at = {.out = at.grad, .a = at.prob, .b = at.labels, .c = at.upstream};

        td_conformance_case *c = td_case_add(list, "xent forward %s", row->what);
        td_case_call(c, forward, forward_at, TD_COMPARE_NMSE);
        c->row = row;
        c->inputs = xent_inputs;

        c = td_case_add(list, "xent backward %s", row->what);
        td_case_call(c, backward, backward_at, TD_COMPARE_BITWISE);
        c->row = row;
        c->inputs = xent_inputs;

        c = td_case_add(list, "xent forward then backward in one segment, %s", row->what);
        td_case_call(c, forward, forward_at, TD_COMPARE_NMSE);
        td_case_call(c, backward, backward_at, TD_COMPARE_NMSE);
        c->row = row;
        c->inputs = xent_inputs;
    }
}
