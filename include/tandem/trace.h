/* Traces: a timeline of what every device and the host did, written as
 * Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
 * chrome://tracing open.
 *
 * While a trace is on, a context records:
 *   - per device of every mesh, one track ("device P: backend:index name"):
 *     each program run ("step" for a trainer, "evaluate" for an evaluator,
 *     "run" for td_program_run), and inside it the input upload
 *     (host->device, with bytes), every kernel (named by the graph op that
 *     emitted it, the kernel in args), every collective with its phases
 *     (device->host, reduce-scatter, all-gather, host->device, with
 *     bytes), the optimizer's update of the chunk the device owns, and
 *     the output download (device->host, with bytes);
 *   - one host track: td_trainer_step ("step"), evaluator runs
 *     ("evaluate"), batch assembly (td_data_gather_batch: "batch"), checkpoint
 *     writes and restores, and the caller's own spans (td_trace_span_*).
 * Spans on one track nest: a child starts and ends within its parent.
 *
 * Cost: off, one pointer test per program run and per collective. On,
 * each kernel is timed on its own -- the device finishes one before the
 * next starts, so GPU queues lose their overlap while tracing -- and each
 * event takes a short lock; the events stay in memory (56 bytes each, at
 * most 4 Mi events; later ones are counted and dropped) until
 * td_trace_end writes the file.
 *
 * td_trace_begin / td_trace_end must not be called while the context runs
 * work (a step, an evaluation) on another thread; spans are the host
 * track's and belong to one thread at a time. */
#ifndef TANDEM_TRACE_H
#define TANDEM_TRACE_H

#include "tandem/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording. The file is created now (a new PATH.tmp.<pid>.<n>
 * beside PATH), so an unwritable place is an error here, not after the
 * run: TD_ERR_IO naming the path. PATH must be a regular file or absent:
 * a directory, device node, FIFO, socket or symbolic link there is
 * TD_ERR_INVALID_ARGUMENT naming it and what it is (a link is not
 * followed: the rename would replace the link itself). TD_ERR_STATE when
 * a trace is already on.
 * Since 0.1. */
TD_API td_status td_trace_begin(td_context *ctx, const char *path);

/* Stops recording and writes the file: the temporary file is written,
 * flushed to disk and renamed over PATH, so PATH is never half-written.
 * PATH is checked again right before the rename: what became something
 * other than a regular file meanwhile is TD_ERR_INVALID_ARGUMENT as in
 * td_trace_begin, left as it was, and the temporary file is removed.
 * TD_ERR_STATE when no trace is on. The events are released either way.
 * td_context_destroy ends a trace still on (the file is written).
 * Since 0.1. */
TD_API td_status td_trace_end(td_context *ctx);

/* true while a trace is on.
 * Since 0.1. */
TD_API bool td_trace_active(const td_context *ctx);

/* A span of the caller's on the host track (loading data, an epoch):
 * begin/end pairs nest, at most 32 deep. With no trace on, both do
 * nothing and return TD_OK, so callers need not test (a NULL or empty
 * name is refused either way). span_end without a begin is TD_ERR_STATE.
 * The name is copied.
 * Since 0.1. */
TD_API td_status td_trace_span_begin(td_context *ctx, const char *name);
TD_API td_status td_trace_span_end(td_context *ctx);

#ifdef __cplusplus
}
#endif

#endif
