/* Building the case table: cases appended to a growing list, calls placed
 * in buffers that grow to hold what they touch. */
#include "td_conformance.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_call_extents.h"

/* Elements left after the furthest one a call touches, so that a write
 * past an argument's end lands in compared memory. */
enum { TD_CASE_TAIL = 5 };

td_conformance_case *td_case_add(td_case_list *list, const char *name_format, ...)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 256;
        td_conformance_case *grown = realloc(list->cases, capacity * sizeof *grown);
        cr_assert_not_null(grown, "out of memory for %zu cases", capacity);
        list->cases = grown;
        list->capacity = capacity;
    }
    td_conformance_case *c = &list->cases[list->count++];
    memset(c, 0, sizeof *c);
    va_list args;
    va_start(args, name_format);
    vsnprintf(c->name, sizeof c->name, name_format, args);
    va_end(args);
    /* A stream of random floats per case, from its name (FNV-1a): the same
     * inputs whichever list the case is built into, every run. */
    uint32_t seed = 2166136261u;
    for (const char *p = c->name; *p; p++)
        seed = (seed ^ (uint8_t)*p) * 16777619u;
    c->seed = seed;
    return c;
}

static const td_case_at *arg_place(const td_case_args *at, int slot)
{
    const td_case_at *places[TD_ROW_SLOTS] = {&at->out, &at->out2, &at->a, &at->b, &at->c};
    return places[slot];
}

void td_case_call(td_conformance_case *c, td_kernel_call call, td_case_args at, td_case_compare compare)
{
    cr_assert_lt(c->call_count, TD_CASE_MAX_CALLS, "%s: more than %d calls", c->name, TD_CASE_MAX_CALLS);
    td_arg_extent ext[TD_ROW_SLOTS];
    cr_assert(td_call_extents(&call, ext), "%s: td_call_extents does not know kernel %d (%s)", c->name,
              (int)call.kernel, td_kernel_name(call.kernel));
    size_t index = c->call_count++;
    for (int slot = 0; slot < TD_ROW_SLOTS; slot++) {
        const td_case_at *place = arg_place(&at, slot);
        td_arg *arg = td_call_arg(&call, slot);
        arg->buffer = NULL;
        arg->offset = place->offset;
        c->buffer_of[index][slot] = place->buffer;
        if (!ext[slot].used)
            continue;
        cr_assert_lt(place->buffer, TD_CASE_MAX_BUFFERS, "%s: buffer %u", c->name, (unsigned)place->buffer);
        size_t need = (size_t)place->offset + (size_t)ext[slot].end + TD_CASE_TAIL;
        if (c->buffer_elems[place->buffer] < need)
            c->buffer_elems[place->buffer] = need;
        if (c->buffer_count <= place->buffer)
            c->buffer_count = (size_t)place->buffer + 1;
    }
    c->calls[index] = call;
    c->compare[index] = compare;
}

void td_case_list_free(td_case_list *list)
{
    free(list->cases);
    memset(list, 0, sizeof *list);
}

void td_cases_all(td_case_list *list)
{
#define TD_CONFORMANCE_ADD_FAMILY(arg, family) td_cases_##family(arg);
    TD_CONFORMANCE_FAMILIES(TD_CONFORMANCE_ADD_FAMILY, list)
#undef TD_CONFORMANCE_ADD_FAMILY
}
