/* REDUCE over chosen axes of strided views. Backends may add in another
 * order than the contract's (GPU tree sums): normalised MSE. The long
 * sums take inputs on a grid of 2^-15, whose partial sums are exact in
 * any order (while below 2^9): a sum of 50000 full-mantissa terms that
 * cancels to a few hundred differs between orders by far more than its
 * last bits, and no order is the contract's alone. */
#include "td_conformance.h"

#include <math.h>

#include "td_case_inputs.h"

typedef struct reduce_row {
    const char *what;
    td_reduce_params p;
    td_case_args at;
    int64_t inf_at; /* > 0: a[inf_at] = +inf, an infinite sum where it is read */
    enum { FULL_MANTISSAS, ON_GRID /* multiples of 2^-15 */ } data;
} reduce_row;

/* a viewed as [4][6][10][25] at 3, out in the same buffer. */
#define VIEW_A {.out = {0, 60000}, .a = {0, 3}}
/* a as a dense [5][6][7][40] at 9, out at 2 of a second buffer. */
#define VIEW_B {.out = {1, 2}, .a = {0, 9}}
#define B_STRIDES {1680, 280, 40, 1}

static const reduce_row rows[] = {
    {"last axis", {0.5f, {4, 6, 10, 1}, {1500, 250, 25, 0}, {1, 1, 1, 25}, {0, 0, 0, 1}},
     VIEW_A, 0, ON_GRID},
    {"first axis", {0.5f, {1, 6, 10, 25}, {0, 250, 25, 1}, {1, 1, 1, 4}, {0, 0, 0, 1500}},
     VIEW_A, 0, ON_GRID},
    {"all but axis 1", {0.5f, {1, 1, 6, 1}, {0, 0, 250, 0}, {4, 10, 25, 1}, {1500, 25, 1, 0}},
     VIEW_A, 0, ON_GRID},
    {"everything, 6000 terms", {0.5f, {1, 1, 1, 1}, {0, 0, 0, 0}, {4, 6, 10, 25}, {1500, 250, 25, 1}},
     VIEW_A, 0, ON_GRID},
    {"an empty reduction", {0.5f, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, 1, 1, 0}, {0, 0, 0, 1}},
     VIEW_A, 0, ON_GRID},
    {"transposed out", {0.5f, {1, 1, 25, 10}, {0, 0, 1, 25}, {1, 4, 6, 1}, {0, 1500, 250, 0}},
     VIEW_A, 0, ON_GRID},
    {"one sum of 50000 (two passes)", {0.5f, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, 1, 1, 50000}, {0, 0, 0, 1}},
     VIEW_A, 0, ON_GRID},
    {"three strided sums of 16000", {0.5f, {1, 1, 1, 3}, {0, 0, 0, 1}, {1, 1, 16000, 1}, {0, 0, 3, 0}},
     VIEW_A, 0, ON_GRID},
    {"last axis, with an infinity", {1.0f, {5, 6, 7, 1}, {1680, 280, 40, 0}, {1, 1, 1, 40}, {0, 0, 0, 1}},
     VIEW_B, 77, FULL_MANTISSAS},
    {"first axis (a bias gradient), with an infinity",
     {0.5f, {1, 6, 7, 40}, {0, 280, 40, 1}, {5, 1, 1, 1}, {1680, 0, 0, 0}}, VIEW_B, 77, FULL_MANTISSAS},
    {"the middle two axes, with an infinity",
     {2.0f, {5, 1, 1, 40}, {1680, 0, 0, 1}, {1, 6, 7, 1}, {0, 280, 40, 0}}, VIEW_B, 77, FULL_MANTISSAS},
    {"everything to a mean, with an infinity",
     {1.0f / 8400, {1, 1, 1, 1}, {0, 0, 0, 0}, {5, 6, 7, 40}, B_STRIDES}, VIEW_B, 77, FULL_MANTISSAS},
    {"few outputs of long sums, with an infinity",
     {1.0f, {1, 1, 1, 40}, {0, 0, 0, 1}, {5, 6, 7, 1}, {1680, 280, 40, 0}}, VIEW_B, 77, FULL_MANTISSAS},
    {"nothing reduced (a strided copy), with an infinity",
     {1.0f, {5, 6, 7, 40}, B_STRIDES, {1, 1, 1, 1}, {0, 0, 0, 0}}, VIEW_B, 77, FULL_MANTISSAS},
    {"columns of a 30 x 10 matrix", {0.5f, {1, 1, 1, 10}, {0, 0, 0, 1}, {1, 1, 1, 30}, {0, 0, 0, 10}},
     {.out = {2, 5}, .a = {0, 5}}, 0, FULL_MANTISSAS},
};

static void reduce_inputs(const td_conformance_case *c, float *const *buffers)
{
    const reduce_row *row = c->row;
    float *a = td_case_arg(c, buffers, 0, TD_ROW_A);
    size_t room = td_case_arg_room(c, 0, TD_ROW_A);
    if (row->data == ON_GRID)
        for (size_t i = 0; i < room; i++)
            a[i] = ldexpf(nearbyintf(ldexpf(a[i], 15)), -15);
    if (row->inf_at > 0)
        a[row->inf_at] = INFINITY;
}

void td_cases_reduce(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        td_conformance_case *c = td_case_add(list, "reduce: %s", rows[i].what);
        td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_REDUCE, .p.reduce = rows[i].p}, rows[i].at,
                     TD_COMPARE_NMSE);
        c->row = &rows[i];
        c->inputs = reduce_inputs;
    }
}
