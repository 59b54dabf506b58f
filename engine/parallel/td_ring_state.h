/* The ring's insides, shared by ring.c (the collectives inside one
 * process) and ring_procs.c (their part between processes). */
#ifndef TD_RING_STATE_H
#define TD_RING_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "td_exchange_thread.h"
#include "td_platform.h"
#include "td_procs.h"
#include "td_ring.h"

#define SLICE_ELEMENTS ((size_t)64 * 1024) /* 256 KiB of floats: a slice stays in L2 from add to finalize */
#define UNIT_DONE 0xFFFFFFFFu

typedef struct ring_rank {
    td_mutex lock;
    td_cond cond;
    uint64_t progress;
    float *work;   /* reduce-scatter memory of the current op */
    float *gather; /* memory that holds final values of the current op */
    bool sends_wire; /* the current op's partial sums go out through `wire` (below) */
    double partial; /* this rank's share of the current op's total; read by peers after PART */
    /* Below: touched by the rank's own thread only. */
    uint32_t op;
    td_staging *staging;
    float *staging_host;
    size_t staging_bytes;
    uint64_t *tickets;
    size_t ticket_capacity;
    uint64_t direct_tasks; /* tasks of the direct all-reduce's phases this rank has run through */
    uint64_t recent_wait_ns; /* its waits for peers, spun or slept: a longer one sets it, a shorter one halves the gap (td_ring_note_wait) */
    /* The ring proper's outgoing partial sums on a bf16 wire, 2 bytes
     * each, at their elements' indices: what the successor reads instead
     * of `work`. Reserved only for rings that run the ring proper; read by
     * the successor during an op, sized between jobs. */
    uint16_t *wire;
    size_t wire_elems;
    /* A windowed all-reduce between processes begun but not settled: its
     * exchange is on the exchange thread (td_ring_settle ends it). */
    bool pending; /* the op is ring->pending_ops[rank] */
    uint64_t pending_base;
    float *pending_gather;
} ring_rank;

/* The direct all-reduce (ring_direct.c): when every rank is a CPU device
 * of this process, all their memory is this address space's, and each
 * chunk is summed by reading every rank's buffer in the ring's order. The
 * counters are shared by the ranks of one op; claims carry the op's stamp
 * in their upper half, so a counter left by an earlier op reads as zero
 * and nothing has to be reset between ops (ranks may still be leaving
 * the previous op while the next one starts). */
typedef struct ring_direct {
    bool capable;             /* every rank a CPU device of this process */
    bool on;                  /* capable, and not switched off (td_ring_set_direct) */
    _Atomic uint64_t *next;   /* n: per chunk, (stamp << 32) | the next slice to claim */
    _Atomic uint64_t active;  /* (stamp << 32) | ranks that took a stream */
    _Atomic uint64_t finished; /* tasks finished since the last reset */
    td_mutex lock;
    td_cond cond;
    _Atomic uint64_t released; /* tasks finished whose phase is closed; stored under lock */
    double *shares;           /* for a total: each task's partial, chunk-major */
    size_t share_capacity;
} ring_direct;

struct td_ring {
    td_mesh *mesh;
    uint32_t n;
    ring_rank *ranks;
    atomic_int abort_status;
    /* How a rank waiting for another spins before it sleeps: up to
     * spin_iterations pauses and RING_SPIN_LIMIT_NS, offering its core to
     * another ready thread every yield_every pauses (the rank waited for
     * may be the one that needs it: ranks outnumber the cores, or another
     * process holds one). Outnumbered, a rank spins only when its recent waits were
     * short (td_ring_spins). */
    uint32_t spin_iterations;
    uint32_t yield_every;
    bool outnumbered; /* more ranks than cores */
    /* No rank spins before this time (td_platform_now_ns; atomic): a
     * yield lost a time slice to another thread (td_ring_spins). */
    uint64_t spin_quiet_until;
    /* The job's other processes (ring_procs.c); procs NULL in one process.
     * The global mesh is process 0's devices, then process 1's, ... */
    td_procs *procs;
    uint32_t proc, n_procs;
    uint32_t global_n;       /* devices of every process */
    uint32_t *device_offset; /* n_procs + 1: process q's devices are [q], [q+1] */
    td_mutex host_lock;      /* reserve calls of several ranks at once */
    float *host;             /* the process's copy of a whole collective */
    uint16_t *packed;        /* host_elems: a bf16 wire's 2-byte values for the exchange */
    const void *exchange_send;     /* what the current exchange sends: host, or packed */
    size_t exchange_element_bytes; /* and its elements' size */
    float *received;         /* the other processes' blocks of this process's part */
    size_t host_elems, received_elems;
    size_t *blocks;          /* n_procs + 1: the current op's blocks per process */
    double process_total;    /* the current op's total over every device, for `total` */
    /* The exchanges of windowed all-reduces (the buckets) on a thread of
     * their own (ring_procs.c), started with the ring when the job has
     * other processes; NULL in one process, with TANDEM_EXCHANGE_THREAD=0,
     * or when it could not start (then they run inline on the leader). */
    td_exchange_thread *exchange;
    struct ring_op *pending_ops; /* n + 1: each rank's begun window (ring_rank.pending), then the gathered one's */
    bool exchange_tried;
    /* Below: the leader's (rank 0's) only. */
    uint64_t jobs_on_thread;  /* exchanges and gathers the thread made */
    uint64_t exchange_ticket; /* the begun window's exchange job */
    uint64_t last_ticket;     /* the last job handed to the thread */
    /* With one local rank the window's gather between processes is left
     * on the thread too, and placed at the rank's next settle. */
    bool gather_pending;
    uint64_t gather_ticket;
    float *gather_out;     /* the rank's output (host memory: windows are direct) */
    size_t *gather_blocks; /* n_procs + 1: that window's blocks (ring->blocks moves on) */
    bool exchange_inline; /* TANDEM_EXCHANGE_THREAD=0: never start it (measurement) */
    ring_direct direct;
};

typedef enum { OP_ALLREDUCE, OP_ALL_GATHER } op_kind;

typedef struct ring_op {
    op_kind kind;
    size_t count; /* elements of the whole (virtual) array */
    uint32_t shift; /* after the reduce-scatter, rank r owns chunk (r + shift) % N */
    td_ring_finalize_fn finalize;
    td_ring_partial_fn partial; /* non-NULL: exchange a total before any finalize */
    td_ring_total_fn total;
    void *user;
    int consume_input; /* the input's memory may serve as the reduction's scratch */
    td_buffer *in, *out;
    float *in_ptr, *out_ptr; /* host views of the operands when zero-copy, else NULL */
    uint64_t in_offset, out_offset;
    size_t slices; /* per chunk */
    /* A window (td_ring_allreduce_consume_window): only elements
     * [win_lo, win_hi) of the whole array are reduced, each in its whole
     * array's chunk, so with that chunk's order and owner. */
    bool windowed;
    size_t win_lo, win_hi;
    /* A window whose device->host copy td_ring_window_prefetch enqueued:
     * its ticket (0: none; the op copies and waits for the queue itself). */
    uint64_t prefetched;
    /* TD_RING_WIRE_BF16 and more than one device in the job: partial sums
     * are rounded to bfloat16 where they cross to another rank, and the
     * complete sum before its finalize (td_ring_wire). */
    bool bf16;
} ring_op;

/* td_bf16_round's bits (nearest even, NaN quietened, past the range
 * infinity) without its branch, so that the compiler vectorizes the
 * loops of the bf16 wire (a select of two integer results per lane);
 * test_ring_wire.c holds it to td_bf16_round bitwise. */
static inline float td_ring_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The all-reduce's loops come in AVX-512 and AVX2 copies (TD_SIMD_CLONES):
 * the bf16 rounding is integer arithmetic per lane and the adds are one
 * per element, so every copy gives the same bits -- at baseline SSE2 the
 * rounding made a 64 MiB all-reduce 2-4x slower. */

/* x[0, n) = td_ring_bf16(x[i]): what a partial sum becomes on a bf16 wire. */
void td_ring_round_bf16(float *x, size_t n);

typedef struct unit_map {
    uint32_t n;
    size_t s;
} unit_map;

static inline uint64_t u_load(const unit_map *m, size_t k) { (void)m; return 1 + k; }
static inline uint64_t u_rs(const unit_map *m, uint32_t step, size_t k) { return 1 + m->s + (uint64_t)step * m->s + k; }
static inline uint64_t u_part(const unit_map *m) { return 1 + m->s + (uint64_t)(m->n - 1) * m->s; }
static inline uint64_t u_fin(const unit_map *m, size_t k) { return u_part(m) + 1 + k; }
static inline uint64_t u_ag(const unit_map *m, uint32_t step, size_t k)
{
    return u_part(m) + 1 + m->s + (uint64_t)step * m->s + k;
}

/* Ring internals the part between processes uses (ring.c). */
void td_ring_publish(td_ring *ring, ring_rank *rr, uint64_t value);
td_status td_ring_wait_for(td_ring *ring, uint32_t me, uint32_t peer, uint64_t target, uint64_t timeout_ms);
/* Pauses rank `me` may spin on before it sleeps in its next wait (td_ring's spin fields). */
uint32_t td_ring_spins(const td_ring *ring, uint32_t me);
/* The spin's yield: false when it lost a time slice, and then no rank spins for TD_SPIN_QUIET_NS. */
bool td_ring_spin_yield(td_ring *ring);
/* Rank `me` waited `since` (td_platform_now_ns) until now. */
void td_ring_note_wait(td_ring *ring, uint32_t me, uint64_t since);
td_status td_ring_fail(td_ring *ring, uint32_t rank, td_status status);

/* Copies n floats; with `stream`, past the caches (for ops far larger
 * than them: skips the read-for-ownership of every destination line). */
void td_ring_copy_slice(float *restrict dst, const float *restrict src, size_t n, int stream);
/* Slice k of chunk c of an op over n ranks, as [lo, hi) of the whole array. */
void td_ring_slice_range(const ring_op *op, uint32_t n, uint32_t c, size_t k, size_t *lo, size_t *hi);
/* Ops of at least this many bytes stream their copies (td_ring_copy_slice). */
#define STREAM_THRESHOLD_BYTES ((size_t)16 << 20)
#define RING_SPIN_LIMIT_NS 100000u /* 0.1 ms */

/* The direct all-reduce (ring_direct.c). init decides whether the ring
 * can take it (after the processes are known); the rest are the ring's
 * reserve, abort and reset, for the direct path's own state. */
td_status td_ring_direct_init(td_ring *ring);
void td_ring_direct_destroy(td_ring *ring);
td_status td_ring_direct_reserve(td_ring *ring, size_t bytes);
void td_ring_direct_wake(td_ring *ring);
void td_ring_direct_reset(td_ring *ring);
/* The all-reduce of `op` on rank r, every rank's memory read in place. */
td_status td_ring_allreduce_direct(td_ring *ring, uint32_t r, ring_op *op);

/* Joins the ring to the context's processes: learns every process's
 * device count (collective; from td_mesh_ring, on the driving thread). */
td_status td_ring_join_processes(td_ring *ring);
void td_ring_leave_processes(td_ring *ring);
/* Reserves the host memory the part between processes needs for
 * collectives of up to `bytes` bytes (from td_ring_reserve). */
td_status td_ring_reserve_processes(td_ring *ring, size_t bytes);

/* The all-reduce between processes, once the local reduce-scatter left
 * every rank's chunk of the local sum in ring->host: every process sums
 * its block over the processes, each local rank finalizes its part of
 * that block (after the total, when op->partial), the blocks are
 * gathered back, and the whole result goes to the rank's output. */
td_status td_ring_allreduce_across(td_ring *ring, uint32_t r, const ring_op *op, uint64_t base, float *gather,
                                   int direct);
/* The same for a window, split at the leader's exchange: begin deposits
 * the rank's sums and (leader) hands the exchange to the exchange thread,
 * then returns; the rank's next ring op, or td_ring_settle, ends it. Runs
 * td_ring_allreduce_across whole when there is no exchange thread. */
td_status td_ring_allreduce_across_begin(td_ring *ring, uint32_t r, const ring_op *op, uint64_t base, float *gather);
/* Stops the exchange thread (ring destruction). */
void td_ring_exchange_stop(td_ring *ring);
/* td_ring_settle, but a window's gather may stay in flight (the next
 * window's begin: its exchange queues behind that gather). */
td_status td_ring_settle_for_window(td_ring *ring, uint32_t rank);
/* all_gather and broadcast over every device of every process. */
td_status td_ring_all_gather_across(td_ring *ring, uint32_t r, td_buffer *in, uint64_t in_offset, td_buffer *out,
                                    uint64_t out_offset, size_t count);
td_status td_ring_broadcast_across(td_ring *ring, uint32_t r, uint32_t root, td_buffer *in, uint64_t in_offset,
                                   td_buffer *out, uint64_t out_offset, size_t count);

#endif
