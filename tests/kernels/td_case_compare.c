/* Comparing a case's device buffers with the reference's (td_case_compare.h). */
#include "td_case_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_call_extents.h"
#include "td_test_compare.h"

/* The bounds of td_case_compare, as the per-backend tests had them. */
#define TD_ELEMENT_RELATIVE 1e-5
#define TD_ELEMENT_ABSOLUTE 1e-6
#define TD_NMSE_BOUND 1e-10

static bool same_bits_or_both_nan(float got, float want)
{
    return memcmp(&got, &want, sizeof got) == 0 || (isnan(got) && isnan(want));
}

/* NaN where the reference has NaN, and the same infinity where it has one. */
static bool same_non_finite(float got, float want)
{
    if (isnan(got) || isnan(want))
        return isnan(got) && isnan(want);
    if (isinf(got) || isinf(want))
        return got == want;
    return true;
}

static bool element_close(float got, float want)
{
    if (!isfinite(got) || !isfinite(want))
        return same_non_finite(got, want);
    return fabs((double)got - (double)want) <= TD_ELEMENT_RELATIVE * fabs((double)want) + TD_ELEMENT_ABSOLUTE;
}

static const char *const slot_names[TD_ROW_SLOTS] = {"out", "out2", "a", "b", "c"};

/* Marks, per buffer element, 1 + the index of the last call that writes it
 * (0: no call does), and the output slot it belongs to. */
static void mark_outputs(const td_conformance_case *c, uint8_t **writer, uint8_t **slot_of)
{
    for (size_t i = 0; i < c->call_count; i++) {
        td_arg_extent ext[TD_ROW_SLOTS];
        td_call_extents(&c->calls[i], ext);
        for (int slot = 0; slot < TD_ROW_SLOTS; slot++) {
            if (!ext[slot].written)
                continue;
            uint8_t b = c->buffer_of[i][slot];
            for (int64_t r = 0; r < ext[slot].rows; r++)
                for (int64_t j = 0; j < ext[slot].row_len; j++) {
                    size_t e = (size_t)td_call_offset(&c->calls[i], slot) + (size_t)(r * ext[slot].row_stride + j);
                    writer[b][e] = (uint8_t)(i + 1);
                    slot_of[b][e] = (uint8_t)slot;
                }
        }
    }
}

typedef struct mismatch {
    size_t count;
    size_t buffer, element;
    float got, want;
} mismatch;

static void note(mismatch *m, size_t buffer, size_t element, float got, float want)
{
    if (m->count++ == 0) {
        m->buffer = buffer;
        m->element = element;
        m->got = got;
        m->want = want;
    }
}

static void describe(const td_conformance_case *c, const mismatch *m, uint8_t **writer, uint8_t **slot_of, char *why,
                     size_t why_size)
{
    uint32_t got_bits, want_bits;
    memcpy(&got_bits, &m->got, 4);
    memcpy(&want_bits, &m->want, 4);
    char where[160];
    uint8_t k = writer[m->buffer][m->element];
    if (k == 0) {
        snprintf(where, sizeof where, "buffer %zu element %zu, which no call writes,", m->buffer, m->element);
    } else {
        const td_kernel_call *call = &c->calls[k - 1];
        int slot = slot_of[m->buffer][m->element];
        snprintf(where, sizeof where, "call %u (%s%s%s) %s element %llu", (unsigned)(k - 1),
                 td_kernel_name(call->kernel), call->kernel == TD_KERNEL_ELEMENTWISE ? " " : "",
                 call->kernel == TD_KERNEL_ELEMENTWISE ? td_ew_name(call->p.ew.op) : "", slot_names[slot],
                 (unsigned long long)(m->element - td_call_offset(call, slot)));
    }
    char more[48] = "";
    if (m->count == 2)
        snprintf(more, sizeof more, "; 1 more element differs");
    else if (m->count > 2)
        snprintf(more, sizeof more, "; %zu more elements differ", m->count - 1);
    snprintf(why, why_size, "%s is %.9g (0x%08x), reference %.9g (0x%08x)%s", where, (double)m->got, got_bits,
             (double)m->want, want_bits, more);
}

bool td_case_results_match(const td_conformance_case *c, float *const *got, float *const *want, char *why,
                           size_t why_size)
{
    uint8_t *writer[TD_CASE_MAX_BUFFERS] = {0}, *slot_of[TD_CASE_MAX_BUFFERS] = {0};
    for (size_t b = 0; b < c->buffer_count; b++) {
        writer[b] = calloc(c->buffer_elems[b] + 1, 1);
        slot_of[b] = calloc(c->buffer_elems[b] + 1, 1);
        if (!writer[b] || !slot_of[b]) {
            snprintf(why, why_size, "out of memory comparing %zu elements", c->buffer_elems[b]);
            for (size_t f = 0; f <= b; f++) {
                free(writer[f]);
                free(slot_of[f]);
            }
            return false;
        }
    }
    mark_outputs(c, writer, slot_of);

    mismatch m = {0};
    double err[TD_CASE_MAX_CALLS] = {0}, norm[TD_CASE_MAX_CALLS] = {0};
    for (size_t b = 0; b < c->buffer_count; b++)
        for (size_t e = 0; e < c->buffer_elems[b]; e++) {
            float g = got[b][e], w = want[b][e];
            uint8_t k = writer[b][e];
            td_case_compare mode = k ? c->compare[k - 1] : TD_COMPARE_BITWISE;
            bool ok = true;
            switch (mode) {
            case TD_COMPARE_BITWISE: ok = same_bits_or_both_nan(g, w); break;
            case TD_COMPARE_EW: ok = td_test_ew_matches(c->calls[k - 1].p.ew.op, g, w); break;
            case TD_COMPARE_ELEMENTS: ok = element_close(g, w); break;
            case TD_COMPARE_NMSE:
                ok = same_non_finite(g, w);
                if (ok && isfinite(w)) {
                    double d = (double)g - (double)w;
                    err[k - 1] += d * d;
                    norm[k - 1] += (double)w * (double)w;
                }
                break;
            }
            if (!ok)
                note(&m, b, e, g, w);
        }

    bool match = m.count == 0;
    if (!match)
        describe(c, &m, writer, slot_of, why, why_size);
    for (size_t i = 0; match && i < c->call_count; i++) {
        if (c->compare[i] != TD_COMPARE_NMSE)
            continue;
        double nmse = norm[i] > 0.0 ? err[i] / norm[i] : err[i];
        if (!(nmse < TD_NMSE_BOUND)) {
            snprintf(why, why_size, "call %zu (%s): normalised MSE %g over its outputs, bound %g", i,
                     td_kernel_name(c->calls[i].kernel), nmse, TD_NMSE_BOUND);
            match = false;
        }
    }
    for (size_t b = 0; b < c->buffer_count; b++) {
        free(writer[b]);
        free(slot_of[b]);
    }
    return match;
}
