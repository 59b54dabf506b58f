/* FILL and COPY: exact, so bit for bit. */
#include "td_conformance.h"

typedef struct fill_copy_row {
    const char *what;
    int32_t kernel;
    int64_t n;
    float alpha;
    td_case_args at;
} fill_copy_row;

static const fill_copy_row rows[] = {
    {"odd count at an offset", TD_KERNEL_FILL, 1001, -2.5f, {.out = {0, 37}}},
    {"one element", TD_KERNEL_FILL, 1, 7.0f, {.out = {0, 3}}},
    {"nothing", TD_KERNEL_FILL, 0, 1.0f, {.out = {0, 0}}},
    {"300 at 5", TD_KERNEL_FILL, 300, 2.5f, {.out = {0, 5}}},
    {"forward within one buffer", TD_KERNEL_COPY, 1234, 0.0f, {.out = {0, 1500}, .a = {0, 3}}},
    {"backward within one buffer", TD_KERNEL_COPY, 777, 0.0f, {.out = {0, 2}, .a = {0, 1000}}},
    /* out aliasing a exactly: every element stays. */
    {"onto itself", TD_KERNEL_COPY, 100, 0.0f, {.out = {0, 5}, .a = {0, 5}}},
    {"between buffers", TD_KERNEL_COPY, 300, 0.0f, {.out = {1, 5}, .a = {0, 5}}},
    {"nothing", TD_KERNEL_COPY, 0, 0.0f, {.out = {1, 0}, .a = {0, 0}}},
};

void td_cases_fill_copy(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const fill_copy_row *r = &rows[i];
        td_conformance_case *c = td_case_add(list, "%s %lld: %s", td_kernel_name(r->kernel), (long long)r->n, r->what);
        td_case_call(c, (td_kernel_call){.kernel = r->kernel, .n = r->n, .alpha = r->alpha}, r->at,
                     TD_COMPARE_BITWISE);
    }
    /* Independent calls in one segment, two of them on disjoint ranges of
     * one buffer. */
    td_conformance_case *c = td_case_add(list, "two fills and a copy in one segment");
    td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_FILL, .n = 100, .alpha = 1.0f}, (td_case_args){.out = {0, 0}},
                 TD_COMPARE_BITWISE);
    td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_FILL, .n = 100, .alpha = 2.0f},
                 (td_case_args){.out = {0, 100}}, TD_COMPARE_BITWISE);
    td_case_call(c, (td_kernel_call){.kernel = TD_KERNEL_COPY, .n = 100}, (td_case_args){.out = {1, 0}, .a = {2, 0}},
                 TD_COMPARE_BITWISE);
}
