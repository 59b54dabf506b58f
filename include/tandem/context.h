/* tandem — the context.
 *
 * A context owns everything tandem creates: meshes, graphs, programs,
 * trainers. Two contexts share no state, so an application may run several
 * independent engines side by side. A context is used from one application
 * thread at a time; tandem's own worker threads are managed internally. */
#ifndef TANDEM_CONTEXT_H
#define TANDEM_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "tandem/export.h"
#include "tandem/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_context td_context;

typedef enum td_log_level {
    TD_LOG_DEBUG = 0,
    TD_LOG_INFO = 1,
    TD_LOG_WARN = 2,
    TD_LOG_ERROR = 3,
} td_log_level;

/* Host allocator hooks. `alloc` must return memory aligned to `alignment`
 * (a power of two, at most 4096) or NULL; `free` receives what `alloc` gave. */
typedef struct td_allocator {
    void *(*alloc)(void *user, size_t bytes, size_t alignment);
    void (*free)(void *user, void *ptr);
    void *user;
} td_allocator;

typedef void (*td_log_fn)(void *user, td_log_level level, const char *message);

typedef struct td_context_options {
    /* sizeof(td_context_options), so the struct can grow without breaking
     * callers built against an older header. 0 is taken as the current size. */
    size_t struct_size;
    /* NULL members mean the C library's aligned allocation. */
    td_allocator allocator;
    /* NULL means silent. Called from worker threads too: must be thread-safe. */
    td_log_fn log;
    void *log_user;
    td_log_level log_level;
    /* Upper bound for every blocking wait inside tandem (a collective waiting
     * for a peer, a device finishing its queue). 0 means 60000 ms. */
    uint32_t timeout_ms;
} td_context_options;

/* Fills `options` with the defaults (no allocator hooks, silent log, 60 s
 * timeout). Always succeeds unless `options` is NULL. */
TD_API td_status td_context_options_init(td_context_options *options);

/* Creates a context. `options` may be NULL for the defaults. On failure *out is
 * NULL and the status says why (there is no context to hold a message yet). */
TD_API td_status td_context_create(const td_context_options *options, td_context **out);

/* Destroys the context and everything still owned by it. NULL is ignored. */
TD_API void td_context_destroy(td_context *ctx);

/* The message of the most recent failure of a call on this context, naming
 * the value at fault and what was expected; "" when nothing has failed. The
 * pointer stays valid until the next call on the context. */
TD_API const char *td_last_error(const td_context *ctx);

/* The status of that most recent failure (TD_OK when none). */
TD_API td_status td_last_status(const td_context *ctx);

/* The library version as "MAJOR.MINOR.PATCH", which may differ from the
 * TD_VERSION_STRING a program was compiled with. */
TD_API const char *td_version_string(void);

/* The library version as MAJOR*10000 + MINOR*100 + PATCH. */
TD_API int td_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
