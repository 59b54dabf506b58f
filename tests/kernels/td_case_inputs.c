/* Random inputs and argument addresses for the families (td_case_inputs.h). */
#include "td_case_inputs.h"

#include "td_call_extents.h"

void td_case_random(float *x, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffffff) / 8388608.0f - 1.0f;
    }
}

float *td_case_arg(const td_conformance_case *c, float *const *buffers, size_t call, int slot)
{
    return buffers[c->buffer_of[call][slot]] + td_call_offset(&c->calls[call], slot);
}

size_t td_case_arg_room(const td_conformance_case *c, size_t call, int slot)
{
    size_t elems = c->buffer_elems[c->buffer_of[call][slot]];
    uint64_t offset = td_call_offset(&c->calls[call], slot);
    return offset < elems ? elems - (size_t)offset : 0;
}
