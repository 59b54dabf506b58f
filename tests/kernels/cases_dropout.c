/* DROPOUT_MASK: Philox words against the threshold, so bitwise; rows whose
 * width is not a multiple of a Philox block (4 words), example indices that
 * wrap past 2^32. */
#include "td_conformance.h"

#include "td_case_inputs.h"

typedef struct dropout_row {
    const char *what;
    td_dropout_params p;
    uint32_t step, first_example;
    td_case_args at;
} dropout_row;

static const dropout_row rows[] = {
    {"13 x 7, examples wrapping past 2^32",
     {13, 7, 0xdeadbeefu, 0x12345678u, 3006477107u, 1.0f / 0.7f}, 17, 0xfffffffbu,
     {.out = {0, 6000}, .b = {0, 4000}}},
    {"30 x 64, examples wrapping past 2^32",
     {30, 64, 0xdeadbeefu, 0x12345678u, 3006477107u, 1.0f / 0.7f}, 17, 0xfffffffbu,
     {.out = {0, 6000}, .b = {0, 4000}}},
    {"5 x 11, keep half, two buffers", {5, 11, 7, 8, 1u << 31, 2.0f}, 3, 1000, {.out = {0, 5}, .b = {1, 0}}},
    {"1 x 1", {1, 1, 1, 2, 1u << 30, 4.0f}, 0, 0, {.out = {0, 1}, .b = {1, 1}}},
};

static void step_words(const td_conformance_case *c, float *const *buffers)
{
    const dropout_row *row = c->row;
    uint32_t *words = (uint32_t *)td_case_arg(c, buffers, 0, TD_ROW_B);
    words[0] = row->step;
    words[1] = row->first_example;
}

void td_cases_dropout(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        td_conformance_case *c = td_case_add(list, "dropout mask %s", rows[i].what);
        td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_DROPOUT_MASK, .p.dropout = rows[i].p}, rows[i].at,
                     TD_COMPARE_BITWISE);
        c->row = &rows[i];
        c->inputs = step_words;
    }
}
