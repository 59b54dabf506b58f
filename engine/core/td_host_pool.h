/* The host thread pool: the cores a context's simulated CPU devices leave
 * idle, lent to those devices' kernels.
 *
 * One pool per context, sized to the machine (td_context_options
 * cpu_threads, or the online cores shared among the job's processes on this
 * machine). Each CPU device is driven by its own engine worker; when fewer
 * devices than pool threads are open, a device's worker splits a kernel
 * call into tasks and the pool's helper threads take some of them, so
 * cpu:1 on an 8-core machine uses 8 cores. With as many devices as threads
 * or more, every device runs alone (team of one) and the helpers sleep:
 * nothing spins on a core a device needs.
 *
 * The pool decides who runs a task, never what a task computes: the caller
 * splits a call the same way whatever the team (backends/cpu/cpu_split.c),
 * so results are bitwise identical at any thread count. */
#ifndef TD_HOST_POOL_H
#define TD_HOST_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "td_context_internal.h"

typedef struct td_host_pool td_host_pool;

/* One task: fn(arg, task), task in [0, count). Tasks of one run must not
 * depend on each other's order; they run on the caller and on helpers. */
typedef void (*td_host_task_fn)(void *arg, int64_t task);

/* A user (an open CPU device) takes the context's pool, which is made
 * with its helper threads at the first taker; NULL (with the error
 * recorded) when that fails. Each user's team is the pool's threads
 * divided among its users, at least one. Releasing the last user stops
 * and frees the pool: no helper thread outlives the devices. Both are
 * thread-safe. */
td_host_pool *td_context_host_pool_acquire(td_context *ctx);
void td_context_host_pool_release(td_context *ctx);

/* The pool while a CPU device holds it, else NULL: for host work done
 * during a run on a device's worker (the optimizer's update of its chunk),
 * which borrows the same spare threads. Valid while the mesh that holds
 * the devices is running; thread-safe. */
td_host_pool *td_context_host_pool_in_use(td_context *ctx);

/* The pool's size in threads, the callers included (>= 1). */
uint32_t td_host_pool_threads(const td_host_pool *pool);
uint32_t td_host_pool_team(const td_host_pool *pool);

/* Runs every task of [0, count) on the calling thread and at most team - 1
 * helpers, returning once all of them have run. The caller takes tasks
 * too, so a run completes even if no helper is free. Allocates nothing. */
void td_host_pool_run(td_host_pool *pool, int64_t count, td_host_task_fn fn, void *arg);

/* For tests: split every call that can be split, however small, so that
 * small kernel cases run in parts too. Off by default. */
void td_host_pool_set_split_everything(td_host_pool *pool, bool on);
bool td_host_pool_split_everything(const td_host_pool *pool);

/* For tests: how many runs have been offered to the helpers so far (a
 * count that wraps; compare differences). A run kept on the calling
 * thread -- one task, or a team of one -- is not offered. */
uint32_t td_host_pool_offers(const td_host_pool *pool);

/* The default size: `requested` when nonzero, else the online cores
 * divided by the processes Open MPI started on this machine
 * (OMPI_COMM_WORLD_LOCAL_SIZE), at least one. */
uint32_t td_host_pool_default_threads(uint32_t requested);

#endif
