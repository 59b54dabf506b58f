/* What the multi-process tests share: start (a context that joined the
 * job), checks counted on every process, a hash compared across
 * processes, and one closing line on rank 0. These are plain programs, not
 * Criterion suites: MPI cannot start in the children Criterion forks. */
#ifndef MPI_TEST_UTIL_H
#define MPI_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

typedef struct mt_run {
    uint32_t rank, count;
    uint32_t passed, failed;
    uint64_t allocations; /* through the joined context's allocator, so far */
} mt_run;

/* A context (20 s timeout, its allocations counted in run->allocations)
 * that joined the job; ends the job on failure. */
td_context *mt_start(mt_run *run, int argc, char **argv);
/* This process's mesh from "N" (cpu:N for all), "N0/N1/..." (one count
 * per process) or whole specs per process ("cpu:1/cpu:1@slow=4"). */
td_mesh *mt_mesh(mt_run *run, td_context *ctx, const char *counts);
/* Counts a check; prints a failure with the rank. */
bool mt_check(mt_run *run, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A call that must succeed: otherwise the message, and the whole job ends
 * (the other processes would wait for this one). */
void mt_ok(mt_run *run, td_context *ctx, td_status s, const char *call, int line);
#define MT_OK(run, ctx, call) mt_ok((run), (ctx), (call), #call, __LINE__)
uint64_t mt_hash(uint64_t h, const void *data, size_t bytes);
/* Whether every process passed the same 64-bit value. Collective. */
bool mt_same_on_every_process(mt_run *run, td_context *ctx, uint64_t value);
/* Sums the counts over the processes, prints "N passed, N failed" on rank
 * 0, destroys ctx; the exit status. Collective. */
int mt_finish(mt_run *run, td_context *ctx);

#endif
