#include "mpi_test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *counting_alloc(void *user, size_t bytes, size_t alignment)
{
    (*(uint64_t *)user)++;
    return aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

static void counting_free(void *user, void *ptr)
{
    (void)user;
    free(ptr);
}

td_context *mt_start(mt_run *run, int argc, char **argv)
{
    (void)argc, (void)argv;
    memset(run, 0, sizeof *run);
    td_context_options o;
    td_context_options_init(&o);
    o.timeout_ms = 20000;
    o.allocator = (td_allocator){counting_alloc, counting_free, &run->allocations};
    td_context *ctx = NULL;
    if (td_context_create(&o, &ctx) != TD_OK) {
        fprintf(stderr, "td_context_create failed\n");
        exit(1);
    }
    if (td_processes_join(ctx) != TD_OK) {
        fprintf(stderr, "td_processes_join: %s\n", td_last_error(ctx));
        exit(1);
    }
    td_processes_rank(ctx, &run->rank, &run->count);
    return ctx;
}

td_mesh *mt_mesh(mt_run *run, td_context *ctx, const char *counts)
{
    const char *at = counts;
    for (uint32_t q = 0; q < run->rank && strchr(at, '/'); q++)
        at = strchr(at, '/') + 1;
    char spec[128];
    const size_t len = strchr(at, '/') ? (size_t)(strchr(at, '/') - at) : strlen(at);
    if (memchr(at, ':', len)) /* a whole spec for this process, e.g. cpu:1@slow=4 */
        snprintf(spec, sizeof spec, "%.*s", (int)len, at);
    else
        snprintf(spec, sizeof spec, "cpu:%d", atoi(at));
    td_mesh *mesh = NULL;
    MT_OK(run, ctx, td_mesh_create(ctx, spec, &mesh));
    return mesh;
}

bool mt_check(mt_run *run, bool ok, const char *fmt, ...)
{
    if (ok) {
        run->passed++;
        return true;
    }
    run->failed++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "process %u: FAILED: ", run->rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return false;
}

void mt_ok(mt_run *run, td_context *ctx, td_status s, const char *call, int line)
{
    if (s == TD_OK)
        return;
    fprintf(stderr, "process %u: line %d: %s: %s: %s\n", run->rank, line, call, td_status_name(s),
            td_last_error(ctx));
    td_processes_abort(ctx, 2);
    exit(2);
}

uint64_t mt_hash(uint64_t h, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

bool mt_same_on_every_process(mt_run *run, td_context *ctx, uint64_t value)
{
    double *slots = calloc(2 * (size_t)run->count, sizeof *slots);
    slots[2 * run->rank] = (double)(value >> 32);
    slots[2 * run->rank + 1] = (double)(value & 0xFFFFFFFFu);
    MT_OK(run, ctx, td_processes_sum(ctx, slots, 2 * run->count));
    bool same = true;
    for (uint32_t q = 0; q < run->count; q++)
        same = same && slots[2 * q] == slots[0] && slots[2 * q + 1] == slots[1];
    free(slots);
    return same;
}

int mt_finish(mt_run *run, td_context *ctx)
{
    double counts[2] = {run->passed, run->failed};
    MT_OK(run, ctx, td_processes_sum(ctx, counts, 2));
    if (run->rank == 0)
        printf("%.0f passed, %.0f failed\n", counts[0], counts[1]);
    td_context_destroy(ctx);
    return counts[1] == 0 ? 0 : 1;
}
