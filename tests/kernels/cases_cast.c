/* CAST from packed bytes (starting inside an element slot's run of four,
 * odd counts) and from int32 words that float cannot hold exactly (rounded
 * to nearest even). Exact: bitwise. */
#include "td_conformance.h"

#include <string.h>

#include "td_case_inputs.h"

typedef struct cast_row {
    const char *what;
    td_cast_params p;
    td_case_args at;
} cast_row;

static const cast_row rows[] = {
    {"u8, 1001 bytes from element 13", {1001, TD_CAST_U8}, {.out = {0, 3000}, .a = {0, 13}}},
    {"u8, 17 bytes, two buffers", {17, TD_CAST_U8}, {.out = {0, 5}, .a = {1, 1}}},
    {"u8, 3 bytes", {3, TD_CAST_U8}, {.out = {0, 2}, .a = {1, 0}}},
    {"u8, nothing", {0, TD_CAST_U8}, {.out = {0, 2}, .a = {1, 0}}},
    {"i32, 333 words with values float rounds", {333, TD_CAST_I32}, {.out = {0, 3000}, .a = {0, 100}}},
};

/* The random floats' bits are the bytes and most of the words; these come
 * first among the words. */
static void cast_inputs(const td_conformance_case *c, float *const *buffers)
{
    static const int32_t specials[] = {16777217, 16777219, -16777219, INT32_MAX, INT32_MIN, 33554435, -1, 0};
    if (c->calls[0].p.cast.from == TD_CAST_I32)
        memcpy(td_case_arg(c, buffers, 0, TD_ROW_A), specials, sizeof specials);
}

void td_cases_cast(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        td_conformance_case *c = td_case_add(list, "cast %s", rows[i].what);
        td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_CAST, .p.cast = rows[i].p}, rows[i].at,
                     TD_COMPARE_BITWISE);
        c->inputs = cast_inputs;
    }
}
