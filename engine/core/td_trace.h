/* The engine's side of tracing (tandem/trace.h): where the layers record
 * spans. Every caller first asks td_trace_of(ctx); NULL (tracing off) is
 * the whole cost of the feature when it is off. */
#ifndef TD_TRACE_H
#define TD_TRACE_H

#include <stdint.h>

#include "tandem/trace.h"
#include "td_context_internal.h"

typedef struct td_trace td_trace;
struct td_mesh_device;

/* The host track's id; device tracks get theirs from td_trace_device_track. */
enum { TD_TRACE_HOST = 0 };

/* The context's trace while one is on, else NULL. */
td_trace *td_trace_of(const td_context *ctx);

/* Nanoseconds on the monotonic clock: the stamps every span takes. */
uint64_t td_trace_now(void);

/* The track of one mesh device (created, and named after the device, the
 * first time it is asked for). */
uint32_t td_trace_device_track(td_trace *t, const struct td_mesh_device *md);

/* Records [begin, end) on `track`. name, category and detail must be
 * static strings (op and kernel names, literals); detail and bytes are
 * the event's args ("kernel", "bytes") when non-NULL / non-zero. Safe from
 * any thread. */
void td_trace_span(td_trace *t, uint32_t track, const char *category, const char *name, const char *detail,
                   uint64_t begin, uint64_t end, uint64_t bytes);

#endif
