/* Ring collectives. See td_ring.h for the contract; the schedule is:
 *
 *   units of one op, per rank, published as progress = (op << 32) | unit:
 *     0                      pointers for this op are published
 *     LOAD(k)                own first chunk, slice k, is on the host
 *     RS(s, k)               reduce-scatter step s, slice k added
 *     PART                   this rank's share of a total is published
 *     FIN(k)                 owned chunk, slice k, finalized
 *     AG(s, k)               all-gather step s, slice k received
 *     DONE                   nothing of this rank's memory is read any more
 *
 * Rank r only ever reads rank r-1's memory, after waiting for the unit that
 * produced it, and writes only its own. Before returning, a rank waits for its
 * successor's DONE, so the caller may overwrite the memory right away. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "td_platform.h"
#include "td_ring_state.h"
#include "td_trace.h"


void td_ring_divide(float *data, size_t count, uint32_t divisor)
{
    if (divisor == 1)
        return;
    if ((divisor & (divisor - 1)) == 0) {
        const float inverse = 1.0f / (float)divisor;
        for (size_t i = 0; i < count; i++)
            data[i] = data[i] * inverse;
        return;
    }
    const float d = (float)divisor;
    for (size_t i = 0; i < count; i++)
        data[i] = data[i] / d;
}

/* Static: a cloned function's ifunc resolver would otherwise be exported. */
TD_SIMD_CLONES static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = td_ring_bf16(x[i]);
}

void td_ring_round_bf16(float *x, size_t n)
{
    round_bf16(x, n);
}

static inline uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_widen(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The ring proper's bf16 wire: d = r(x) as 2-byte values (the chunk a
 * rank sends first) ... */
TD_SIMD_CLONES static void wire_load(uint16_t *restrict d, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = bf16_bits(td_ring_bf16(x[i]));
}

/* ... d = r(x + p), p the predecessor's 2-byte sums (a sum sent on) ... */
TD_SIMD_CLONES static void wire_add_send(uint16_t *restrict d, const float *restrict x, const uint16_t *restrict p,
                                         size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = bf16_bits(td_ring_bf16(x[i] + bf16_widen(p[i])));
}

/* ... and x = r(x + p), the owner's complete sum, as a float. */
TD_SIMD_CLONES static void wire_add_last(float *restrict x, const uint16_t *restrict p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = td_ring_bf16(x[i] + bf16_widen(p[i]));
}

/* ... or from a predecessor that sends floats: d = r(x + p). */
TD_SIMD_CLONES static void wire_add_send_floats(uint16_t *restrict d, const float *restrict x,
                                                const float *restrict p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = bf16_bits(td_ring_bf16(x[i] + p[i]));
}

size_t td_ring_slice_elements(void)
{
    return SLICE_ELEMENTS;
}

static void ring_destroy(void *collectives);

static td_status ring_create(td_mesh *mesh, td_ring **out)
{
    td_context *ctx = mesh->ctx;
    td_ring *ring = td_alloc_zeroed(ctx, sizeof *ring);
    ring_rank *ranks = td_alloc_zeroed(ctx, sizeof *ranks * mesh->count);
    if (!ring || !ranks) {
        td_free(ctx, ring);
        td_free(ctx, ranks);
        return TD_OOM(ctx, "the ring", sizeof *ranks * mesh->count);
    }
    for (uint32_t i = 0; i < mesh->count; i++) {
        /* Neither can fail on the supported systems (Win32's hold no
         * resources; glibc's and macOS's only fail on bad attributes). */
        td_mutex_init(&ranks[i].lock);
        td_cond_init(&ranks[i].cond);
    }
    ring->mesh = mesh;
    ring->n = mesh->count;
    ring->ranks = ranks;
    atomic_init(&ring->abort_status, TD_OK);
    long cores = (long)td_platform_cpu_count();
    /* With a core per rank, a peer a few microseconds behind is cheaper to
     * spin on than to sleep on. With more ranks than cores, a rank that
     * arrives first yields its core to the ranks still computing on it
     * and is back, awake, when they arrive: a sched_yield costs about a
     * microsecond, a sleep and its wake-up tens (linreg on cpu:8 on 2
     * cores: 170 -> 100 us a step). A yield every 8 pauses: on a machine
     * busy with other work, ranks with a core each in principle often
     * share one, and the sooner the spinner gives it up the sooner the
     * peer arrives (linreg, load 6: cpu:2 40 us a step yielding every 256
     * pauses, 28 every 8; cpu:4 55 / 52, cpu:8 105 / 97 every 16 / 8). */
    const bool own_cores = cores > 0 && mesh->count <= (uint32_t)cores;
    ring->spin_iterations = 4000;
    ring->yield_every = 8;
    ring->outnumbered = !own_cores;
    ring->global_n = mesh->count;
    ring->n_procs = 1;
    td_mutex_init(&ring->host_lock);
    *out = ring;
    td_status s = td_ring_direct_init(ring);
    if (s != TD_OK) {
        ring_destroy(ring);
        *out = NULL;
        return s;
    }
    s = td_ring_join_processes(ring);
    if (s != TD_OK) {
        ring_destroy(ring);
        *out = NULL;
    }
    return s;
}

static void ring_destroy(void *collectives)
{
    td_ring *ring = collectives;
    td_context *ctx = ring->mesh->ctx;
    for (uint32_t i = 0; i < ring->n; i++) {
        ring_rank *rr = &ring->ranks[i];
        td_mesh_device *md = &ring->mesh->devices[i];
        /* No worker is in a job here: the caller may drive the device. A
         * queue still running left its staging (wedged) rather than lose it. */
        if (rr->staging && md->dev && !(md->wedged && td_mesh_device_drain(ring->mesh, i) == TD_ERR_TIMEOUT))
            md->ops->staging_destroy(md->dev, rr->staging);
        td_free(ctx, rr->tickets);
        td_free(ctx, rr->wire);
        td_mutex_destroy(&rr->lock);
        td_cond_destroy(&rr->cond);
    }
    td_ring_leave_processes(ring);
    td_ring_direct_destroy(ring);
    td_mutex_destroy(&ring->host_lock);
    td_free(ctx, ring->ranks);
    td_free(ctx, ring);
}

static void ring_abort_for_mesh(void *collectives, td_status status)
{
    td_ring_abort(collectives, status);
}

td_status td_mesh_ring(td_mesh *mesh, td_ring **out)
{
    if (!mesh->collectives) {
        td_ring *ring = NULL;
        td_status s = ring_create(mesh, &ring);
        if (s != TD_OK)
            return s;
        mesh->collectives = ring;
        mesh->collectives_destroy = ring_destroy;
        mesh->collectives_abort = ring_abort_for_mesh;
    }
    *out = mesh->collectives;
    return TD_OK;
}

static size_t slices_for(size_t elements)
{
    return (elements + SLICE_ELEMENTS - 1) / SLICE_ELEMENTS;
}

td_status td_ring_reserve(td_ring *ring, uint32_t rank, size_t bytes)
{
    ring_rank *rr = &ring->ranks[rank];
    td_mesh_device *md = &ring->mesh->devices[rank];
    td_context *ctx = ring->mesh->ctx;
    /* One ticket per slice of the whole buffer covers every schedule. */
    size_t tickets = slices_for(bytes / sizeof(float)) + ring->n + 1;
    if (tickets > rr->ticket_capacity) {
        uint64_t *t = td_alloc(ctx, sizeof *t * tickets);
        if (!t)
            return TD_OOM(ctx, "ring tickets", sizeof *t * tickets);
        td_free(ctx, rr->tickets);
        rr->tickets = t;
        rr->ticket_capacity = tickets;
    }
    if (ring->n_procs > 1) {
        td_status s = td_ring_reserve_processes(ring, bytes);
        if (s != TD_OK)
            return s;
    }
    td_status ds = td_ring_direct_reserve(ring, bytes);
    if (ds != TD_OK)
        return ds;
    /* The ring proper's 2-byte partial sums for a bf16 wire: half the
     * bytes each reduce-scatter step reads from the predecessor. Not for
     * a direct ring, which never passes sums along (a ring switched to
     * the ring proper later rounds in place instead: the same bits). */
    const size_t elems = bytes / sizeof(float);
    if (!td_ring_direct(ring) && ring->n > 1 && elems > rr->wire_elems) {
        uint16_t *w = td_alloc(ctx, elems * sizeof *w);
        if (!w)
            return TD_OOM(ctx, "the ring's bf16 wire", elems * sizeof *w);
        td_free(ctx, rr->wire);
        rr->wire = w;
        rr->wire_elems = elems;
    }
    if (md->ops->caps & TD_BACKEND_HOST_BUFFERS)
        return TD_OK; /* works on device memory directly */
    if (bytes <= rr->staging_bytes)
        return TD_OK;
    if (rr->staging) {
        md->ops->staging_destroy(md->dev, rr->staging);
        rr->staging = NULL;
        rr->staging_host = NULL;
        rr->staging_bytes = 0;
    }
    void *host = NULL;
    td_status s = md->ops->staging_create(md->dev, bytes, &rr->staging, &host);
    if (s != TD_OK)
        return s;
    rr->staging_host = host;
    rr->staging_bytes = bytes;
    return TD_OK;
}

void td_ring_abort(td_ring *ring, td_status status)
{
    int expected = TD_OK;
    atomic_compare_exchange_strong(&ring->abort_status, &expected, (int)status);
    for (uint32_t i = 0; i < ring->n; i++) {
        td_mutex_lock(&ring->ranks[i].lock);
        td_cond_broadcast(&ring->ranks[i].cond);
        td_mutex_unlock(&ring->ranks[i].lock);
    }
    td_ring_direct_wake(ring);
}

int td_ring_failed(td_ring *ring)
{
    return atomic_load(&ring->abort_status) != TD_OK;
}

void td_ring_reset(td_ring *ring)
{
    for (uint32_t i = 0; i < ring->n; i++)
        (void)td_ring_settle(ring, i, true); /* a failed job's window: dropped, its exchange waited out */
    for (uint32_t i = 0; i < ring->n; i++) {
        td_mutex_lock(&ring->ranks[i].lock);
        ring->ranks[i].progress = 0;
        ring->ranks[i].op = 0;
        ring->ranks[i].direct_tasks = 0;
        td_mutex_unlock(&ring->ranks[i].lock);
    }
    td_ring_direct_reset(ring);
    atomic_store(&ring->abort_status, TD_OK);
}

/* Publishes a rank's progress: to peers spinning on it or sleeping on its
 * condition, and through the doorbell to peers taking turns on fibers. */
static void publish(td_ring *ring, ring_rank *rr, uint64_t value)
{
    td_mutex_lock(&rr->lock);
    __atomic_store_n(&rr->progress, value, __ATOMIC_RELEASE); /* also read lock-free by spinning peers */
    td_cond_broadcast(&rr->cond);
    td_mutex_unlock(&rr->lock);
    td_mesh_ring_doorbell(ring->mesh);
}

static td_status fail(td_ring *ring, uint32_t rank, td_status status)
{
    /* The first failure is the cause; peers that see the abort report it as such. */
    if (status != TD_ERR_ABORTED)
        td_ring_abort(ring, status);
    (void)rank;
    return status;
}

static td_status aborted(td_ring *ring, uint32_t me, int status)
{
    return td_error_set(ring->mesh->ctx, TD_ERR_ABORTED, "ring rank %u stopped: another rank failed with %s", me,
                        td_status_name((td_status)status));
}

static td_status timed_out(td_ring *ring, uint32_t me, uint32_t peer, uint64_t target, uint64_t seen,
                           uint64_t timeout_ms)
{
    td_error_set(ring->mesh->ctx, TD_ERR_TIMEOUT,
                 "ring rank %u waited %llu ms for rank %u (needed op %u unit %u, rank %u is at op %u unit %u)", me,
                 (unsigned long long)timeout_ms, peer, (unsigned)(target >> 32), (unsigned)(target & UNIT_DONE), peer,
                 (unsigned)(seen >> 32), (unsigned)(seen & UNIT_DONE));
    td_ring_abort(ring, TD_ERR_TIMEOUT);
    return TD_ERR_TIMEOUT;
}

/* A rank on a fiber: its carrier runs the other devices until the peer
 * gets there (its progress rings the doorbell). */
static td_status wait_taking_turns(td_ring *ring, uint32_t me, uint32_t peer, uint64_t target, uint64_t timeout_ms)
{
    const ring_rank *p = &ring->ranks[peer];
    const uint64_t wait_begin = td_platform_now_ns();
    const uint64_t deadline = td_platform_deadline_after_ms(timeout_ms);
    uint64_t seen;
    while ((seen = __atomic_load_n(&p->progress, __ATOMIC_ACQUIRE)) < target) {
        const int status = atomic_load(&ring->abort_status);
        if (status != TD_OK)
            return aborted(ring, me, status);
        if (td_platform_now_ns() >= deadline)
            return timed_out(ring, me, peer, target, seen, timeout_ms);
        td_worker_take_turn(0);
    }
    td_ring_note_wait(ring, me, wait_begin);
    return TD_OK;
}

static td_status wait_for_ms(td_ring *ring, uint32_t me, uint32_t peer, uint64_t target, uint64_t timeout_ms)
{
    if (td_worker_on_fiber())
        return wait_taking_turns(ring, me, peer, target, timeout_ms);
    ring_rank *p = &ring->ranks[peer];
    /* Spin first (ring->spin_iterations says why), offering the core now
     * and then: another process, or another rank, may need it to reach
     * what this one waits for (without, cpu:2 took 225-235 us a linreg
     * step with one core busy elsewhere: the spin held the core the peer
     * needed until it gave up). */
    const uint64_t wait_begin = td_platform_now_ns(), spin_end = wait_begin + RING_SPIN_LIMIT_NS;
    const uint32_t spins = td_ring_spins(ring, me);
    for (uint32_t i = 0; i < spins; i++) {
        if (__atomic_load_n(&p->progress, __ATOMIC_ACQUIRE) >= target) {
            td_ring_note_wait(ring, me, wait_begin);
            return TD_OK;
        }
        td_platform_spin_pause();
        if (i % ring->yield_every == ring->yield_every - 1) {
            if (td_platform_now_ns() >= spin_end || !td_ring_spin_yield(ring))
                break;
        }
    }
    const uint64_t deadline = td_platform_deadline_after_ms(timeout_ms);
    td_mutex_lock(&p->lock);
    while (p->progress < target) {
        const int status = atomic_load(&ring->abort_status);
        if (status != TD_OK) {
            td_mutex_unlock(&p->lock);
            return aborted(ring, me, status);
        }
        if (td_cond_wait_until(&p->cond, &p->lock, deadline) == ETIMEDOUT && p->progress < target) {
            const uint64_t seen = p->progress;
            td_mutex_unlock(&p->lock);
            return timed_out(ring, me, peer, target, seen, timeout_ms);
        }
    }
    td_mutex_unlock(&p->lock);
    td_ring_note_wait(ring, me, wait_begin);
    return TD_OK;
}

uint32_t td_ring_spins(const td_ring *ring, uint32_t me)
{
    /* Outnumbered, a rank that waited long lately (a peer still in a
     * big step's compute) would only take turns from the ranks computing:
     * it sleeps at once, as before spinning was tried there. */
    if (ring->outnumbered && ring->ranks[me].recent_wait_ns > RING_SPIN_LIMIT_NS)
        return 0;
    if (td_spin_quiet(&ring->spin_quiet_until))
        return 0;
    return ring->spin_iterations;
}

bool td_ring_spin_yield(td_ring *ring)
{
    /* One slow yield stops every rank's spinning for a while (measured:
     * linreg on cpu:2, 4 and 8 with two busy loops running took 4-15 ms a
     * step spinning, 0.05-0.2 ms sleeping at once). */
    return td_spin_yield(&ring->spin_quiet_until);
}

void td_ring_note_wait(td_ring *ring, uint32_t me, uint64_t since)
{
    /* One op makes several waits, the long one (for the late peer) first:
     * a short one after it must not undo it at once, or every op's first
     * wait would spin. Halving the gap forgets a long wait within a few
     * ops of short ones. */
    const uint64_t wait = td_platform_now_ns() - since;
    uint64_t *recent = &ring->ranks[me].recent_wait_ns;
    *recent = wait >= *recent ? wait : wait + (*recent - wait) / 2;
}

/* Twice the device timeout: a device that stalls reports its own timeout
 * (and aborts the ring) before any peer gives up on it, so the message
 * names the cause, not a bystander waiting in the chain. This deadline
 * only fires for a rank that never returns at all. 64-bit: a timeout of
 * 2^31 ms must not wrap. */
static td_status wait_for(td_ring *ring, uint32_t me, uint32_t peer, uint64_t target)
{
    return wait_for_ms(ring, me, peer, target, 2ull * td_context_timeout_ms(ring->mesh->ctx));
}

void td_ring_publish(td_ring *ring, ring_rank *rr, uint64_t value)
{
    publish(ring, rr, value);
}

td_status td_ring_wait_for(td_ring *ring, uint32_t me, uint32_t peer, uint64_t target, uint64_t timeout_ms)
{
    return wait_for_ms(ring, me, peer, target, timeout_ms);
}

td_status td_ring_fail(td_ring *ring, uint32_t rank, td_status status)
{
    return fail(ring, rank, status);
}

/* ---- one op, described once, run by every rank ---- */

static size_t chunk_lo(size_t count, uint32_t n, uint32_t c)
{
    return (size_t)(((unsigned __int128)count * c) / n);
}

/* Slice k of chunk c as [lo, hi) of the whole array. */
static void slice_range(const ring_op *op, uint32_t n, uint32_t c, size_t k, size_t *lo, size_t *hi)
{
    size_t c_lo = chunk_lo(op->count, n, c), c_hi = chunk_lo(op->count, n, c + 1);
    size_t a = c_lo + k * SLICE_ELEMENTS, b = a + SLICE_ELEMENTS;
    *lo = a < c_hi ? a : c_hi;
    *hi = b < c_hi ? b : c_hi;
    if (op->windowed) { /* the slice's part inside the window; empty ones are skipped */
        if (*lo < op->win_lo)
            *lo = op->win_lo;
        if (*hi > op->win_hi)
            *hi = op->win_hi;
        if (*hi < *lo)
            *hi = *lo;
    }
}

void td_ring_slice_range(const ring_op *op, uint32_t n, uint32_t c, size_t k, size_t *lo, size_t *hi)
{
    slice_range(op, n, c, k, lo, hi);
}

static uint32_t wrap(int64_t v, uint32_t n)
{
    int64_t m = v % (int64_t)n;
    return (uint32_t)(m < 0 ? m + n : m);
}

/* Copies a received slice. For ops far larger than the caches the
 * destination will not be read again soon, so streaming stores skip the
 * read-for-ownership of every destination line: a third less memory traffic
 * on a machine whose cores share one memory pipe. */
void td_ring_copy_slice(float *restrict dst, const float *restrict src, size_t n, int stream)
{
#if defined(__SSE2__)
    if (stream && ((uintptr_t)dst & 15) == 0) {
        size_t i = 0;
        for (; i + 4 <= n; i += 4)
            _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
        for (; i < n; i++)
            dst[i] = src[i];
        _mm_sfence();
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, n * sizeof(float));
}

static void add_into(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* The owner's last touch of a fully reduced slice: finalize, place it where
 * final values live, and start its copy back to the device. */
static td_status finalize_slice(td_ring *ring, uint32_t r, const ring_op *op, float *work, float *gather, int direct,
                                uint32_t owned, size_t k)
{
    td_mesh_device *md = &ring->mesh->devices[r];
    size_t lo, hi;
    slice_range(op, ring->n, owned, k, &lo, &hi);
    if (hi == lo)
        return TD_OK;
    if (op->finalize)
        op->finalize(op->user, r, work + lo, lo, hi - lo);
    if (gather != work)
        memcpy(gather + lo, work + lo, (hi - lo) * sizeof(float));
    if (!direct)
        return md->ops->write(md->dev, op->out, (op->out_offset + lo) * sizeof(float), gather + lo,
                              (hi - lo) * sizeof(float));
    return TD_OK;
}

static double partial_slice(td_ring *ring, uint32_t r, const ring_op *op, float *work, uint32_t owned, size_t k)
{
    size_t lo, hi;
    slice_range(op, ring->n, owned, k, &lo, &hi);
    return hi > lo ? op->partial(op->user, r, work + lo, lo, hi - lo) : 0.0;
}

/* A barrier with a payload: publish this rank's share, wait for every
 * other rank's, and sum them in rank order, so every rank computes
 * bitwise the same total. Rank r reads peers other than its predecessor
 * here, which the rest of the schedule never does; that is safe because no
 * rank can reach the next op's PART before every rank has left this one
 * (the next reduce-scatter needs every rank to have started it). */
static td_status exchange_total(td_ring *ring, uint32_t r, uint64_t base, const unit_map *um, double mine,
                                const ring_op *op)
{
    ring_rank *me = &ring->ranks[r];
    me->partial = mine;
    publish(ring, me, base | u_part(um));
    for (uint32_t q = 0; q < ring->n; q++) {
        td_status s;
        if (q != r && (s = wait_for(ring, r, q, base | u_part(um))) != TD_OK)
            return s;
    }
    double total = 0.0;
    for (uint32_t q = 0; q < ring->n; q++)
        total += ring->ranks[q].partial;
    op->total(op->user, r, total);
    return TD_OK;
}

/* A traced phase of an op ends now: [*mark, now) on the track, and the
 * next phase starts here. Nothing when tracing is off. */
static void phase_done(td_trace *tr, uint32_t track, const char *category, const char *name, uint64_t *mark,
                       uint64_t bytes)
{
    if (!tr)
        return;
    const uint64_t now = td_trace_now();
    td_trace_span(tr, track, category, name, NULL, *mark, now, bytes);
    *mark = now;
}

/* Between processes, the owner's reduced slice goes to the process's copy
 * of the whole array first. */
static void deposit_slice(td_ring *ring, const ring_op *op, const float *work, uint32_t owned, size_t k)
{
    size_t lo, hi;
    slice_range(op, ring->n, owned, k, &lo, &hi);
    if (hi > lo)
        memcpy(ring->host + lo, work + lo, (hi - lo) * sizeof(float));
}

/* The rank's staging is smaller than an op of `bytes` needs. */
static td_status staging_short(td_ring *ring, uint32_t r, size_t bytes)
{
    return td_error_set(ring->mesh->ctx, TD_ERR_STATE,
                        "ring rank %u: collective of %zu bytes exceeds the %zu reserved at plan time", r, bytes,
                        ring->ranks[r].staging_bytes);
}

static td_status run_op(td_ring *ring, uint32_t r, const ring_op *op)
{
    td_context *ctx = ring->mesh->ctx;
    const uint32_t n = ring->n;
    const uint32_t pred = (r + n - 1) % n, succ = (r + 1) % n;
    ring_rank *me = &ring->ranks[r], *pr = &ring->ranks[pred];
    td_mesh_device *md = &ring->mesh->devices[r];
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    const unit_map um = {n, op->slices};
    const size_t bytes_needed = op->count * sizeof(float);
    const uint32_t first = r; /* the chunk this rank sends first, in both kinds of op */
    td_status s;
    td_trace *tr = td_trace_of(ctx);
    const uint32_t track = tr ? td_trace_device_track(tr, md) : 0;
    /* Bytes this rank receives from its predecessor in each phase. */
    const uint64_t peer_bytes = n > 1 ? (uint64_t)bytes_needed / n * (n - 1) : 0;
    uint64_t mark = tr ? td_trace_now() : 0;

    if (atomic_load(&ring->abort_status) != TD_OK)
        return td_error_set(ctx, TD_ERR_ABORTED, "ring rank %u: the ring failed earlier in this step", r);

    float *in_host = op->in_ptr, *out_host = op->out_ptr; /* already at the operands' offsets */
    const int direct = in_host && out_host;
    if (!direct && bytes_needed > 0 && (bytes_needed > me->staging_bytes || !me->staging_host))
        return fail(ring, r, staging_short(ring, r, bytes_needed));
    size_t ticket_need = (size_t)n * op->slices + 1;
    if (!direct && ticket_need > me->ticket_capacity)
        return fail(ring, r, td_error_set(ctx, TD_ERR_STATE, "ring rank %u: %zu slices exceed the %zu reserved", r,
                                         ticket_need, me->ticket_capacity));

    /* Device work enqueued before the collective must be complete before the
     * host touches (or copies out of) the device memory -- for a prefetched
     * window only the copy that td_ring_window_prefetch enqueued after that
     * work, while the kernels behind it keep running. */
    const int prefetched = !direct && op->prefetched != 0;
    if ((s = prefetched ? ops->wait(dev, op->prefetched, td_context_timeout_ms(ctx))
                        : td_mesh_device_submit_wait(md, td_context_timeout_ms(ctx))) != TD_OK)
        return fail(ring, r, s);

    if (tr)
        mark = td_trace_now(); /* the phases start once the device's earlier work is done */
    float *work, *gather;
    if (direct) {
        /* In the all-gather the input is rank r's chunk only; place it. */
        if (op->kind == OP_ALL_GATHER) {
            size_t lo = chunk_lo(op->count, n, r), hi = chunk_lo(op->count, n, r + 1);
            if (hi > lo)
                memmove(out_host + lo, in_host, (hi - lo) * sizeof(float));
            work = gather = out_host;
        } else if (op->consume_input || in_host == out_host) {
            work = in_host;
            gather = out_host;
        } else {
            /* The operand must survive (psum(x) then x used again): work in
             * the output, which every rank overwrites anyway. */
            if (op->count)
                memmove(out_host, in_host, op->count * sizeof(float));
            work = gather = out_host;
        }
    } else if (prefetched) {
        work = gather = me->staging_host; /* the window is there, at its elements' indices */
    } else {
        work = gather = me->staging_host;
        /* Enqueue every device->host copy now, in the order the schedule
         * needs them, one ticket per slice: slice k+1 travels while slice k
         * is being reduced. */
        uint32_t chunks = op->kind == OP_ALL_GATHER ? 1 : n;
        for (uint32_t j = 0; j < chunks; j++) {
            uint32_t c = wrap((int64_t)r - j, n);
            for (size_t k = 0; k < op->slices; k++) {
                size_t lo, hi;
                slice_range(op, n, c, k, &lo, &hi);
                size_t src = op->kind == OP_ALL_GATHER ? lo - chunk_lo(op->count, n, r) : lo;
                if (hi > lo && (s = ops->read(dev, op->in, (op->in_offset + src) * sizeof(float), work + lo,
                                              (hi - lo) * sizeof(float))) != TD_OK)
                    return fail(ring, r, s);
                if ((s = ops->submit(dev, &me->tickets[(size_t)c * op->slices + k])) != TD_OK)
                    return fail(ring, r, s);
            }
        }
    }

    /* On a bf16 wire a rank sends its partial sums as 2-byte values when
     * it holds the memory (rings that run the ring proper reserve it);
     * each rank decides for itself and says so with its pointers, and its
     * successor reads whichever it sends: the same values either way. */
    const bool wire16 = op->bf16 && op->kind == OP_ALLREDUCE && n > 1 && me->wire && me->wire_elems >= op->count;
    const uint64_t base = (uint64_t)(++me->op) << 32;
    td_mutex_lock(&me->lock);
    me->work = work;
    me->gather = gather;
    me->sends_wire = wire16;
    td_mutex_unlock(&me->lock);
    publish(ring, me, base | 0);

    const uint32_t timeout = td_context_timeout_ms(ctx);
    /* A device's own waits check the abort too: a job that timed out
     * aborts the ring before it fences its devices off (worker.c), and a
     * fenced device must not go on through a wait per slice. */
#define WAIT_OWN(c, k) \
    do { \
        if (!direct && atomic_load(&ring->abort_status) != TD_OK) \
            return td_error_set(ctx, TD_ERR_ABORTED, "ring rank %u: the ring failed during this collective", r); \
        if (!direct && !prefetched && \
            (s = ops->wait(dev, me->tickets[(size_t)(c) * op->slices + (k)], timeout)) != TD_OK) \
            return fail(ring, r, s); \
    } while (0)
#define WAIT_PRED(unit) \
    do { \
        if ((s = wait_for(ring, r, pred, base | (unit))) != TD_OK) \
            return fail(ring, r, s); \
    } while (0)

    /* Load: the chunk this rank sends first must be on the host -- on a
     * bf16 wire as it travels, rounded (it is only ever sent: this rank
     * receives the chunk's result into gather). */
    for (size_t k = 0; k < op->slices; k++) {
        WAIT_OWN(first, k);
        if (op->bf16) {
            size_t lo, hi;
            slice_range(op, n, first, k, &lo, &hi);
            if (wire16)
                wire_load(me->wire + lo, work + lo, hi - lo);
            else
                td_ring_round_bf16(work + lo, hi - lo);
        }
        publish(ring, me, base | u_load(&um, k));
    }
    if (!direct) {
        const size_t loaded = op->kind == OP_ALL_GATHER ? (chunk_lo(op->count, n, r + 1) - chunk_lo(op->count, n, r)) *
                                                              sizeof(float)
                                                        : bytes_needed;
        phase_done(tr, track, "copy", "device->host", &mark, loaded);
    }

    uint32_t owned = wrap((int64_t)r + op->shift, n);
    if (op->kind == OP_ALLREDUCE) {
        /* The last reduce-scatter step completes the owned chunk: finalize
         * each slice right after its add, while it is still in cache --
         * or, when a total is needed first, take the slice's share then
         * and finalize after the exchange. */
        const int across = ring->n_procs > 1; /* the other processes sum, total and finalize after */
        const int deferred = op->partial != NULL && !across;
        double mine = 0.0;
        for (uint32_t step = 0; step + 1 < n; step++) {
            uint32_t c = wrap((int64_t)r - 1 - step, n);
            for (size_t k = 0; k < op->slices; k++) {
                WAIT_PRED(step == 0 ? u_load(&um, k) : u_rs(&um, step - 1, k));
                WAIT_OWN(c, k);
                size_t lo, hi;
                slice_range(op, n, c, k, &lo, &hi);
                const bool from_wire = op->bf16 && pr->sends_wire; /* published with its unit 0 */
                if (wire16 && step + 2 < n && from_wire) /* the sum travels on: 2 bytes in, 2 out */
                    wire_add_send(me->wire + lo, work + lo, pr->wire + lo, hi - lo);
                else if (wire16 && step + 2 < n)
                    wire_add_send_floats(me->wire + lo, work + lo, pr->work + lo, hi - lo);
                else if (from_wire) /* complete, or sent on as floats */
                    wire_add_last(work + lo, pr->wire + lo, hi - lo);
                else
                    add_into(work + lo, pr->work + lo, hi - lo);
                if (op->bf16 && !from_wire && !(wire16 && step + 2 < n))
                    td_ring_round_bf16(work + lo, hi - lo);
                publish(ring, me, base | u_rs(&um, step, k));
                if (step + 2 == n && across)
                    deposit_slice(ring, op, work, owned, k);
                else if (step + 2 == n && deferred)
                    mine += partial_slice(ring, r, op, work, owned, k);
                else if (step + 2 == n && (s = finalize_slice(ring, r, op, work, gather, direct, owned, k)) != TD_OK)
                    return fail(ring, r, s);
                if (step + 2 == n && !deferred && !across)
                    publish(ring, me, base | u_fin(&um, k));
            }
        }
        for (size_t k = 0; n == 1 && k < op->slices; k++) {
            WAIT_OWN(owned, k);
            if (across) {
                deposit_slice(ring, op, work, owned, k);
                continue;
            }
            if (deferred) {
                mine += partial_slice(ring, r, op, work, owned, k);
                continue;
            }
            if ((s = finalize_slice(ring, r, op, work, gather, direct, owned, k)) != TD_OK)
                return fail(ring, r, s);
            publish(ring, me, base | u_fin(&um, k));
        }
        if (deferred && (s = exchange_total(ring, r, base, &um, mine, op)) != TD_OK)
            return fail(ring, r, s);
        for (size_t k = 0; deferred && k < op->slices; k++) {
            if ((s = finalize_slice(ring, r, op, work, gather, direct, owned, k)) != TD_OK)
                return fail(ring, r, s);
            publish(ring, me, base | u_fin(&um, k));
        }
        phase_done(tr, track, "collective", "reduce-scatter", &mark, peer_bytes);
        if (across) {
            if ((s = td_ring_allreduce_across(ring, r, op, base, gather, direct)) != TD_OK)
                return fail(ring, r, s);
            phase_done(tr, track, "collective", "between processes", &mark, bytes_needed);
            return TD_OK;
        }
    } else if (!direct) {
        for (size_t k = 0; k < op->slices; k++) {
            size_t lo, hi;
            slice_range(op, n, owned, k, &lo, &hi);
            if (hi > lo && (s = ops->write(dev, op->out, (op->out_offset + lo) * sizeof(float), gather + lo,
                                           (hi - lo) * sizeof(float))) != TD_OK)
                return fail(ring, r, s);
        }
    }

    for (uint32_t step = 0; step + 1 < n; step++) {
        uint32_t c = wrap((int64_t)pred + op->shift - step, n);
        for (size_t k = 0; k < op->slices; k++) {
            uint64_t need = step > 0 ? u_ag(&um, step - 1, k)
                            : op->kind == OP_ALLREDUCE ? u_fin(&um, k)
                                                       : u_load(&um, k);
            WAIT_PRED(need);
            size_t lo, hi;
            slice_range(op, n, c, k, &lo, &hi);
            if (hi > lo) {
                td_ring_copy_slice(gather + lo, pr->gather + lo, hi - lo, op->count * sizeof(float) >= STREAM_THRESHOLD_BYTES);
                if (!direct && (s = ops->write(dev, op->out, (op->out_offset + lo) * sizeof(float), gather + lo,
                                               (hi - lo) * sizeof(float))) != TD_OK)
                    return fail(ring, r, s);
            }
            publish(ring, me, base | u_ag(&um, step, k));
        }
    }
#undef WAIT_OWN
#undef WAIT_PRED
    phase_done(tr, track, "collective", "all-gather", &mark, peer_bytes);

    if (prefetched) {
        /* The copies back go behind the kernels enqueued since the
         * prefetch; flushed, not waited for (td_ring.h). */
        uint64_t ticket;
        if ((s = ops->submit(dev, &ticket)) != TD_OK)
            return fail(ring, r, s);
    } else if (!direct) {
        if ((s = td_mesh_device_submit_wait(md, timeout)) != TD_OK)
            return fail(ring, r, s);
        phase_done(tr, track, "copy", "host->device", &mark, bytes_needed);
    }
    publish(ring, me, base | UNIT_DONE);
    if ((s = wait_for(ring, r, succ, base | UNIT_DONE)) != TD_OK)
        return fail(ring, r, s);
    return TD_OK;
}

/* Finds host views of the operands: the buffers' own memory on CPU devices,
 * a zero-copy map on unified-memory devices that offer one; otherwise the
 * op goes through staging. Maps are undone whatever the outcome. */
static td_status run_mapped(td_ring *ring, uint32_t r, ring_op *op)
{
    td_trace *tr = td_trace_of(ring->mesh->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    td_mesh_device *md = &ring->mesh->devices[r];
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    const size_t in_elems = op->kind == OP_ALL_GATHER ? chunk_lo(op->count, ring->n, r + 1) - chunk_lo(op->count, ring->n, r)
                                                      : op->count;
    float *in_base = ops->buffer_host_pointer(dev, op->in), *out_base = ops->buffer_host_pointer(dev, op->out);
    op->in_ptr = in_base ? in_base + op->in_offset : NULL;
    op->out_ptr = out_base ? out_base + op->out_offset : NULL;
    void *in_map = NULL, *out_map = NULL;
    /* A prefetched window is in staging already: no map (which would wait
     * for the device's whole queue). */
    if ((!op->in_ptr || !op->out_ptr) && ops->map && in_elems > 0 && op->count > 0 && !op->prefetched &&
        atomic_load(&ring->abort_status) == TD_OK) {
        uint32_t timeout = td_context_timeout_ms(ring->mesh->ctx);
        td_status s = ops->map(dev, op->in, op->in_offset * sizeof(float), in_elems * sizeof(float), timeout, &in_map);
        if (s == TD_OK && op->out == op->in && op->out_offset == op->in_offset && in_elems == op->count) {
            out_map = in_map;
        } else if (s == TD_OK) {
            s = ops->map(dev, op->out, op->out_offset * sizeof(float), op->count * sizeof(float), timeout, &out_map);
            if (s != TD_OK) {
                ops->unmap(dev, op->in, in_map);
                in_map = NULL;
            }
        }
        if (s == TD_OK) {
            op->in_ptr = in_map;
            op->out_ptr = out_map;
        } else if (s != TD_ERR_UNSUPPORTED) {
            return fail(ring, r, s);
        }
    }
    td_status s = run_op(ring, r, op);
    if (in_map) {
        td_status u = ops->unmap(dev, op->in, in_map);
        if (u == TD_OK && out_map != in_map)
            u = ops->unmap(dev, op->out, out_map);
        if (s == TD_OK && u != TD_OK)
            s = fail(ring, r, u);
    }
    if (s == TD_OK && tr)
        td_trace_span(tr, td_trace_device_track(tr, md), "collective",
                      op->kind == OP_ALL_GATHER ? "all-gather op" : "all-reduce", NULL, begin, td_trace_now(),
                      op->count * sizeof(float));
    return s;
}

static td_status rank_in_range(const td_ring *ring, uint32_t rank)
{
    if (rank >= ring->n)
        return td_error_set(ring->mesh->ctx, TD_ERR_INVALID_ARGUMENT, "ring rank %u out of range (%u ranks)", rank,
                            ring->n);
    return TD_OK;
}

/* Every op begins here: the rank's begun window, if any, is ended first,
 * so each rank runs its ops (and the leader its MPI calls) in one order. */
static td_status check_rank(td_ring *ring, uint32_t rank)
{
    td_status s = rank_in_range(ring, rank);
    return s == TD_OK ? td_ring_settle(ring, rank, false) : s;
}

static td_status check_window(const td_ring *ring, uint32_t rank, size_t count, size_t win_lo, size_t win_hi)
{
    if (win_lo > win_hi || win_hi > count)
        return td_error_set(ring->mesh->ctx, TD_ERR_INVALID_ARGUMENT,
                            "ring rank %u: window [%zu, %zu) of a %zu-element all-reduce, expected lo <= hi <= count",
                            rank, win_lo, win_hi, count);
    return TD_OK;
}

/* The all-reduce op over `count` elements, whole or (windowed) later. */
static ring_op allreduce_op(const td_ring *ring, td_buffer *in, uint64_t in_offset, td_buffer *out,
                            uint64_t out_offset, size_t count, td_ring_finalize_fn finalize, void *user, int consume)
{
    return (ring_op){
        .kind = OP_ALLREDUCE,
        .count = count,
        .shift = 1,
        .finalize = finalize,
        .user = user,
        .consume_input = consume,
        .in = in,
        .out = out,
        .in_offset = in_offset,
        .out_offset = out_offset,
        .slices = slices_for((count + ring->n - 1) / ring->n), /* the largest chunk */
    };
}

static td_status check_wire(td_ring *ring, uint32_t rank, td_ring_wire wire)
{
    if (wire == TD_RING_WIRE_FP32 || wire == TD_RING_WIRE_BF16)
        return TD_OK;
    return td_error_set(ring->mesh->ctx, TD_ERR_INVALID_ARGUMENT,
                        "ring rank %u: wire %d, expected TD_RING_WIRE_FP32 (0) or TD_RING_WIRE_BF16 (1)", rank,
                        (int)wire);
}

static td_status allreduce(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                           uint64_t out_offset, size_t count, td_ring_partial_fn partial, td_ring_total_fn total,
                           td_ring_finalize_fn finalize, void *user, int consume, td_ring_wire wire)
{
    td_status s = check_rank(ring, rank);
    if (s == TD_OK)
        s = check_wire(ring, rank, wire);
    if (s != TD_OK)
        return s;
    ring_op op = allreduce_op(ring, in, in_offset, out, out_offset, count, finalize, user, consume);
    op.bf16 = wire == TD_RING_WIRE_BF16 && ring->global_n > 1;
    op.partial = partial;
    op.total = total;
    if (td_ring_direct(ring))
        return td_ring_allreduce_direct(ring, rank, &op);
    return run_mapped(ring, rank, &op);
}

td_status td_ring_allreduce(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                            uint64_t out_offset, size_t count, td_ring_finalize_fn finalize, void *user)
{
    return allreduce(ring, rank, in, in_offset, out, out_offset, count, NULL, NULL, finalize, user, 0,
                     TD_RING_WIRE_FP32);
}

td_status td_ring_allreduce_consume(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                                    uint64_t out_offset, size_t count, td_ring_finalize_fn finalize, void *user,
                                    td_ring_wire wire)
{
    return allreduce(ring, rank, in, in_offset, out, out_offset, count, NULL, NULL, finalize, user, 1, wire);
}

td_status td_ring_allreduce_consume_total(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset,
                                          td_buffer *out, uint64_t out_offset, size_t count,
                                          td_ring_partial_fn partial, td_ring_total_fn total,
                                          td_ring_finalize_fn finalize, void *user, td_ring_wire wire)
{
    if (!partial || !total)
        return td_error_set(ring->mesh->ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_ring_allreduce_consume_total: partial or total is NULL");
    return allreduce(ring, rank, in, in_offset, out, out_offset, count, partial, total, finalize, user, 1, wire);
}

int td_ring_can_window(const td_ring *ring)
{
    /* The ring proper between processes hands whole ops to the other
     * processes (td_ring_allreduce_across), not windows. */
    return td_ring_direct(ring) || ring->n_procs <= 1;
}

td_status td_ring_window_prefetch(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, size_t count,
                                  size_t win_lo, size_t win_hi, uint64_t *ticket)
{
    if (!ticket)
        return td_error_set(ring->mesh->ctx, TD_ERR_INVALID_ARGUMENT, "td_ring_window_prefetch: ticket is NULL");
    *ticket = 0;
    td_status s = rank_in_range(ring, rank);
    if (s == TD_OK)
        s = check_window(ring, rank, count, win_lo, win_hi);
    if (s != TD_OK)
        return s;
    td_mesh_device *md = &ring->mesh->devices[rank];
    ring_rank *me = &ring->ranks[rank];
    if (td_ring_direct(ring) || win_hi == win_lo || md->ops->buffer_host_pointer(md->dev, in))
        return TD_OK; /* the op reads the rank's memory where it is */
    if (count * sizeof(float) > me->staging_bytes || !me->staging_host)
        return staging_short(ring, rank, count * sizeof(float));
    s = md->ops->read(md->dev, in, (in_offset + win_lo) * sizeof(float), me->staging_host + win_lo,
                      (win_hi - win_lo) * sizeof(float));
    return s == TD_OK ? md->ops->submit(md->dev, ticket) : s;
}

td_status td_ring_allreduce_consume_window(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset,
                                           td_buffer *out, uint64_t out_offset, size_t count, size_t win_lo,
                                           size_t win_hi, uint64_t prefetched, td_ring_finalize_fn finalize,
                                           void *user, td_ring_wire wire)
{
    td_status s = rank < ring->n ? td_ring_settle_for_window(ring, rank) : check_rank(ring, rank);
    if (s == TD_OK)
        s = check_wire(ring, rank, wire);
    if (s != TD_OK)
        return s;
    if (!td_ring_can_window(ring))
        return td_error_set(ring->mesh->ctx, TD_ERR_UNSUPPORTED,
                            "ring rank %u: a windowed all-reduce between processes needs the direct all-reduce (CPU "
                            "devices only in each process)",
                            rank);
    if ((s = check_window(ring, rank, count, win_lo, win_hi)) != TD_OK)
        return s;
    ring_op op = allreduce_op(ring, in, in_offset, out, out_offset, count, finalize, user, 1);
    op.windowed = true;
    op.win_lo = win_lo;
    op.win_hi = win_hi;
    op.bf16 = wire == TD_RING_WIRE_BF16 && ring->global_n > 1;
    if (td_ring_direct(ring))
        return td_ring_allreduce_direct(ring, rank, &op);
    op.prefetched = prefetched;
    return run_mapped(ring, rank, &op);
}

td_status td_ring_all_gather(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                             uint64_t out_offset, size_t count)
{
    td_status s = check_rank(ring, rank);
    if (s != TD_OK)
        return s;
    if (ring->n_procs > 1)
        return td_ring_all_gather_across(ring, rank, in, in_offset, out, out_offset, count);
    ring_op op = {
        .kind = OP_ALL_GATHER,
        .count = count * ring->n,
        .shift = 0,
        .in = in,
        .out = out,
        .in_offset = in_offset,
        .out_offset = out_offset,
        .slices = slices_for(count),
    };
    return run_mapped(ring, rank, &op);
}

static td_status broadcast(td_ring *ring, uint32_t rank, uint32_t root, td_buffer *in, uint64_t in_offset,
                           td_buffer *out, uint64_t out_offset, size_t count);

td_status td_ring_broadcast(td_ring *ring, uint32_t rank, uint32_t root, td_buffer *in, uint64_t in_offset,
                            td_buffer *out, uint64_t out_offset, size_t count)
{
    td_trace *tr = td_trace_of(ring->mesh->ctx);
    const uint64_t begin = tr ? td_trace_now() : 0;
    td_status s = broadcast(ring, rank, root, in, in_offset, out, out_offset, count);
    if (s == TD_OK && tr && rank < ring->n)
        td_trace_span(tr, td_trace_device_track(tr, &ring->mesh->devices[rank]), "collective", "broadcast", NULL, begin,
                      td_trace_now(), count * sizeof(float));
    return s;
}

static td_status broadcast(td_ring *ring, uint32_t rank, uint32_t root, td_buffer *in, uint64_t in_offset,
                           td_buffer *out, uint64_t out_offset, size_t count)
{
    td_status s = check_rank(ring, rank);
    if (s != TD_OK)
        return s;
    if (root >= ring->global_n)
        return td_error_set(ring->mesh->ctx, TD_ERR_INVALID_ARGUMENT, "broadcast root %u out of range (%u ranks)",
                            root, ring->global_n);
    if (ring->n_procs > 1)
        return td_ring_broadcast_across(ring, rank, root, in, in_offset, out, out_offset, count);
    td_context *ctx = ring->mesh->ctx;
    const uint32_t n = ring->n, pred = (rank + n - 1) % n, succ = (rank + 1) % n;
    ring_rank *me = &ring->ranks[rank], *pr = &ring->ranks[pred];
    td_mesh_device *md = &ring->mesh->devices[rank];
    const td_backend_ops *ops = md->ops;
    td_device *dev = md->dev;
    const uint32_t timeout = td_context_timeout_ms(ctx);
    size_t slices = slices_for(count);

    if (atomic_load(&ring->abort_status) != TD_OK)
        return td_error_set(ctx, TD_ERR_ABORTED, "ring rank %u: the ring failed earlier in this step", rank);
    float *in_host = ops->buffer_host_pointer(dev, in);
    float *out_host = ops->buffer_host_pointer(dev, out);
    const int direct = in_host && out_host;
    if (!direct && count > 0 && (count * sizeof(float) > me->staging_bytes || !me->staging_host))
        return fail(ring, rank, td_error_set(ctx, TD_ERR_STATE,
                                            "ring rank %u: broadcast of %zu bytes exceeds the %zu reserved", rank,
                                            count * sizeof(float), me->staging_bytes));
    if ((s = td_mesh_device_submit_wait(md, timeout)) != TD_OK)
        return fail(ring, rank, s);

    float *work = direct ? out_host + out_offset : me->staging_host;
    if (rank == root) {
        if (direct) {
            if (count && work != in_host + in_offset)
                memmove(work, in_host + in_offset, count * sizeof(float));
        } else if (count) {
            int same = in == out && in_offset == out_offset;
            if ((s = ops->read(dev, in, in_offset * sizeof(float), work, count * sizeof(float))) != TD_OK ||
                (!same && (s = ops->copy(dev, in, in_offset * sizeof(float), out, out_offset * sizeof(float),
                                         count * sizeof(float))) != TD_OK) ||
                (s = td_mesh_device_submit_wait(md, timeout)) != TD_OK)
                return fail(ring, rank, s);
        }
    }
    const uint64_t base = (uint64_t)(++me->op) << 32;
    td_mutex_lock(&me->lock);
    me->work = work;
    me->gather = work;
    td_mutex_unlock(&me->lock);
    publish(ring, me, base | 0);
    for (size_t k = 0; k < slices; k++) {
        if (rank != root) {
            if ((s = wait_for(ring, rank, pred, base | (1 + k))) != TD_OK)
                return fail(ring, rank, s);
            size_t lo = k * SLICE_ELEMENTS, hi = lo + SLICE_ELEMENTS < count ? lo + SLICE_ELEMENTS : count;
            memcpy(work + lo, pr->work + lo, (hi - lo) * sizeof(float));
            if (!direct && (s = ops->write(dev, out, (out_offset + lo) * sizeof(float), work + lo,
                                           (hi - lo) * sizeof(float))) != TD_OK)
                return fail(ring, rank, s);
        }
        publish(ring, me, base | (1 + k));
    }
    if (!direct && (s = td_mesh_device_submit_wait(md, timeout)) != TD_OK)
        return fail(ring, rank, s);
    publish(ring, me, base | UNIT_DONE);
    if ((s = wait_for(ring, rank, succ, base | UNIT_DONE)) != TD_OK)
        return fail(ring, rank, s);
    return TD_OK;
}
