/* Running cases on a device through the backend vtable, and on the
 * reference, and telling what differs (td_conformance.h). */
#include "td_conformance.h"

#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_call_extents.h"
#include "td_case_compare.h"
#include "td_case_inputs.h"
#include "td_conformance_reference.h"
#include "tandem/context.h"

/* Failures logged one by one before the rest are only counted: a backend
 * that fails everything should not bury the first messages. */
enum { TD_LOGGED_FAILURES = 40 };

/* Generous: the slowest case is a few GEMMs on a CPU OpenCL device. */
enum { TD_CASE_WAIT_MS = 60000 };

/* A case's host memory: the inputs and the reference's results, made once
 * and shared by every device, and one device's results at a time. */
typedef struct case_memory {
    float *inputs[TD_CASE_MAX_BUFFERS], *want[TD_CASE_MAX_BUFFERS], *got[TD_CASE_MAX_BUFFERS];
    float *first[TD_CASE_MAX_BUFFERS]; /* devices[0]'s results, when it matched */
    bool have_first;
} case_memory;

static float *host_floats(size_t elems)
{
    return malloc((elems ? elems : 1) * sizeof(float));
}

static void release_host(const td_conformance_case *c, case_memory *m)
{
    for (size_t b = 0; b < c->buffer_count; b++) {
        free(m->inputs[b]);
        free(m->want[b]);
        free(m->got[b]);
        free(m->first[b]);
    }
}

static bool expected_results(const td_conformance_case *c, case_memory *m, char *why, size_t why_size)
{
    for (size_t b = 0; b < c->buffer_count; b++) {
        m->inputs[b] = host_floats(c->buffer_elems[b]);
        m->want[b] = host_floats(c->buffer_elems[b]);
        m->got[b] = host_floats(c->buffer_elems[b]);
        m->first[b] = host_floats(c->buffer_elems[b]);
        if (!m->inputs[b] || !m->want[b] || !m->got[b] || !m->first[b]) {
            snprintf(why, why_size, "out of host memory");
            return false;
        }
        td_case_random(m->inputs[b], c->buffer_elems[b], c->seed + 7919u * (uint32_t)b);
    }
    if (c->inputs)
        c->inputs(c, m->inputs);
    for (size_t b = 0; b < c->buffer_count; b++)
        memcpy(m->want[b], m->inputs[b], c->buffer_elems[b] * sizeof(float));
    for (size_t i = 0; i < c->call_count; i++) {
        td_arg_extent ext[TD_ROW_SLOTS];
        td_call_extents(&c->calls[i], ext);
        float *at[TD_ROW_SLOTS];
        for (int slot = 0; slot < TD_ROW_SLOTS; slot++)
            at[slot] = ext[slot].used ? td_case_arg(c, m->want, i, slot) : NULL;
        if (!td_conformance_reference(&c->calls[i], at)) {
            snprintf(why, why_size, "the reference has no kernel %d (%s)", (int)c->calls[i].kernel,
                     td_kernel_name(c->calls[i].kernel));
            return false;
        }
    }
    return true;
}

static bool failed(const td_conformance_device *d, td_status st, const char *what, char *why, size_t why_size)
{
    snprintf(why, why_size, "%s returned %s: %s", what, td_status_name(st), td_last_error(d->ctx));
    return false;
}

/* Uploads the inputs, runs the calls as one segment and reads every buffer
 * back into m->got: one submission, waited on once. */
static bool device_results(const td_conformance_device *d, const td_conformance_case *c, case_memory *m,
                           td_buffer **device, char *why, size_t why_size)
{
    const td_backend_ops *ops = d->ops;
    td_status st;
    for (size_t b = 0; b < c->buffer_count; b++) {
        size_t bytes = c->buffer_elems[b] * sizeof(float);
        if ((st = ops->buffer_create(d->dev, bytes, &device[b])) != TD_OK)
            return failed(d, st, "buffer_create", why, why_size);
        if ((st = ops->write(d->dev, device[b], 0, m->inputs[b], bytes)) != TD_OK)
            return failed(d, st, "write", why, why_size);
    }
    td_kernel_call calls[TD_CASE_MAX_CALLS];
    for (size_t i = 0; i < c->call_count; i++) {
        calls[i] = c->calls[i];
        td_arg_extent ext[TD_ROW_SLOTS];
        td_call_extents(&calls[i], ext);
        for (int slot = 0; slot < TD_ROW_SLOTS; slot++)
            if (ext[slot].used)
                td_call_arg(&calls[i], slot)->buffer = device[c->buffer_of[i][slot]];
    }
    td_segment *segment = NULL;
    if ((st = ops->segment_create(d->dev, calls, c->call_count, &segment)) != TD_OK)
        return failed(d, st, "segment_create", why, why_size);
    st = ops->segment_run(d->dev, segment);
    for (size_t b = 0; st == TD_OK && b < c->buffer_count; b++)
        st = ops->read(d->dev, device[b], 0, m->got[b], c->buffer_elems[b] * sizeof(float));
    uint64_t ticket = 0;
    if (st == TD_OK)
        st = ops->submit(d->dev, &ticket);
    if (st == TD_OK)
        st = ops->wait(d->dev, ticket, TD_CASE_WAIT_MS);
    ops->segment_destroy(d->dev, segment);
    return st == TD_OK || failed(d, st, "segment_run, read, submit or wait", why, why_size);
}

static bool device_matches(const td_conformance_device *d, const td_conformance_case *c, case_memory *m, char *why,
                           size_t why_size)
{
    td_buffer *device[TD_CASE_MAX_BUFFERS] = {0};
    bool ok = device_results(d, c, m, device, why, why_size) &&
              td_case_results_match(c, m->got, m->want, why, why_size);
    for (size_t b = 0; ok && d->bitwise_as_first && m->have_first && b < c->buffer_count; b++)
        if (memcmp(m->got[b], m->first[b], c->buffer_elems[b] * sizeof(float)) != 0) {
            size_t e = 0;
            while (memcmp(&m->got[b][e], &m->first[b][e], sizeof(float)) == 0)
                e++;
            snprintf(why, why_size, "buffer %zu element %zu is %.9g, not the first device's %.9g (the same bits expected)",
                     b, e, (double)m->got[b][e], (double)m->first[b][e]);
            ok = false;
        }
    for (size_t b = 0; b < c->buffer_count; b++)
        if (device[b])
            d->ops->buffer_destroy(d->dev, device[b]);
    return ok;
}

static void log_failure(const td_conformance_device *d, size_t failures, const char *name, const char *why)
{
    if (failures <= TD_LOGGED_FAILURES)
        cr_log_error("%s: %s: %s", d->label, name, why);
    else if (failures == TD_LOGGED_FAILURES + 1)
        cr_log_error("%s: more cases fail; only the first %d are listed", d->label, TD_LOGGED_FAILURES);
}

size_t td_conformance_run(const td_conformance_device *devices, size_t device_count, const td_case_list *cases,
                          size_t *failures)
{
    const char *filter = getenv("TD_CONFORMANCE_FILTER");
    const char *trace = getenv("TD_CONFORMANCE_TRACE");
    bool tracing = trace && strcmp(trace, "1") == 0;
    size_t ran = 0;
    for (size_t d = 0; d < device_count; d++)
        failures[d] = 0;
    for (size_t i = 0; i < cases->count; i++) {
        const td_conformance_case *c = &cases->cases[i];
        if (filter && !strstr(c->name, filter))
            continue;
        ran++;
        char why[512] = "";
        case_memory m = {0};
        bool ready = expected_results(c, &m, why, sizeof why);
        for (size_t d = 0; d < device_count; d++) {
            if (tracing)
                fprintf(stderr, "%s: %s\n", devices[d].label, c->name);
            if (!ready || !device_matches(&devices[d], c, &m, why, sizeof why))
                log_failure(&devices[d], ++failures[d], c->name, why);
            else if (d == 0) {
                for (size_t b = 0; b < c->buffer_count; b++)
                    memcpy(m.first[b], m.got[b], c->buffer_elems[b] * sizeof(float));
                m.have_first = true;
            }
        }
        release_host(c, &m);
    }
    return ran;
}

static bool check_rejection(const td_conformance_device *d, const td_rejection_case *r, char *why, size_t why_size)
{
    td_buffer *buffer = NULL;
    td_status st = d->ops->buffer_create(d->dev, r->buffer_elems * sizeof(float), &buffer);
    if (st != TD_OK)
        return failed(d, st, "buffer_create", why, why_size);
    td_kernel_call calls[2];
    for (size_t i = 0; i < r->call_count; i++) {
        calls[i] = r->calls[i];
        for (int slot = 0; slot < TD_ROW_SLOTS; slot++) {
            bool unbound = i + 1 == r->call_count && (r->unbound & (1u << slot));
            td_call_arg(&calls[i], slot)->buffer = unbound ? NULL : buffer;
        }
    }
    td_segment *segment = NULL;
    st = d->ops->segment_create(d->dev, calls, r->call_count, &segment);
    const char *message = td_last_error(d->ctx);
    bool ok = st == r->status && segment == NULL;
    if (!ok)
        snprintf(why, why_size, "segment_create returned %s%s, expected %s (message: %s)", td_status_name(st),
                 segment ? " and a segment" : "", td_status_name(r->status), st == TD_OK ? "none" : message);
    for (size_t k = 0; ok && k < sizeof r->mentions / sizeof r->mentions[0] && r->mentions[k]; k++)
        if (!strstr(message, r->mentions[k])) {
            snprintf(why, why_size, "the message does not mention '%s': %s", r->mentions[k], message);
            ok = false;
        }
    if (segment)
        d->ops->segment_destroy(d->dev, segment);
    d->ops->buffer_destroy(d->dev, buffer);
    return ok;
}

size_t td_conformance_run_rejections(const td_conformance_device *d, size_t *ran)
{
    size_t count = 0, failures = 0;
    const td_rejection_case *cases = td_rejection_cases(&count);
    for (size_t i = 0; i < count; i++) {
        char why[512] = "";
        if (!check_rejection(d, &cases[i], why, sizeof why))
            log_failure(d, ++failures, cases[i].name, why);
    }
    *ran = count;
    return failures;
}
