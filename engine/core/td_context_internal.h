/* What the engine and the backends use of a context: allocation through the
 * caller's hooks, error messages, logging, the wait timeout. */
#ifndef TD_CONTEXT_INTERNAL_H
#define TD_CONTEXT_INTERNAL_H

#include <stddef.h>

#include "tandem/context.h"

#if defined(__GNUC__)
#  define TD_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#  define TD_PRINTF(fmt_index, first_arg)
#endif

/* Host memory through the context's allocator, 64-byte aligned. td_alloc
 * returns NULL when out of memory (the caller reports it). */
void *td_alloc(td_context *ctx, size_t bytes);
void *td_alloc_zeroed(td_context *ctx, size_t bytes);
void *td_alloc_aligned(td_context *ctx, size_t bytes, size_t alignment);
void td_free(td_context *ctx, void *ptr);

/* Records status and message as the context's last error and returns status,
 * so callers can write `return td_error_set(ctx, TD_ERR_..., "...", ...);`.
 * Thread-safe. A TD_ERR_ABORTED (a worker giving up because a peer failed)
 * never overwrites a primary error recorded since td_error_clear. */
td_status td_error_set(td_context *ctx, td_status status, const char *fmt, ...) TD_PRINTF(3, 4);
void td_error_clear(td_context *ctx);

void td_log(td_context *ctx, td_log_level level, const char *fmt, ...) TD_PRINTF(3, 4);

/* The wait bound every blocking wait in tandem must respect. */
uint32_t td_context_timeout_ms(const td_context *ctx);

/* Objects the context owns (meshes, graphs, programs), so td_context_destroy
 * can release what the caller forgot. Each links itself on creation and
 * unlinks on destruction; destroy() must unlink. */
typedef struct td_owned {
    struct td_owned *prev, *next;
    void (*destroy)(struct td_owned *self);
} td_owned;
void td_context_own(td_context *ctx, td_owned *object, void (*destroy)(td_owned *));
void td_context_disown(td_context *ctx, td_owned *object);

/* Convenience for allocation failures. */
#define TD_OOM(ctx, what, bytes) \
    td_error_set((ctx), TD_ERR_OUT_OF_MEMORY, "out of host memory allocating %zu bytes for %s", \
                 (size_t)(bytes), (what))

#endif
