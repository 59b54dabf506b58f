/* The direct all-reduce: for a mesh whose every device is a CPU device of
 * this process (td_ring_direct).
 *
 * The ring proper suits devices that only see their own memory: each rank
 * reads its predecessor's chunk, N-1 steps to reduce and N-1 to gather,
 * about 5(N-1) passes of S bytes over memory in all, on N threads. CPU
 * devices of one process share one address space, so every rank's buffer
 * can be read in place: chunk c's sum is computed by reading the N inputs
 * once, in exactly the order the ring would add them
 *
 *     x[c] + x[c+1] ... in the ring's association: s = x[c+j] + s,
 *
 * (bitwise the ring's result), written to the chunk owner's output,
 * finalized there (the owner's rank is passed, as in the ring), and
 * copied to every other rank's output: N reads and N writes of S, and no
 * hand-off between neighbours. The bits depend on the device count only,
 * never on which thread ran a slice or how many there were.
 *
 * Who does the work: the tasks are (chunk, slice), slices being the
 * ring's (so a `partial`'s shares are the ring's too), claimed from one
 * counter per chunk. Only as many ranks as the host pool has threads take
 * a stream -- the first to arrive, which then wait for every rank's
 * operands; the others sleep until the op is done -- so cpu:8 on 2 cores
 * streams memory with 2 threads, not 8 fighting
 * over 2 cores; with fewer devices than threads, each stream borrows the
 * pool's idle helpers (its team). A rank's streams start with the chunk
 * it owns, so with a core per device every owner finalizes its own chunk,
 * as the ring does.
 *
 * One op, per rank: wait for the device's earlier work; publish the
 * operands (progress unit 0); a rank with a stream waits for every
 * rank's (after that every input is complete); phase 1 (sum, then finalize and copy out -- or,
 * when a total is needed first, sum and take the slice's share); for a
 * total, phase 2 (finalize and copy out), opened by the thread that
 * finishes phase 1's last task once it has given every rank the total;
 * return once the last phase is closed: by then nobody reads this rank's
 * memory. Every wait is bounded (twice the context timeout, restarted
 * while tasks still finish) and stops on an abort.
 *
 * Across processes (MPI) the direct path is the local part of the
 * hierarchical all-reduce: phase 1 sums each chunk into the process's
 * host copy, exactly what the local reduce-scatter would deposit there,
 * and td_ring_allreduce_across does the rest (the exchange between
 * processes, the total, the finalize and the gather). */
#include <errno.h>
#include <string.h>

#include "td_host_pool.h"
#include "td_platform.h"
#include "td_ring_state.h"
#include "td_trace.h"

#define NO_TASK UINT32_MAX
#define DIRECT_TEAM_MIN_FLOATS 16384 /* smaller ops run their streams without the pool's helpers */

td_status td_ring_direct_init(td_ring *ring)
{
    ring_direct *d = &ring->direct;
    td_context *ctx = ring->mesh->ctx;
    td_mutex_init(&d->lock);
    td_cond_init(&d->cond);
    atomic_init(&d->active, 0);
    atomic_init(&d->finished, 0);
    atomic_init(&d->released, 0);
    d->next = td_alloc(ctx, sizeof *d->next * ring->n);
    if (!d->next)
        return TD_OOM(ctx, "the direct all-reduce's counters", sizeof *d->next * ring->n);
    for (uint32_t c = 0; c < ring->n; c++)
        atomic_init(&d->next[c], 0);
    d->capable = true;
    for (uint32_t i = 0; i < ring->n; i++) {
        const td_backend_ops *ops = ring->mesh->devices[i].ops;
        if (!(ops->caps & TD_BACKEND_HOST_BUFFERS) || !ops->buffer_host_pointer)
            d->capable = false;
    }
    d->on = d->capable;
    return TD_OK;
}

void td_ring_direct_destroy(td_ring *ring)
{
    ring_direct *d = &ring->direct;
    td_context *ctx = ring->mesh->ctx;
    td_free(ctx, (void *)d->next);
    td_free(ctx, d->shares);
    td_cond_destroy(&d->cond);
    td_mutex_destroy(&d->lock);
}

td_status td_ring_direct_reserve(td_ring *ring, size_t bytes)
{
    ring_direct *d = &ring->direct;
    if (!d->capable)
        return TD_OK;
    /* One share per task of the largest op: N chunks of the ring's slices. */
    const size_t per_chunk = (bytes / sizeof(float) + ring->n - 1) / ring->n;
    const size_t need = (size_t)ring->n * ((per_chunk + SLICE_ELEMENTS - 1) / SLICE_ELEMENTS + 1);
    td_status s = TD_OK;
    td_mutex_lock(&ring->host_lock);
    if (need > d->share_capacity) {
        double *shares = td_alloc(ring->mesh->ctx, sizeof *shares * need);
        if (!shares) {
            s = TD_OOM(ring->mesh->ctx, "the direct all-reduce's shares", sizeof *shares * need);
        } else {
            td_free(ring->mesh->ctx, d->shares);
            d->shares = shares;
            d->share_capacity = need;
        }
    }
    td_mutex_unlock(&ring->host_lock);
    return s;
}

void td_ring_direct_wake(td_ring *ring)
{
    ring_direct *d = &ring->direct;
    td_mutex_lock(&d->lock);
    td_cond_broadcast(&d->cond);
    td_mutex_unlock(&d->lock);
    td_mesh_ring_doorbell(ring->mesh);
}

void td_ring_direct_reset(td_ring *ring)
{
    ring_direct *d = &ring->direct;
    for (uint32_t c = 0; c < ring->n; c++)
        atomic_store(&d->next[c], 0);
    atomic_store(&d->active, 0);
    atomic_store(&d->finished, 0);
    td_mutex_lock(&d->lock);
    atomic_store(&d->released, 0);
    td_mutex_unlock(&d->lock);
}

int td_ring_direct(const td_ring *ring)
{
    return ring->direct.on;
}

void td_ring_set_direct(td_ring *ring, int on)
{
    ring->direct.on = on && ring->direct.capable;
}

/* Takes the next of `limit` claims of the op stamped `stamp`: a counter
 * still holding an earlier op's stamp counts as none taken; one holding a
 * later stamp means this phase is over (a slow stream looking for work
 * after every rank moved on must not take the next phase's). */
static uint32_t claim(_Atomic uint64_t *counter, uint32_t stamp, uint32_t limit)
{
    uint64_t v = atomic_load_explicit(counter, memory_order_relaxed);
    for (;;) {
        const uint32_t held = (uint32_t)(v >> 32);
        if ((int32_t)(held - stamp) > 0)
            return NO_TASK;
        const uint32_t taken = held == stamp ? (uint32_t)v : 0;
        if (taken >= limit)
            return NO_TASK;
        const uint64_t want = ((uint64_t)stamp << 32) | (taken + 1);
        if (atomic_compare_exchange_weak_explicit(counter, &v, want, memory_order_relaxed, memory_order_relaxed))
            return taken;
    }
}

typedef struct direct_job {
    td_ring *ring;
    const ring_op *op;
    uint32_t rank;   /* the rank whose stream this is */
    uint32_t stamp;  /* the op's and phase's */
    int phase;       /* 1: sum (and finalize), 2: finalize after a total */
    bool deferred;   /* a total comes between the sums and the finalize */
    bool across;     /* other processes: the sums go to the process's copy (td_ring_allreduce_across) */
    int stream;      /* copies bypass the caches */
    uint64_t target; /* ring->direct.finished once every task of the phase is done */
    _Atomic uint64_t bytes; /* other ranks' memory this job's threads read and wrote */
} direct_job;

/* 16 lanes of floats and their bits. */
typedef float floats16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef uint32_t words16 __attribute__((vector_size(64), aligned(4), may_alias));

/* r(x) = td_ring_bf16(x) on 16 lanes: the same integer arithmetic. */
static inline void round_bf16_16(floats16 *x) /* by pointer: no 64-byte vector in an ABI */
{
    const words16 u = (words16)*x;
    const words16 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const words16 quiet = (u | 0x00400000u) & 0xffff0000u;
    const words16 nan = (words16)((u & 0x7fffffffu) > 0x7f800000u); /* all ones where NaN */
    *x = (floats16)((nan & quiet) | (~nan & rounded));
}

/* d[lo, hi) = chunk c's sum in the ring's association, s = x[c];
 * s = x[c+j] + s for j = 1 .. N-1 (x[q] = ranks[q].work, indices mod N),
 * on a bf16 wire every partial sum rounded where the ring proper would
 * send it and the complete one before the finalize: s = r(x[c]);
 * s = r(x[c+j] + s). Nothing travels here, but a mesh must give the same
 * bits whichever path its all-reduce takes. Every input is read once in
 * one pass: 16 elements' running sum stays in a register while each
 * input's next cache line is loaded, so all N inputs stream at once.
 * (Summing in N-1 passes over blocks kept in L1 streamed one or two: a 64
 * MiB all-reduce took 1.21x as long on cpu:4, 1.38x on cpu:8;
 * bench/RESULTS.md.) d may be the last input (in place): a block's inputs
 * are all read before it is stored. Inlined into each caller with `bf16`
 * a constant, so neither loop tests it. */
static inline __attribute__((always_inline)) void sum_in_ring_order(float *d, const ring_rank *ranks, uint32_t n,
                                                                    uint32_t c, size_t lo, size_t hi, bool bf16)
{
    const float *first = ranks[c].work;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        floats16 s = *(const floats16 *)(first + i);
        if (bf16)
            round_bf16_16(&s);
        for (uint32_t j = 1, q = c; j < n; j++) {
            q = q + 1 == n ? 0 : q + 1;
            s = *(const floats16 *)(ranks[q].work + i) + s;
            if (bf16)
                round_bf16_16(&s);
        }
        *(floats16 *)(d + i) = s;
    }
    for (; i < hi; i++) {
        float s = bf16 ? td_ring_bf16(first[i]) : first[i];
        for (uint32_t j = 1, q = c; j < n; j++) {
            q = q + 1 == n ? 0 : q + 1;
            s = ranks[q].work[i] + s;
            if (bf16)
                s = td_ring_bf16(s);
        }
        d[i] = s;
    }
}

TD_SIMD_CLONES static void sum_terms(float *d, const ring_rank *ranks, uint32_t n, uint32_t c, size_t lo, size_t hi)
{
    sum_in_ring_order(d, ranks, n, c, lo, hi, false);
}

TD_SIMD_CLONES static void sum_terms_bf16(float *d, const ring_rank *ranks, uint32_t n, uint32_t c, size_t lo,
                                          size_t hi)
{
    sum_in_ring_order(d, ranks, n, c, lo, hi, true);
}

/* dst[lo, hi) = chunk c's sum over the ranks' inputs, associated as the
 * ring does: s = x[c]; s = x[c+j] + s for j = 1 .. N-1. dst is the
 * owner's output, which is either the owner's input itself (x[c+N-1]: in
 * place) or memory no input uses. */
static void sum_slice(td_ring *ring, const ring_op *op, uint32_t c, float *dst, size_t lo, size_t hi)
{
    const uint32_t n = ring->n;
    const ring_rank *ranks = ring->ranks;
    if (op->bf16) {
        sum_terms_bf16(dst, ranks, n, c, lo, hi);
        return;
    }
    if (n == 1) {
        if (dst != ranks[c].work)
            memcpy(dst + lo, ranks[c].work + lo, (hi - lo) * sizeof(float));
        return;
    }
    sum_terms(dst, ranks, n, c, lo, hi);
}

/* Chunk c's slice k: phase 1 sums it into the owner's output and either
 * takes its share of the total or finalizes it and copies it to every
 * other rank; phase 2 does the finalize and the copies. */
static void run_task(direct_job *job, uint32_t c, uint32_t k)
{
    td_ring *ring = job->ring;
    const ring_op *op = job->op;
    const uint32_t n = ring->n;
    size_t lo, hi;
    td_ring_slice_range(op, n, c, k, &lo, &hi);
    const size_t share = (size_t)c * op->slices + k;
    if (hi == lo) {
        if (job->deferred && job->phase == 1)
            ring->direct.shares[share] = 0.0;
        return;
    }
    const uint32_t owner = (c + n - op->shift % n) % n;
    float *out = ring->ranks[owner].gather;
    if (job->phase == 1) {
        sum_slice(ring, op, c, job->across ? ring->host : out, lo, hi);
        atomic_fetch_add_explicit(&job->bytes, (uint64_t)(n - 1) * (hi - lo) * sizeof(float), memory_order_relaxed);
        if (job->across)
            return; /* summed over the processes, finalized and gathered there */
        if (job->deferred) {
            ring->direct.shares[share] = op->partial(op->user, owner, out + lo, lo, hi - lo);
            return;
        }
    }
    if (op->finalize)
        op->finalize(op->user, owner, out + lo, lo, hi - lo);
    for (uint32_t q = 0; q < n; q++)
        if (q != owner)
            td_ring_copy_slice(ring->ranks[q].gather + lo, out + lo, hi - lo, job->stream);
    atomic_fetch_add_explicit(&job->bytes, (uint64_t)(n - 1) * (hi - lo) * sizeof(float), memory_order_relaxed);
}

/* Every rank's total, summed as the ring does: each owner's shares in
 * slice order, then the owners in rank order. */
static void give_totals(direct_job *job)
{
    td_ring *ring = job->ring;
    const ring_op *op = job->op;
    const uint32_t n = ring->n;
    double total = 0.0;
    for (uint32_t q = 0; q < n; q++) {
        const uint32_t c = (q + op->shift) % n;
        double mine = 0.0;
        for (size_t k = 0; k < op->slices; k++)
            mine += ring->direct.shares[(size_t)c * op->slices + k];
        total += mine;
    }
    for (uint32_t q = 0; q < n; q++)
        op->total(op->user, q, total);
}

/* The thread that finishes a phase's last task closes it (after the
 * totals, when they come next) and wakes the ranks waiting for it. */
static void finish_task(direct_job *job)
{
    ring_direct *d = &job->ring->direct;
    if (atomic_fetch_add_explicit(&d->finished, 1, memory_order_acq_rel) + 1 != job->target)
        return;
    if (job->deferred && job->phase == 1)
        give_totals(job);
    td_mutex_lock(&d->lock);
    atomic_store_explicit(&d->released, job->target, memory_order_release);
    td_cond_broadcast(&d->cond);
    td_mutex_unlock(&d->lock);
    td_mesh_ring_doorbell(job->ring->mesh);
}

/* One stream: claims tasks, its owner's chunk first, until none is left
 * or the ring fails. A host-pool task. */
static void stream_tasks(void *arg, int64_t unused)
{
    (void)unused;
    direct_job *job = arg;
    td_ring *ring = job->ring;
    const uint32_t n = ring->n, first = (job->rank + job->op->shift) % n;
    const uint32_t slices = (uint32_t)job->op->slices;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t c = (first + i) % n;
        uint32_t k;
        while (atomic_load_explicit(&ring->abort_status, memory_order_relaxed) == TD_OK &&
               (k = claim(&ring->direct.next[c], job->stamp, slices)) != NO_TASK) {
            run_task(job, c, k);
            finish_task(job);
        }
    }
}

/* Waits until the phase whose tasks end at `target` is closed: bounded
 * by twice the timeout with no task finishing, and by the ring's abort. */
static td_status wait_released(td_ring *ring, uint32_t r, uint64_t target)
{
    ring_direct *d = &ring->direct;
    td_context *ctx = ring->mesh->ctx;
    /* As the ring's waits (ring.c). */
    const uint64_t wait_begin = td_platform_now_ns(), spin_end = wait_begin + RING_SPIN_LIMIT_NS;
    /* On a fiber the carrier runs the other devices between looks (the
     * phase's closing rings the doorbell); on a thread it spins, then sleeps. */
    const bool taking_turns = td_worker_on_fiber();
    const uint32_t spins = taking_turns ? 0 : td_ring_spins(ring, r);
    for (uint32_t i = 0; i < spins; i++) {
        if (atomic_load_explicit(&d->released, memory_order_acquire) >= target) {
            td_ring_note_wait(ring, r, wait_begin);
            return TD_OK;
        }
        td_platform_spin_pause();
        if (i % ring->yield_every == ring->yield_every - 1) {
            if (td_platform_now_ns() >= spin_end || !td_ring_spin_yield(ring))
                break;
        }
    }
    const uint64_t wait_ms = 2ull * td_context_timeout_ms(ctx);
    uint64_t deadline = td_platform_deadline_after_ms(wait_ms);
    uint64_t seen = atomic_load(&d->finished);
    td_mutex_lock(&d->lock);
    while (atomic_load_explicit(&d->released, memory_order_acquire) < target) {
        const int aborted = atomic_load(&ring->abort_status);
        if (aborted != TD_OK) {
            td_mutex_unlock(&d->lock);
            return td_error_set(ctx, TD_ERR_ABORTED, "ring rank %u stopped: another rank failed with %s", r,
                                td_status_name((td_status)aborted));
        }
        if (taking_turns) {
            td_mutex_unlock(&d->lock);
            td_worker_take_turn(0);
            td_mutex_lock(&d->lock);
            if (td_platform_now_ns() < deadline)
                continue;
        } else if (td_cond_wait_until(&d->cond, &d->lock, deadline) != ETIMEDOUT) {
            continue;
        }
        if (atomic_load_explicit(&d->released, memory_order_acquire) >= target)
            continue;
        const uint64_t finished = atomic_load(&d->finished);
        if (finished != seen) { /* slow, not stuck: tasks still finish */
            seen = finished;
            deadline = td_platform_deadline_after_ms(wait_ms);
            continue;
        }
        td_mutex_unlock(&d->lock);
        td_error_set(ctx, TD_ERR_TIMEOUT,
                     "ring rank %u waited %llu ms for the direct all-reduce's streams (%llu of its tasks unfinished)", r,
                     (unsigned long long)wait_ms, (unsigned long long)(target - finished));
        td_ring_abort(ring, TD_ERR_TIMEOUT);
        return TD_ERR_TIMEOUT;
    }
    td_mutex_unlock(&d->lock);
    td_ring_note_wait(ring, r, wait_begin);
    return TD_OK;
}

static bool overlap(const float *a, const float *b, size_t count)
{
    return a < b + count && b < a + count;
}

td_status td_ring_allreduce_direct(td_ring *ring, uint32_t r, ring_op *op)
{
    td_context *ctx = ring->mesh->ctx;
    ring_direct *d = &ring->direct;
    const uint32_t n = ring->n;
    ring_rank *me = &ring->ranks[r];
    td_mesh_device *md = &ring->mesh->devices[r];
    td_trace *tr = td_trace_of(ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    td_status s;

    if (atomic_load(&ring->abort_status) != TD_OK)
        return td_error_set(ctx, TD_ERR_ABORTED, "ring rank %u: the ring failed earlier in this step", r);
    float *in = md->ops->buffer_host_pointer(md->dev, op->in);
    float *out = md->ops->buffer_host_pointer(md->dev, op->out);
    if (!in || !out)
        return td_ring_fail(ring, r,
                            td_error_set(ctx, TD_ERR_STATE,
                                         "ring rank %u: the direct all-reduce needs the host memory of its operands, "
                                         "and device %u gave none",
                                         r, r));
    in += op->in_offset;
    out += op->out_offset;
    const bool across = ring->n_procs > 1;
    const bool deferred = op->partial != NULL && !across; /* across: the total is taken there */
    const size_t tasks = (size_t)n * op->slices;
    if (deferred && tasks > d->share_capacity)
        return td_ring_fail(ring, r,
                            td_error_set(ctx, TD_ERR_STATE,
                                         "ring rank %u: an all-reduce of %zu floats exceeds what was reserved at plan "
                                         "time",
                                         r, op->count));
    /* Device work enqueued before the collective must be complete before
     * any rank reads this device's memory. */
    if ((s = td_mesh_device_submit_wait(md, td_context_timeout_ms(ctx))) != TD_OK)
        return td_ring_fail(ring, r, s);
    /* Operands that overlap without coinciding: the sums written to the
     * output would overwrite inputs other tasks still read. Work on a copy
     * in the output, which every rank overwrites anyway. */
    if (in != out && overlap(in, out, op->count)) {
        memmove(out, in, op->count * sizeof(float));
        in = out;
    }

    /* One device, a small op: nobody else reads or waits, so no meeting
     * (claims, publishing, the phase's release) -- the same tasks in the
     * same order as the one stream would run them, so the same bits.
     * Large ops keep the general path, which lends them the pool's
     * helpers. */
    if (n == 1 && !across && !deferred && op->count < DIRECT_TEAM_MIN_FLOATS) {
        me->work = in;
        me->gather = out;
        direct_job alone = {.ring = ring, .op = op, .rank = r, .phase = 1};
        atomic_init(&alone.bytes, 0);
        for (uint32_t k = 0; k < (uint32_t)op->slices; k++)
            run_task(&alone, 0, k);
        if (tr)
            td_trace_span(tr, td_trace_device_track(tr, md), "collective", "all-reduce", NULL, begin, td_trace_now(),
                          op->count * sizeof(float));
        return TD_OK;
    }

    const uint32_t op_number = ++me->op;
    const uint64_t base = (uint64_t)op_number << 32;
    td_mutex_lock(&me->lock);
    me->work = in;
    me->gather = out;
    td_mutex_unlock(&me->lock);
    td_ring_publish(ring, me, base | 0);
    /* Nothing to read: nobody reads this rank's memory. Across processes
     * the exchange still takes place (the others expect it, whatever path
     * their own devices take). */
    if (tasks == 0 && !across)
        return TD_OK;

    /* The first ranks to arrive take the streams and wait for every
     * rank's operands; the others only wait for the op to end, so a rank
     * without a stream sleeps once per phase, not once per arrival. */
    td_host_pool *pool = td_context_host_pool_in_use(ctx);
    const uint32_t threads = pool ? td_host_pool_threads(pool) : td_platform_cpu_count();
    const uint32_t streams = threads < 1 ? 1 : threads < n ? threads : n;
    /* Helpers only for an op with work to share: waking one costs tens of
     * microseconds, more than summing a loss or a small model's gradient
     * (the pool's own rule: a part keeps about 16 Ki elements). */
    const uint32_t team = pool && tasks > 1 && op->count >= DIRECT_TEAM_MIN_FLOATS ? td_host_pool_team(pool) : 1;
    /* On fibers, each carrier's first device takes a stream: claims by
     * arrival could give two to one carrier, whose devices take turns,
     * and leave the other's core idle (cpu:4 on 2 cores: 0.35-0.48 of
     * memcpy at 64 MiB, against 0.56-0.58 on threads). */
    const bool taking_turns = td_worker_on_fiber();
    bool streaming = taking_turns ? td_worker_first_on_carrier() : claim(&d->active, 2 * op_number, streams) != NO_TASK;
    const uint64_t wait_ms = 2ull * td_context_timeout_ms(ctx);
    for (uint32_t q = 0; streaming && q < n; q++)
        if (q != r && (s = td_ring_wait_for(ring, r, q, base | 0, wait_ms)) != TD_OK)
            return td_ring_fail(ring, r, s);
    const uint64_t arrived = tr ? td_trace_now() : 0;
    direct_job job = {
        .ring = ring,
        .op = op,
        .rank = r,
        .deferred = deferred,
        .across = across,
        .stream = op->count * sizeof(float) >= STREAM_THRESHOLD_BYTES,
    };
    atomic_init(&job.bytes, 0);
    for (int phase = 1; phase <= (deferred ? 2 : 1); phase++) {
        job.phase = phase;
        job.stamp = 2 * op_number + (uint32_t)phase - 1;
        me->direct_tasks += tasks;
        job.target = me->direct_tasks;
        /* Phase 2 starts with every rank awake: streams go to the first again. */
        if (phase == 2 && !taking_turns)
            streaming = claim(&d->active, job.stamp, streams) != NO_TASK;
        if (streaming) {
            if (team > 1)
                td_host_pool_run(pool, team, stream_tasks, &job);
            else
                stream_tasks(&job, 0);
        }
        if ((s = wait_released(ring, r, job.target)) != TD_OK)
            return td_ring_fail(ring, r, s);
    }
    const uint64_t reduced = tr ? td_trace_now() : 0;
    /* A window (a bucket during backward) only begins its exchange
     * between processes: the rank goes back to backward's kernels, and
     * its next ring op or td_ring_settle ends it. */
    if (across && (s = op->windowed ? td_ring_allreduce_across_begin(ring, r, op, base, out)
                                     : td_ring_allreduce_across(ring, r, op, base, out, 1)) != TD_OK)
        return td_ring_fail(ring, r, s);
    if (tr) {
        const uint64_t end = td_trace_now();
        const uint32_t track = td_trace_device_track(tr, md);
        td_trace_span(tr, track, "collective", "direct reduce", NULL, arrived, reduced, atomic_load(&job.bytes));
        if (across)
            td_trace_span(tr, track, "collective", "between processes", NULL, reduced, end, op->count * sizeof(float));
        td_trace_span(tr, track, "collective", "all-reduce", NULL, begin, end, op->count * sizeof(float));
    }
    return TD_OK;
}
