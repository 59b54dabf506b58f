/* The collectives' part between processes: the hierarchy.
 *
 * Inside a process the ring runs as always; between processes MPI moves
 * whole blocks, on one thread per process (local rank 0, the leader), so
 * MPI is only ever entered by one thread at a time. An all-reduce of S
 * floats over P processes of n local devices each:
 *
 *   1. the local reduce-scatter; each owner copies its chunk of the
 *      process's sum into the process's host copy (`ring->host`);
 *   2. the leader sends block q (S/P floats) of that copy to process q and
 *      receives every process's copy of its own block;
 *   3. local rank r sums its n-th of the block over the processes, in
 *      process order, and finalizes it (the trainer's optimizer), so each
 *      element of the whole job is finalized once, by one device;
 *   4. the leader gathers every process's finalized block;
 *   5. every local rank copies the whole result to its device.
 *
 * Each process sends and receives (P-1)/P x S floats twice: the
 * bandwidth-optimal amount, as a flat ring's, but in one round of P-1
 * concurrent messages instead of 2(P-1) dependent steps. Sums run in a
 * fixed order (the local ring's, then process 0, 1, ...), so every device
 * of every process receives bitwise the same result. On a bf16 wire
 * (td_ring_wire) step 2 sends 2-byte values (the local sums are bfloat16
 * already) and step 3 rounds its float sum to bfloat16 before the
 * finalize; step 4 carries finalized values (the trainer's parameters) as
 * floats. */
#include <stdlib.h>
#include <string.h>

#include "tandem/processes.h"
#include "td_ring_state.h"
#include "td_trace.h"

/* Units of the part between processes, after the reduce-scatter's. */
enum {
    X_DEPOSITED = 1, /* this rank's chunk is in the process's copy */
    X_EXCHANGED,     /* leader: the other processes' copies of our block arrived */
    X_PARTIAL,       /* this rank's share of the total is published */
    X_TOTAL,         /* leader: the total over every process is known */
    X_FINAL,         /* this rank's part of our block is finalized */
    X_GATHERED,      /* leader: every process's block arrived */
};

static uint64_t unit(const ring_op *op, uint32_t n, uint64_t base, uint32_t x)
{
    const unit_map um = {n, op ? op->slices : 0};
    return base | (u_part(&um) + x);
}

/* The leader's exchange with the other processes failed (a peer's abort
 * included): the local ranks waiting for it must stop at once, whatever
 * the status -- td_ring_fail leaves an ABORTED alone, since that usually
 * echoes a local peer's failure, but here it is news. */
static td_status leader_failed(td_ring *ring, td_status s)
{
    td_ring_abort(ring, s);
    return s;
}

static int ring_aborted(void *user)
{
    td_ring *ring = user;
    return atomic_load(&ring->abort_status) != TD_OK;
}

/* Non-leaders wait for the leader's exchange with the other processes,
 * which is itself bounded by twice the timeout: a little longer, so the
 * leader names the process that did not answer. */
static td_status wait_leader(td_ring *ring, uint32_t r, uint64_t target)
{
    return td_ring_wait_for(ring, r, 0, target, 3ull * td_context_timeout_ms(ring->mesh->ctx));
}

static td_status wait_all_local(td_ring *ring, uint32_t r, uint64_t target)
{
    for (uint32_t q = 0; q < ring->n; q++) {
        td_status s;
        if (q != r && (s = td_ring_wait_for(ring, r, q, target, 2ull * td_context_timeout_ms(ring->mesh->ctx))) !=
                          TD_OK)
            return s;
    }
    return TD_OK;
}

static size_t part_lo(size_t count, uint32_t parts, uint32_t i)
{
    return (size_t)(((unsigned __int128)count * i) / parts);
}

/* An element bound of the whole op clipped to its window
 * (td_ring_allreduce_consume_window): the blocks and parts of a window are
 * the whole op's, restricted to it, so each element keeps its process, its
 * owner and its order of sums. */
static size_t window_clip(const ring_op *op, size_t at)
{
    if (!op->windowed)
        return at;
    return at < op->win_lo ? op->win_lo : at > op->win_hi ? op->win_hi : at;
}

/* This process's block of a `count`-element all-reduce, and local rank r's
 * part of it: the elements that rank finalizes. */
static void owned_part(const td_ring *ring, uint32_t r, size_t count, size_t *lo, size_t *hi)
{
    const size_t b_lo = part_lo(count, ring->n_procs, ring->proc);
    const size_t b_len = part_lo(count, ring->n_procs, ring->proc + 1) - b_lo;
    *lo = b_lo + part_lo(b_len, ring->n, r);
    *hi = b_lo + part_lo(b_len, ring->n, r + 1);
}

void td_ring_owned_range(const td_ring *ring, uint32_t rank, size_t count, size_t *lo, size_t *hi)
{
    if (ring->n_procs > 1) {
        owned_part(ring, rank, count, lo, hi);
        return;
    }
    /* The all-reduce's shift of 1: rank r ends the reduce-scatter owning chunk r + 1. */
    const uint32_t c = (rank + 1) % ring->n;
    *lo = part_lo(count, ring->n, c);
    *hi = part_lo(count, ring->n, c + 1);
}

uint32_t td_ring_global_count(const td_ring *ring)
{
    return ring->global_n;
}

uint32_t td_ring_global_position(const td_ring *ring, uint32_t rank)
{
    return (ring->device_offset ? ring->device_offset[ring->proc] : 0) + rank;
}

uint32_t td_ring_process_count(const td_ring *ring)
{
    return ring->n_procs;
}

uint32_t td_ring_process_devices(const td_ring *ring, uint32_t process, uint32_t *first)
{
    if (!ring->device_offset) {
        *first = 0;
        return ring->n;
    }
    *first = ring->device_offset[process];
    return ring->device_offset[process + 1] - ring->device_offset[process];
}

static td_exchange_thread *exchange_thread(td_ring *ring);

td_status td_ring_join_processes(td_ring *ring)
{
    td_context *ctx = ring->mesh->ctx;
    td_procs *procs = td_procs_of(ctx);
    if (!procs || td_procs_count(procs) < 2)
        return TD_OK;
    const uint32_t P = td_procs_count(procs);
    uint32_t *counts = td_alloc(ctx, sizeof *counts * P);
    ring->device_offset = td_alloc(ctx, sizeof *ring->device_offset * (P + 1));
    ring->blocks = td_alloc(ctx, sizeof *ring->blocks * (P + 1));
    if (!counts || !ring->device_offset || !ring->blocks) {
        td_free(ctx, counts);
        return TD_OOM(ctx, "the processes' device counts", sizeof *counts * P * 3);
    }
    const uint32_t mine = ring->n;
    td_status s = td_procs_allgather(procs, &mine, counts, sizeof mine, NULL, NULL);
    uint64_t total = 0;
    for (uint32_t q = 0; q < P && s == TD_OK; q++) {
        ring->device_offset[q] = (uint32_t)total;
        total += counts[q];
    }
    if (s == TD_OK && total > UINT32_MAX / 2)
        s = td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "the job's processes hold %llu devices, at most %u expected",
                         (unsigned long long)total, UINT32_MAX / 2);
    td_free(ctx, counts);
    if (s != TD_OK)
        return s;
    ring->device_offset[P] = (uint32_t)total;
    ring->procs = procs;
    ring->proc = td_procs_rank(procs);
    ring->n_procs = P;
    ring->global_n = (uint32_t)total;
    ring->pending_ops = td_alloc_zeroed(ctx, sizeof *ring->pending_ops * (ring->n + 1));
    ring->gather_blocks = td_alloc(ctx, sizeof *ring->gather_blocks * (P + 1));
    if (!ring->pending_ops || !ring->gather_blocks)
        return TD_OOM(ctx, "the ranks' begun windows", sizeof *ring->pending_ops * (ring->n + 1));
    exchange_thread(ring);
    return TD_OK;
}

void td_ring_leave_processes(td_ring *ring)
{
    td_context *ctx = ring->mesh->ctx;
    td_ring_exchange_stop(ring);
    td_free(ctx, ring->pending_ops);
    td_free(ctx, ring->gather_blocks);
    ring->pending_ops = NULL;
    ring->gather_blocks = NULL;
    td_free(ctx, ring->device_offset);
    td_free(ctx, ring->blocks);
    td_free(ctx, ring->host);
    td_free(ctx, ring->received);
    td_free(ctx, ring->packed);
    ring->packed = NULL;
    ring->device_offset = NULL;
    ring->blocks = NULL;
    ring->host = ring->received = NULL;
}

td_status td_ring_reserve_processes(td_ring *ring, size_t bytes)
{
    td_context *ctx = ring->mesh->ctx;
    const size_t elems = bytes / sizeof(float) + 1;
    /* An all-reduce's received rows: P blocks of at most ceil(S/P) each;
     * at least P doubles (the totals' exchange reuses it). */
    const size_t received = elems + 2 * (size_t)ring->n_procs;
    td_status s = TD_OK;
    td_mutex_lock(&ring->host_lock);
    if (elems > ring->host_elems) {
        float *h = td_alloc(ctx, elems * sizeof(float));
        /* A bf16 wire's 2-byte values for the exchange (td_ring_wire). */
        uint16_t *packed = h ? td_alloc(ctx, elems * sizeof *packed) : NULL;
        if (h && packed) {
            td_free(ctx, ring->host);
            td_free(ctx, ring->packed);
            ring->host = h;
            ring->packed = packed;
            ring->host_elems = elems;
        } else {
            td_free(ctx, h);
            s = TD_OOM(ctx, "the process's copy of a collective", elems * (sizeof(float) + sizeof *packed));
        }
    }
    if (s == TD_OK && received > ring->received_elems) {
        float *h = td_alloc(ctx, received * sizeof(float));
        if (h) {
            td_free(ctx, ring->received);
            ring->received = h;
            ring->received_elems = received;
        } else {
            s = TD_OOM(ctx, "the other processes' blocks", received * sizeof(float));
        }
    }
    td_mutex_unlock(&ring->host_lock);
    return s;
}

static td_status check_reserved(td_ring *ring, uint32_t r, size_t elems)
{
    if (elems <= ring->host_elems && ring->host)
        return TD_OK;
    return td_error_set(ring->mesh->ctx, TD_ERR_STATE,
                        "ring rank %u: a collective of %zu floats between processes exceeds the %zu reserved at plan "
                        "time",
                        r, elems, ring->host_elems);
}

/* Copies the whole result from the process's copy to the rank's output:
 * its memory, or the device through a write. */
static td_status place_result(td_ring *ring, uint32_t r, const float *src, float *host_out, td_buffer *out,
                              uint64_t out_offset, size_t count)
{
    td_mesh_device *md = &ring->mesh->devices[r];
    if (count == 0)
        return TD_OK;
    if (host_out) {
        memcpy(host_out, src, count * sizeof(float));
        return TD_OK;
    }
    return md->ops->write(md->dev, out, out_offset * sizeof(float), src, count * sizeof(float));
}

/* Before an op between processes reads a device's memory, the work
 * enqueued before it must be done. */
static td_status drain(td_ring *ring, uint32_t r)
{
    return td_mesh_device_submit_wait(&ring->mesh->devices[r], td_context_timeout_ms(ring->mesh->ctx));
}

/* The end of an op between processes: the device's copies done (when it
 * was written through the backend), then every local rank's DONE -- not
 * just the successor's, as in the ring: each rank read the process's
 * shared copy, which the next op overwrites. */
static td_status finish(td_ring *ring, uint32_t r, uint64_t base, bool wrote_device)
{
    td_status s = wrote_device ? drain(ring, r) : TD_OK;
    if (s != TD_OK)
        return s;
    td_ring_publish(ring, &ring->ranks[r], base | UNIT_DONE);
    return wait_all_local(ring, r, base | UNIT_DONE);
}

/* dst[i] = the upper half of src[i]'s bits (src holds bfloat16 values
 * already): dst and src are disjoint, so the loop vectorizes. */
TD_SIMD_CLONES static void pack_block(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, src + i, sizeof bits);
        dst[i] = (uint16_t)(bits >> 16);
    }
}

/* dst = the bfloat16 values at src, widened (exact). */
TD_SIMD_CLONES static void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)src[i] << 16;
        memcpy(dst + i, &bits, sizeof bits);
    }
}

/* dst += the bfloat16 values at src, widened: a float addition. */
TD_SIMD_CLONES static void add_bf16(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)src[i] << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        dst[i] += v;
    }
}

/* The exchange thread's job: step 2 for the window the leader began. */
static td_status exchange_job(void *arg)
{
    td_ring *ring = arg;
    return td_procs_exchange_blocks(ring->procs, ring->exchange_send, ring->blocks, ring->exchange_element_bytes,
                                    ring->received, ring_aborted, ring);
}

/* The ring's exchange thread, started when the ring joins the processes;
 * NULL when it cannot run or is switched off (then the exchanges are made
 * inline, on the leader's worker). */
static td_exchange_thread *exchange_thread(td_ring *ring)
{
    if (!ring->exchange_tried) {
        ring->exchange_tried = true;
        const char *env = getenv("TANDEM_EXCHANGE_THREAD");
        ring->exchange_inline = env && strcmp(env, "0") == 0;
        if (!ring->exchange_inline)
            ring->exchange = td_exchange_thread_start(ring->mesh->ctx);
    }
    return ring->exchange;
}

/* The thread's gather job: step 4 for a window whose finalize is done. */
static td_status gather_job(void *arg)
{
    td_ring *ring = arg;
    return td_procs_allgather_blocks(ring->procs, ring->host, ring->gather_blocks, ring_aborted, ring);
}

static td_status submit(td_ring *ring, td_exchange_fn fn, uint64_t *ticket)
{
    td_status s = td_exchange_thread_submit(ring->exchange, fn, ring, ticket);
    if (s != TD_OK)
        return td_error_set(ring->mesh->ctx, s, "ring rank 0: the exchange thread's queue is full (%d jobs)",
                            TD_EXCHANGE_THREAD_DEPTH);
    ring->last_ticket = *ticket;
    ring->jobs_on_thread++;
    return TD_OK;
}

/* A job's status. The job is bounded by twice the timeout itself; the
 * wait a little longer, so the job's own message (naming the process that
 * did not answer) is the one reported. */
static td_status wait_job(td_ring *ring, uint64_t ticket, const char *what)
{
    const uint64_t bound = 3ull * td_context_timeout_ms(ring->mesh->ctx);
    td_status job = TD_OK;
    if (td_exchange_thread_wait(ring->exchange, ticket, bound, &job) != TD_OK)
        return td_error_set(ring->mesh->ctx, TD_ERR_TIMEOUT,
                            "ring rank 0: the exchange thread did not end %s in %llu ms", what,
                            (unsigned long long)bound);
    return job;
}

uint64_t td_ring_exchanges_on_thread(const td_ring *ring)
{
    return ring->jobs_on_thread;
}

void td_ring_exchange_stop(td_ring *ring)
{
    td_exchange_thread_stop(ring->exchange, 3ull * td_context_timeout_ms(ring->mesh->ctx));
    ring->exchange = NULL;
}

/* Steps 1-2: the rank's sums deposited; the leader exchanges the blocks,
 * inline or (`async`) on the exchange thread. */
static td_status across_begin(td_ring *ring, uint32_t r, const ring_op *op, uint64_t base, bool async)
{
    ring_rank *me = &ring->ranks[r];
    const size_t count = op->count;
    const uint32_t P = ring->n_procs;
    td_status s = check_reserved(ring, r, count);
    if (s != TD_OK)
        return s;
    td_ring_publish(ring, me, unit(op, ring->n, base, X_DEPOSITED));
    if (r != 0)
        return TD_OK;
    if ((s = wait_all_local(ring, r, unit(op, ring->n, base, X_DEPOSITED))) != TD_OK)
        return s;
    for (uint32_t q = 0; q <= P; q++)
        ring->blocks[q] = window_clip(op, part_lo(count, P, q));
    ring->exchange_send = ring->host;
    ring->exchange_element_bytes = sizeof(float);
    if (op->bf16) {
        /* The local sums are bfloat16 values already (rounded as they left
         * the local ring): their upper halves go out, from a buffer of
         * their own -- the process's copy may be written by the next
         * window, or read by a gather, while this exchange is on the
         * exchange thread. */
        pack_block(ring->packed + ring->blocks[0], ring->host + ring->blocks[0], ring->blocks[P] - ring->blocks[0]);
        ring->exchange_send = ring->packed;
        ring->exchange_element_bytes = sizeof(uint16_t);
    }
    s = async ? submit(ring, exchange_job, &ring->exchange_ticket) : exchange_job(ring);
    return s != TD_OK ? leader_failed(ring, s) : TD_OK;
}

/* Steps 3-5, once the leader's exchange is done (waited for here when it
 * ran on the exchange thread). */
static td_status across_finish(td_ring *ring, uint32_t r, const ring_op *op, uint64_t base, float *gather,
                               int direct, bool async)
{
    ring_rank *me = &ring->ranks[r];
    const size_t count = op->count;
    const uint32_t P = ring->n_procs;
    td_status s;
    if (r == 0) {
        if (async && (s = wait_job(ring, ring->exchange_ticket, "a bucket's exchange")) != TD_OK)
            return leader_failed(ring, s);
        td_ring_publish(ring, me, unit(op, ring->n, base, X_EXCHANGED));
    } else if ((s = wait_leader(ring, r, unit(op, ring->n, base, X_EXCHANGED))) != TD_OK) {
        return s;
    }

    /* My part of the block: the processes' copies summed in process order. */
    size_t lo, hi;
    owned_part(ring, r, count, &lo, &hi);
    lo = window_clip(op, lo);
    hi = window_clip(op, hi);
    const size_t b_lo = ring->blocks[ring->proc], b_len = ring->blocks[ring->proc + 1] - b_lo;
    for (size_t at = lo; op->bf16 && at < hi; at += SLICE_ELEMENTS) {
        const size_t end = at + SLICE_ELEMENTS < hi ? at + SLICE_ELEMENTS : hi;
        float *dst = ring->host + at;
        const uint16_t *rows = (const uint16_t *)(const void *)ring->received;
        widen_bf16(dst, rows + (at - b_lo), end - at);
        for (uint32_t q = 1; q < P; q++)
            add_bf16(dst, rows + (size_t)q * b_len + (at - b_lo), end - at);
        td_ring_round_bf16(dst, end - at);
    }
    for (size_t at = lo; !op->bf16 && at < hi; at += SLICE_ELEMENTS) {
        const size_t end = at + SLICE_ELEMENTS < hi ? at + SLICE_ELEMENTS : hi;
        float *dst = ring->host + at;
        memcpy(dst, ring->received + (at - b_lo), (end - at) * sizeof(float));
        for (uint32_t q = 1; q < P; q++) {
            const float *src = ring->received + (size_t)q * b_len + (at - b_lo);
            for (size_t i = 0; i < end - at; i++)
                dst[i] += src[i];
        }
    }
    if (op->partial) {
        double share = 0.0;
        for (size_t at = lo; at < hi; at += SLICE_ELEMENTS) {
            const size_t end = at + SLICE_ELEMENTS < hi ? at + SLICE_ELEMENTS : hi;
            share += op->partial(op->user, r, ring->host + at, at, end - at);
        }
        me->partial = share;
        td_ring_publish(ring, me, unit(op, ring->n, base, X_PARTIAL));
        if (r == 0) {
            if ((s = wait_all_local(ring, r, unit(op, ring->n, base, X_PARTIAL))) != TD_OK)
                return s;
            /* Local ranks in order, then processes in order: the same sum
             * on every process. */
            double local = 0.0;
            for (uint32_t q = 0; q < ring->n; q++)
                local += ring->ranks[q].partial;
            double *all = (double *)ring->received; /* free again: every rank summed its part */
            if ((s = td_procs_allgather(ring->procs, &local, all, sizeof local, ring_aborted, ring)) != TD_OK)
                return leader_failed(ring, s);
            double total = 0.0;
            for (uint32_t q = 0; q < P; q++)
                total += all[q];
            ring->process_total = total;
            td_ring_publish(ring, me, unit(op, ring->n, base, X_TOTAL));
        } else if ((s = wait_leader(ring, r, unit(op, ring->n, base, X_TOTAL))) != TD_OK) {
            return s;
        }
        op->total(op->user, r, ring->process_total);
    }
    for (size_t at = lo; op->finalize && at < hi; at += SLICE_ELEMENTS) {
        const size_t end = at + SLICE_ELEMENTS < hi ? at + SLICE_ELEMENTS : hi;
        op->finalize(op->user, r, ring->host + at, at, end - at);
    }
    td_ring_publish(ring, me, unit(op, ring->n, base, X_FINAL));
    if (r == 0) {
        if ((s = wait_all_local(ring, r, unit(op, ring->n, base, X_FINAL))) != TD_OK)
            return s;
        if (async && ring->n == 1) {
            /* The gather goes to the thread as well, and the window is
             * placed at the next settle. Only with one local rank: no
             * peer waits for this op's GATHERED and DONE, which would
             * otherwise come after the next op's first units. */
            memcpy(ring->gather_blocks, ring->blocks, sizeof *ring->blocks * (P + 1));
            if ((s = submit(ring, gather_job, &ring->gather_ticket)) != TD_OK)
                return leader_failed(ring, s);
            ring->pending_ops[ring->n] = *op;
            ring->gather_out = gather;
            ring->gather_pending = true;
            return TD_OK;
        }
        if ((s = td_procs_allgather_blocks(ring->procs, ring->host, ring->blocks, ring_aborted, ring)) != TD_OK)
            return leader_failed(ring, s);
        td_ring_publish(ring, me, unit(op, ring->n, base, X_GATHERED));
    } else if ((s = wait_leader(ring, r, unit(op, ring->n, base, X_GATHERED))) != TD_OK) {
        return s;
    }
    /* A window's blocks hold its elements only: those are placed. */
    const size_t first = op->windowed ? op->win_lo : 0, placed = op->windowed ? op->win_hi - op->win_lo : count;
    if ((s = place_result(ring, r, ring->host + first, direct ? gather + first : NULL, op->out,
                          op->out_offset + first, placed)) != TD_OK)
        return s;
    return finish(ring, r, base, !direct);
}

td_status td_ring_allreduce_across(td_ring *ring, uint32_t r, const ring_op *op, uint64_t base, float *gather,
                                   int direct)
{
    td_status s = across_begin(ring, r, op, base, false);
    return s != TD_OK ? s : across_finish(ring, r, op, base, gather, direct, false);
}

td_status td_ring_allreduce_across_begin(td_ring *ring, uint32_t r, const ring_op *op, uint64_t base, float *gather)
{
    /* Every local rank takes the same path: the thread was started (or
     * not) with the ring, before any job. */
    if (!ring->exchange)
        return td_ring_allreduce_across(ring, r, op, base, gather, 1);
    td_status s = across_begin(ring, r, op, base, true);
    if (s != TD_OK)
        return s;
    ring_rank *me = &ring->ranks[r];
    ring->pending_ops[r] = *op;
    me->pending = true;
    me->pending_base = base;
    me->pending_gather = gather;
    return TD_OK;
}

/* Step 5 for the window whose gather was left on the thread: one local
 * rank, so its DONE has no reader, and the window's part of the process's
 * copy is not reused before this (the next window's is another part; any
 * other op settles first). */
static td_status place_gathered(td_ring *ring)
{
    if (!ring->gather_pending)
        return TD_OK;
    ring->gather_pending = false;
    td_status s = wait_job(ring, ring->gather_ticket, "a bucket's gather");
    if (s != TD_OK)
        return leader_failed(ring, s);
    const ring_op *op = &ring->pending_ops[ring->n];
    return place_result(ring, 0, ring->host + op->win_lo, ring->gather_out + op->win_lo, op->out,
                        op->out_offset + op->win_lo, op->win_hi - op->win_lo);
}

static td_status settle(td_ring *ring, uint32_t rank, bool failed, bool keep_gather)
{
    ring_rank *me = rank < ring->n ? &ring->ranks[rank] : NULL;
    if (!me)
        return TD_OK;
    if (failed) {
        /* Nothing of the windows is used; only MPI must be free again. The
         * failure aborted the ring, which stops the thread's polling. */
        me->pending = false;
        if (rank == 0 && ring->exchange && ring->last_ticket) {
            ring->gather_pending = false;
            td_status ignored;
            (void)td_exchange_thread_wait(ring->exchange, ring->last_ticket,
                                          3ull * td_context_timeout_ms(ring->mesh->ctx), &ignored);
        }
        return TD_OK;
    }
    td_status s = TD_OK;
    if (me->pending) {
        me->pending = false;
        /* The older window's gather first (the thread runs jobs in order),
         * which frees its slot for this window's. */
        if (rank == 0)
            s = place_gathered(ring);
        if (s == TD_OK)
            s = across_finish(ring, rank, &ring->pending_ops[rank], me->pending_base, me->pending_gather, 1, true);
    }
    if (s == TD_OK && rank == 0 && !keep_gather)
        s = place_gathered(ring);
    return s != TD_OK ? td_ring_fail(ring, rank, s) : TD_OK;
}

td_status td_ring_settle(td_ring *ring, uint32_t rank, bool failed)
{
    return settle(ring, rank, failed, false);
}

td_status td_ring_settle_for_window(td_ring *ring, uint32_t rank)
{
    return settle(ring, rank, false, true);
}

/* The rank's input, `count` floats, into the process's copy at `at`. */
static td_status fetch_input(td_ring *ring, uint32_t r, td_buffer *in, uint64_t in_offset, size_t count, float *at)
{
    td_mesh_device *md = &ring->mesh->devices[r];
    const float *host = md->ops->buffer_host_pointer(md->dev, in);
    if (count == 0)
        return TD_OK;
    if (host) {
        memcpy(at, host + in_offset, count * sizeof(float));
        return TD_OK;
    }
    td_status s = md->ops->read(md->dev, in, in_offset * sizeof(float), at, count * sizeof(float));
    return s == TD_OK ? td_mesh_device_submit_wait(md, td_context_timeout_ms(ring->mesh->ctx)) : s;
}

/* The start of an all_gather or a broadcast between processes: the ring
 * still healthy, the process's copy big enough, the device's earlier work
 * done before its memory is read. */
static td_status begin_one_shot(td_ring *ring, uint32_t r, size_t elems)
{
    td_status s;
    if (atomic_load(&ring->abort_status) != TD_OK)
        return td_error_set(ring->mesh->ctx, TD_ERR_ABORTED, "ring rank %u: the ring failed earlier in this step", r);
    if ((s = check_reserved(ring, r, elems)) != TD_OK || (s = drain(ring, r)) != TD_OK)
        return td_ring_fail(ring, r, s);
    return TD_OK;
}

/* Their end, on every rank once the leader's exchange is done: the
 * process's copy to the rank's output, then finish. */
static td_status place_and_finish(td_ring *ring, uint32_t r, uint64_t base, td_buffer *out, uint64_t out_offset,
                                  size_t count)
{
    td_mesh_device *md = &ring->mesh->devices[r];
    float *host_out = md->ops->buffer_host_pointer(md->dev, out);
    td_status s;
    if ((s = place_result(ring, r, ring->host, host_out ? host_out + out_offset : NULL, out, out_offset, count)) !=
            TD_OK ||
        (s = finish(ring, r, base, true)) != TD_OK)
        return td_ring_fail(ring, r, s);
    return TD_OK;
}

td_status td_ring_all_gather_across(td_ring *ring, uint32_t r, td_buffer *in, uint64_t in_offset, td_buffer *out,
                                    uint64_t out_offset, size_t count)
{
    ring_rank *me = &ring->ranks[r];
    const size_t total = (size_t)ring->global_n * count;
    td_status s = begin_one_shot(ring, r, total);
    if (s != TD_OK)
        return s;
    const uint64_t base = (uint64_t)(++me->op) << 32;
    const size_t position = td_ring_global_position(ring, r);
    if ((s = fetch_input(ring, r, in, in_offset, count, ring->host + position * count)) != TD_OK)
        return td_ring_fail(ring, r, s);
    td_ring_publish(ring, me, unit(NULL, ring->n, base, X_DEPOSITED));
    if (r == 0) {
        if ((s = wait_all_local(ring, r, unit(NULL, ring->n, base, X_DEPOSITED))) != TD_OK)
            return td_ring_fail(ring, r, s);
        for (uint32_t q = 0; q <= ring->n_procs; q++)
            ring->blocks[q] = (size_t)ring->device_offset[q] * count;
        if ((s = td_procs_allgather_blocks(ring->procs, ring->host, ring->blocks, ring_aborted, ring)) != TD_OK)
            return leader_failed(ring, s);
        td_ring_publish(ring, me, unit(NULL, ring->n, base, X_GATHERED));
    } else if ((s = wait_leader(ring, r, unit(NULL, ring->n, base, X_GATHERED))) != TD_OK) {
        return td_ring_fail(ring, r, s);
    }
    return place_and_finish(ring, r, base, out, out_offset, total);
}

td_status td_ring_broadcast_across(td_ring *ring, uint32_t r, uint32_t root, td_buffer *in, uint64_t in_offset,
                                   td_buffer *out, uint64_t out_offset, size_t count)
{
    ring_rank *me = &ring->ranks[r];
    td_status s = begin_one_shot(ring, r, count);
    if (s != TD_OK)
        return s;
    uint32_t root_proc = 0;
    while (root_proc + 1 < ring->n_procs && ring->device_offset[root_proc + 1] <= root)
        root_proc++;
    const uint32_t root_rank = root - ring->device_offset[root_proc];
    const uint64_t base = (uint64_t)(++me->op) << 32;
    if (root_proc == ring->proc && r == root_rank &&
        (s = fetch_input(ring, r, in, in_offset, count, ring->host)) != TD_OK)
        return td_ring_fail(ring, r, s);
    td_ring_publish(ring, me, unit(NULL, ring->n, base, X_DEPOSITED));
    if (r == 0) {
        if ((s = wait_all_local(ring, r, unit(NULL, ring->n, base, X_DEPOSITED))) != TD_OK)
            return td_ring_fail(ring, r, s);
        if ((s = td_procs_broadcast(ring->procs, root_proc, ring->host, count * sizeof(float), ring_aborted, ring)) !=
            TD_OK)
            return leader_failed(ring, s);
        td_ring_publish(ring, me, unit(NULL, ring->n, base, X_GATHERED));
    } else if ((s = wait_leader(ring, r, unit(NULL, ring->n, base, X_GATHERED))) != TD_OK) {
        return td_ring_fail(ring, r, s);
    }
    return place_and_finish(ring, r, base, out, out_offset, count);
}

td_status td_processes_mesh(td_mesh *mesh, uint32_t *global_size, uint32_t *first_position)
{
    if (!mesh || !global_size || !first_position)
        return TD_ERR_INVALID_ARGUMENT;
    td_status s = td_owned_check_live(&mesh->owned, "td_processes_mesh");
    td_ring *ring = NULL;
    if (s == TD_OK && (s = td_mesh_ring(mesh, &ring)) == TD_OK) {
        *global_size = td_ring_global_count(ring);
        *first_position = td_ring_global_position(ring, 0);
    }
    return s;
}
