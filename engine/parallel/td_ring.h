/* tandem's own ring collectives over host memory.
 *
 * Every collective is called by all workers of a mesh at once, each with its
 * own rank (mesh position) and the same sizes. Data moves between neighbours
 * only: rank r reads from rank r-1. For devices whose memory is host memory
 * (CPU devices) the ring works on it directly; for the others it goes through
 * the rank's host-pinned staging buffer, and the device->host copy of each
 * slice is enqueued ahead so it overlaps the reduction of the previous one.
 *
 * All-reduce = reduce-scatter (N-1 steps) + all-gather (N-1 steps). The sum
 * for chunk c is always accumulated in the same order (rank c+1 first, along
 * the ring), and its final value is computed once, by its owner, then copied:
 * every rank receives bitwise the same result, run after run.
 *
 * Every wait is bounded: device waits by the context timeout, waits for a
 * peer by twice that (so a stalled device reports itself first). A rank that fails calls
 * td_ring_abort; every peer waiting on the ring then returns TD_ERR_ABORTED.
 *
 * On success, when a collective returns on rank r no other rank reads r's
 * memory any more. After a failure that promise does not hold: a peer may
 * still be reading, so memory used by a failed collective must stay alive
 * until every rank has returned (the end of the mesh job). */
#ifndef TD_RING_H
#define TD_RING_H

#include <stddef.h>
#include <stdint.h>

#include "td_mesh_internal.h"

typedef struct td_ring td_ring;

/* The mesh's ring: created on the first call and destroyed with the mesh
 * (core keeps it behind td_mesh.collectives). Call from the thread that
 * drives the mesh, between jobs (a program's compile), never from a
 * worker. */
td_status td_mesh_ring(td_mesh *mesh, td_ring **out);

/* Makes rank `rank` ready for collectives of up to `bytes` bytes (staging
 * memory for devices that need it). Call from that rank's worker thread at
 * plan time, never in a steady-state step. */
td_status td_ring_reserve(td_ring *ring, uint32_t rank, size_t bytes);

/* Called for each slice of each fully reduced chunk before it is gathered,
 * once per element, with `rank` the chunk's owner (td_ring_owned_range):
 * `data` holds the sum over all ranks of elements [offset, offset+count) and
 * may be rewritten in place (scaled for pmean, replaced by updated parameters
 * for the trainer's fused update). It runs on the owner's thread in the
 * ring proper; in the direct all-reduce (td_ring_direct) on whichever thread
 * summed the slice -- a rank's worker or a host-pool helper --, and for
 * different slices of one chunk possibly at the same time, so it must keep
 * per-rank state of its own thread-safe. */
typedef void (*td_ring_finalize_fn)(void *user, uint32_t rank, float *data, size_t offset, size_t count);

/* How the operands of an all-reduce travel between ranks (the trainer's
 * td_wire). FP32: as they are. BF16: every partial sum that crosses to
 * another rank is rounded to bfloat16 first (round to nearest even,
 * td_bf16_round), every addition is in float, and the complete sum is
 * rounded once more before its owner finalizes it: for chunk c,
 *     s = r(x[c]); s = r(x[c+j] + s) for j = 1 .. N-1,
 * the ring's order with r = td_bf16_round, on every path (the ring
 * proper, the direct all-reduce, which emulates it, and the local part of
 * the hierarchical one). Between processes each process's sum travels as
 * 2-byte values, the processes' copies are summed in process order in
 * float and that sum is rounded again. With one device in the whole job
 * nothing travels and nothing is rounded. The finalized values (the
 * trainer's updated parameters) travel back as floats: every replica ends
 * with the owner's bits. */
typedef enum td_ring_wire {
    TD_RING_WIRE_FP32 = 0,
    TD_RING_WIRE_BF16 = 1,
} td_ring_wire;

/* Sums `count` floats at (in, in_offset) over all ranks, lets the chunk owner
 * finalize them, and leaves the result at (out, out_offset) on every rank.
 * `out` may be `in` (in place). finalize may be NULL (plain sum). */
td_status td_ring_allreduce(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                            uint64_t out_offset, size_t count, td_ring_finalize_fn finalize, void *user);

/* The same, but the input's memory may be used as scratch and is undefined
 * afterwards: saves a pass over the data when the input is dead anyway (the
 * trainer's gradient bucket). */
td_status td_ring_allreduce_consume(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                                    uint64_t out_offset, size_t count, td_ring_finalize_fn finalize, void *user,
                                    td_ring_wire wire);

/* For a finalize that needs one number of the whole reduced array first
 * (the trainer's global gradient norm, for clipping): `partial` runs on
 * each slice of the owner's chunk right after its last add (it may rewrite
 * the slice, e.g. into the mean) and returns its share; once every rank has
 * reduced its chunk, each rank receives `total`, the shares summed over the
 * ranks in rank order -- bitwise the same on every rank -- and only then
 * finalizes its slices. Costs one exchange of a double per rank, no extra
 * pass over the data. With TD_RING_WIRE_BF16, partial sees the
 * rounded sums. */
typedef double (*td_ring_partial_fn)(void *user, uint32_t rank, float *data, size_t offset, size_t count);
typedef void (*td_ring_total_fn)(void *user, uint32_t rank, double total);

/* td_ring_allreduce_consume with a `partial`/`total` exchange between the
 * reduce-scatter and the finalize (both must be non-NULL). */
td_status td_ring_allreduce_consume_total(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset,
                                          td_buffer *out, uint64_t out_offset, size_t count,
                                          td_ring_partial_fn partial, td_ring_total_fn total,
                                          td_ring_finalize_fn finalize, void *user, td_ring_wire wire);

/* Part of td_ring_allreduce_consume: only elements [win_lo, win_hi) of the
 * `count`-element array are reduced, finalized and written out, each with
 * the order and owner it has in the whole array's all-reduce -- so the
 * windows of a tiling, run one after another (as the trainer does bucket by
 * bucket while backward goes on), give bitwise the whole all-reduce's
 * result. Only where td_ring_can_window; elsewhere TD_ERR_UNSUPPORTED.
 *
 * `prefetched`: 0, or the ticket td_ring_window_prefetch gave for this
 * window (or a later one, on the same device). With a ticket the rank's
 * window is already on its way to staging: the op waits for that ticket
 * only, not for the device's whole queue -- work enqueued after the
 * prefetch (the rest of backward) goes on running -- and it leaves its
 * host->device copies of the result in the queue, flushed, not waited
 * for. The caller then must wait for the device before it reads what the
 * window wrote (the trainer does at the end of backward); an in-order
 * queue keeps the copies before any later kernel. */
td_status td_ring_allreduce_consume_window(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset,
                                           td_buffer *out, uint64_t out_offset, size_t count, size_t win_lo,
                                           size_t win_hi, uint64_t prefetched, td_ring_finalize_fn finalize,
                                           void *user, td_ring_wire wire);
/* Windows are possible: the direct all-reduce (every local rank a CPU
 * device; across processes too, the blocks exchanged clipped likewise),
 * or the ring proper within one process (GPU and mixed meshes). */
int td_ring_can_window(const td_ring *ring);
/* Enqueues the device->host copy of elements [win_lo, win_hi) of the
 * rank's `count`-element input (at in_offset) into the rank's staging,
 * flushed, and gives its ticket in *ticket -- 0 where nothing needs
 * copying (a direct all-reduce, or a rank whose memory is host memory).
 * Call from the rank's worker right after the kernels that complete the
 * window, before any that follow: td_ring_allreduce_consume_window with
 * the ticket then runs while those kernels do. Nothing is reduced here;
 * the peers are not involved. */
td_status td_ring_window_prefetch(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, size_t count,
                                  size_t win_lo, size_t win_hi, uint64_t *ticket);
/* Across processes a window's exchange between processes runs on the
 * ring's exchange thread while the rank goes on (the next bucket's
 * kernels), and ends at the rank's next ring op or here: the window's
 * finalize and placement are done when this returns. Every ring op
 * settles first, so ops stay in one order; the trainer settles after
 * backward. With `failed` (the rank's job failed) it only waits the
 * exchange out, so nothing is inside MPI once the job has ended. */
td_status td_ring_settle(td_ring *ring, uint32_t rank, bool failed);
/* How many jobs between processes (windows' exchanges, and their gathers
 * where the process has one device) ran on the exchange thread since the
 * ring was made (tests: the overlap did happen). */
uint64_t td_ring_exchanges_on_thread(const td_ring *ring);

/* [*lo, *hi): the elements of a `count`-element all-reduce whose reduced
 * value rank `rank` owns and finalizes. The trainer keeps the optimizer
 * state of exactly this range on that rank. Across processes, the ranges
 * of every rank of every process tile [0, count) once: this process's
 * block, split over its ranks. */
void td_ring_owned_range(const td_ring *ring, uint32_t rank, size_t count, size_t *lo, size_t *hi);

/* The global mesh when the context joined several processes
 * (tandem/processes.h): every process's devices, process 0's first.
 * In one process: the mesh's count and the rank itself. */
uint32_t td_ring_global_count(const td_ring *ring);
uint32_t td_ring_global_position(const td_ring *ring, uint32_t rank);
/* The job's processes (1 in one process), and process q's device count
 * and its first global position. */
uint32_t td_ring_process_count(const td_ring *ring);
uint32_t td_ring_process_devices(const td_ring *ring, uint32_t process, uint32_t *first);

/* out (N*count floats) = concatenation over ranks of each rank's `count`
 * floats at in, in rank order. */
td_status td_ring_all_gather(td_ring *ring, uint32_t rank, td_buffer *in, uint64_t in_offset, td_buffer *out,
                             uint64_t out_offset, size_t count);

/* Every rank's (out, out_offset) receives root's `count` floats at (in, in_offset). */
td_status td_ring_broadcast(td_ring *ring, uint32_t rank, uint32_t root, td_buffer *in, uint64_t in_offset,
                            td_buffer *out, uint64_t out_offset, size_t count);

/* Marks the ring failed with `status` and wakes every waiting rank. */
void td_ring_abort(td_ring *ring, td_status status);

/* Clears a failure so the mesh can be used again. Call only while no worker
 * is inside a collective (between mesh jobs). */
void td_ring_reset(td_ring *ring);

/* Nonzero once td_ring_abort was called since the last reset. */
int td_ring_failed(td_ring *ring);

/* data[i] = data[i] / divisor for i < count, as fast as exactness allows:
 * for a power-of-two divisor, multiplying by its reciprocal gives bitwise
 * the same results (both are the correctly rounded x * 2^-k), and a
 * multiply streams far faster than a divide. The mean of pmean and of the
 * trainer's gradients goes through here. */
void td_ring_divide(float *data, size_t count, uint32_t divisor);

/* Nonzero when this ring's all-reduces are direct: every local rank is a
 * CPU device of this process (their memory is this address space's), so each
 * chunk is summed reading every rank's buffer in place, in exactly the
 * ring's order for that chunk -- bitwise the ring's result --, by as many
 * threads as the host pool has (not one per device), and the result is
 * written to every rank's output. Fewer passes over memory, and devices
 * that share a core do not all stream at once. Across processes the
 * direct sums are the hierarchical all-reduce's local part. */
int td_ring_direct(const td_ring *ring);

/* For tests and benches: off makes a direct-capable ring run the ring
 * proper (the same bits); on has no effect on a ring that cannot be
 * direct. Call between jobs. */
void td_ring_set_direct(td_ring *ring, int on);

/* Slice size in floats (the unit of pipelining); for tests and benches. */
size_t td_ring_slice_elements(void);

#endif
