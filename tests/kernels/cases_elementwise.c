/* ELEMENTWISE: every op of TD_EW_OPS on every layout below, judged by the
 * op's own contract (bitwise for exact ops; td_test_compare.h). The inputs
 * hold NaN, infinities, signed zeros, a subnormal and values near the
 * largest float where the ops disagree most easily. */
#include "td_conformance.h"

#include <math.h>

#include "td_case_inputs.h"

typedef struct ew_layout {
    const char *what;
    int64_t dims[TD_KERNEL_RANK], a_strides[TD_KERNEL_RANK], b_strides[TD_KERNEL_RANK];
    float alpha;
    td_case_args at;
} ew_layout;

#define DENSE_2x3x5x7 {105, 35, 7, 1}
#define DENSE_2x3x4x37 {444, 148, 37, 1}

static const ew_layout layouts[] = {
    /* One buffer holding out, a and b. */
    {"dense, one buffer", {2, 3, 5, 7}, DENSE_2x3x5x7, DENSE_2x3x5x7, 0.37f,
     {.out = {0, 2000}, .a = {0, 7}, .b = {0, 300}}},
    {"a a column, b a row, one buffer", {2, 3, 5, 7}, {0, 1, 0, 0}, {0, 0, 0, 1}, 0.37f,
     {.out = {0, 2000}, .a = {0, 9}, .b = {0, 300}}},
    {"a a transposed view, b broadcast over axes 0 and 2, one buffer", {2, 3, 5, 7}, {1, 2, 42, 6}, {0, 7, 0, 1},
     0.37f, {.out = {0, 2000}, .a = {0, 9}, .b = {0, 300}}},
    {"in place on a, one buffer", {1, 1, 1, 999}, {0, 0, 0, 1}, {0, 0, 0, 1}, 0.37f,
     {.out = {0, 3000}, .a = {0, 3000}, .b = {0, 300}}},
    /* out, a and b in three buffers. */
    {"dense, three buffers", {2, 3, 4, 37}, DENSE_2x3x4x37, DENSE_2x3x4x37, -1.7f,
     {.out = {2, 3}, .a = {0, 13}, .b = {1, 13}}},
    {"b broadcast over axes 0 and 2", {2, 3, 4, 37}, DENSE_2x3x4x37, {0, 37, 0, 1}, -1.7f,
     {.out = {2, 3}, .a = {0, 13}, .b = {1, 13}}},
    {"a broadcast over axes 0 and 1", {2, 3, 4, 37}, {0, 0, 37, 1}, DENSE_2x3x4x37, -1.7f,
     {.out = {2, 3}, .a = {0, 13}, .b = {1, 13}}},
    {"a transposed, b a scalar", {2, 3, 4, 37}, {1, 2, 6, 24}, {0, 0, 0, 0}, -1.7f,
     {.out = {2, 3}, .a = {0, 13}, .b = {1, 13}}},
    {"in place on a, b in another buffer", {1, 1, 1, 888}, {0, 0, 0, 1}, {0, 0, 0, 1}, 0.3f,
     {.out = {0, 13}, .a = {0, 13}, .b = {1, 13}}},
    {"in place on b, a in another buffer", {1, 1, 1, 888}, {0, 0, 0, 1}, {0, 0, 0, 1}, 0.3f,
     {.out = {1, 13}, .a = {0, 13}, .b = {1, 13}}},
    {"a rows of a matrix, b broadcast over rows", {1, 3, 10, 10}, {0, 100, 10, 1}, {0, 0, 10, 1}, 0.75f,
     {.out = {2, 5}, .a = {0, 5}, .b = {1, 1}}},
    {"4097 dense, past a multiple of any workgroup", {1, 1, 1, 4097}, {0, 0, 0, 1}, {0, 0, 0, 1}, 1.5f,
     {.out = {2, 1}, .a = {0, 0}, .b = {1, 2}}},
    {"an empty axis", {2, 0, 3, 4}, {0, 12, 4, 1}, {0, 12, 4, 1}, 1.0f, {.out = {2, 1}, .a = {0, 0}, .b = {1, 0}}},
    /* The seed models' layouts, which the CPU reference folds into long
     * rows: images [b, h, w, 1] against a scalar, a bias along the last
     * axis of [b, h, w, c]. */
    {"[3, 5, 4, 1] images, b a scalar", {3, 5, 4, 1}, {20, 4, 1, 1}, {0, 0, 0, 0}, 0.5f,
     {.out = {2, 3}, .a = {0, 13}, .b = {1, 13}}},
    {"[2, 3, 4, 16] activations, b a bias row", {2, 3, 4, 16}, {192, 64, 16, 1}, {0, 0, 0, 1}, -0.25f,
     {.out = {2, 3}, .a = {0, 13}, .b = {1, 13}}},
};

static const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f /* subnormal */, 3.4e38f, 1e-30f};
enum { SPECIALS = sizeof specials / sizeof specials[0] };

/* A subnormal is an input of exact ops only, where IEEE arithmetic leaves
 * no choice. Ops within ulp bounds get the smallest normal float instead:
 * OpenCL and Vulkan both let a device flush subnormals to zero, and
 * lavapipe's log even reads 1e-40 as 2^-127, so no bound holds there. */
static float special(size_t k, int32_t op)
{
    float value = specials[k % SPECIALS];
    return fpclassify(value) == FP_SUBNORMAL && !td_ew_exact(op) ? 0x1p-126f : value;
}

/* a's elements 1..8 and b's 4..11 take the specials, rotated so that in a
 * dense layout they meet each other (0 / -0, a subnormal against 0...). */
static void special_inputs(const td_conformance_case *c, float *const *buffers)
{
    int32_t op = c->calls[0].p.ew.op;
    size_t a_room = td_case_arg_room(c, 0, TD_ROW_A), b_room = td_case_arg_room(c, 0, TD_ROW_B);
    for (size_t k = 0; k < SPECIALS; k++) {
        if (1 + k < a_room)
            td_case_arg(c, buffers, 0, TD_ROW_A)[1 + k] = special(k, op);
        if (4 + k < b_room)
            td_case_arg(c, buffers, 0, TD_ROW_B)[4 + k] = special(k + 3, op);
    }
}

void td_cases_elementwise(td_case_list *list)
{
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (int32_t op = 0; op < TD_EW_OP_COUNT; op++) {
            const ew_layout *row = &layouts[l];
            td_conformance_case *c = td_case_add(list, "elementwise %s: %s", td_ew_name(op), row->what);
            td_kernel_call call = {.kernel = TD_KERNEL_ELEMENTWISE, .p.ew = {.op = op, .alpha = row->alpha}};
            for (int k = 0; k < TD_KERNEL_RANK; k++) {
                call.p.ew.dims[k] = row->dims[k];
                call.p.ew.a_strides[k] = row->a_strides[k];
                call.p.ew.b_strides[k] = row->b_strides[k];
            }
            td_case_call(c, call, row->at, TD_COMPARE_EW);
            c->inputs = special_inputs;
        }
}
