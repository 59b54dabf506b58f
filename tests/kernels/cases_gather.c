/* GATHER_ROWS and SCATTER_ADD_ROWS with repeated ids and ids outside
 * [0, vocab) (a NaN row when gathering, ignored when scattering).
 * Scatter-add sums in id order, as the contract fixes: bitwise. */
#include "td_conformance.h"

#include "td_case_inputs.h"

typedef enum id_pattern {
    STRIDED, /* ids[i] = (7 i) % 53 - 1, with ids[10] = INT32_MIN */
    SIX,     /* 0, 4, 9, -1, 10, 3 */
} id_pattern;

typedef struct gather_row {
    const char *what;
    int32_t kernel;
    td_gather_params p;
    id_pattern ids;
    td_case_args at;
} gather_row;

static const gather_row rows[] = {
    {"61 ids of a 50 x 9 table, one buffer", TD_KERNEL_GATHER_ROWS, {61, 50, 9}, STRIDED,
     {.out = {0, 5000}, .a = {0, 1}, .b = {0, 4100}}},
    {"61 ids into a 50 x 9 table, one buffer", TD_KERNEL_SCATTER_ADD_ROWS, {61, 50, 9}, STRIDED,
     {.out = {0, 5000}, .a = {0, 500}, .b = {0, 4100}}},
    {"6 ids of a 10 x 7 table, three buffers", TD_KERNEL_GATHER_ROWS, {6, 10, 7}, SIX,
     {.out = {2, 5}, .a = {0, 5}, .b = {1, 0}}},
    {"6 ids into a 10 x 7 table, three buffers", TD_KERNEL_SCATTER_ADD_ROWS, {6, 10, 7}, SIX,
     {.out = {2, 5}, .a = {0, 2}, .b = {1, 0}}},
    {"no ids", TD_KERNEL_GATHER_ROWS, {0, 10, 7}, SIX, {.out = {2, 5}, .a = {0, 2}, .b = {1, 0}}},
    {"no ids: the table is zeroed", TD_KERNEL_SCATTER_ADD_ROWS, {0, 10, 7}, SIX,
     {.out = {2, 5}, .a = {0, 2}, .b = {1, 0}}},
};

static void ids_input(const td_conformance_case *c, float *const *buffers)
{
    static const int32_t six[] = {0, 4, 9, -1, 10, 3};
    const gather_row *row = c->row;
    int32_t *ids = (int32_t *)td_case_arg(c, buffers, 0, TD_ROW_B);
    for (int64_t i = 0; i < row->p.n; i++)
        ids[i] = row->ids == SIX ? six[i % 6] : (int32_t)((i * 7) % 53 - 1);
    if (row->ids == STRIDED && row->p.n > 10)
        ids[10] = INT32_MIN;
}

void td_cases_gather(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const gather_row *row = &rows[i];
        td_conformance_case *c = td_case_add(list, "%s %s", td_kernel_name(row->kernel), row->what);
        td_case_call(c, (td_kernel_call){.kernel = row->kernel, .p.gather = row->p}, row->at, TD_COMPARE_BITWISE);
        c->row = row;
        c->inputs = ids_input;
    }
}
