/* A mesh's insides: its devices, each with the backend that drives it and
 * the worker thread that owns its queue. Shared by engine/ , tests and bench. */
#ifndef TD_MESH_INTERNAL_H
#define TD_MESH_INTERNAL_H

#include <stdbool.h>

#include "td_backend.h"
#include "td_context_internal.h"
#include "tandem/device.h"

typedef struct td_worker td_worker;
typedef struct td_worker_pool td_worker_pool;

/* Faults a spec item asks for after '@' (tandem/device.h): rehearsals of a
 * slow or failing device. Zero / 1.0 means none. */
typedef struct td_device_faults {
    float slow;       /* every segment takes this many times as long (>= 1) */
    uint64_t fail_at; /* the device fails in its fail_at-th program run */
    uint64_t hang_at; /* it stops answering in its hang_at-th run */
} td_device_faults;

typedef struct td_mesh_device {
    const td_backend_ops *ops;
    td_device *dev;
    td_device_info info;
    uint32_t position;
    td_worker *worker;
    td_device_faults faults;
    char item[128]; /* the spec item that named it, for messages */
    uint64_t runs;  /* program runs started; touched by its worker only */
    /* Set once the device failed, or did not finish a job in time: its
     * later program runs fail at once, and an injected hang or slowdown
     * waiting on it wakes up (worker.c). Only ever set, with an atomic
     * store; read atomically, or under the pool's lock by the waits. */
    bool lost;
    /* Its queue was still running tandem's work when a drain gave up
     * (td_mesh_device_drain): a GPU kernel outlasting the timeout cannot be
     * stopped, so nothing it may use -- buffers, segments, staging, the
     * device itself -- is freed while this is set. Touched by whoever
     * drives the device: its worker in a job, else the mesh's caller. */
    bool wedged;
} td_mesh_device;

struct td_mesh {
    td_owned owned;
    td_context *ctx;
    uint32_t count;
    td_mesh_device *devices;
    char spec[256];
    td_worker_pool *pool;
    /* A worker did not stop within the join bound (worker.c): it may still
     * be inside a job, so nothing it may touch -- the mesh, its devices,
     * the collectives, the context -- is ever freed, and the mesh runs
     * nothing more. */
    bool stranded;
    /* The collectives' shared state (engine/parallel's ring), one per mesh
     * so every program on the mesh shares its staging. The parallel layer
     * creates it on first use and leaves its destructor here; core only
     * calls that when the mesh goes, so it never reaches up a layer. */
    void *collectives;
    void (*collectives_destroy)(void *collectives);
    /* Wakes every device waiting inside a collective with `status`: a job
     * past its time stops its waits before stalled devices are fenced. */
    void (*collectives_abort)(void *collectives, td_status status);
    /* Across processes: which devices of the job (global positions, as the
     * job's mesh was) the last re-plan kept, and how many re-plans so far.
     * Whoever ran the agreement (a step, an evaluation) notes it here; the
     * other objects on the mesh catch up from it when they plan again. */
    bool **job_kept;           /* per re-plan, in order: kept[g] of the job as it was */
    uint32_t *job_kept_count;  /* per re-plan: the job's devices then */
    uint32_t job_generation;   /* re-plans so far */
};

/* Whether device `position` was lost (failed, or fenced off after a
 * timeout). */
bool td_mesh_device_lost(td_mesh *mesh, uint32_t position);
/* Submits everything enqueued on the device and waits for all of it,
 * bounded by timeout_ms: the engine's one "submit then wait", for when the
 * host is about to touch memory the device was given or filled. Work
 * that is submitted now and waited for later (the ring's pipelined
 * slices) takes the tickets from the backend itself. Called on the
 * device's worker only, like every backend call. */
td_status td_mesh_device_submit_wait(td_mesh_device *md, uint32_t timeout_ms);
/* The host's view of a device buffer when the device's memory is host
 * memory, else NULL (then copy with the two below). */
float *td_mesh_device_host_view(td_mesh_device *md, td_buffer *buffer);
/* `bytes` at `offset` of the buffer to / from host memory, waited for. */
td_status td_mesh_device_read_wait(td_mesh_device *md, td_buffer *buffer, size_t offset, void *dst, size_t bytes,
                                   uint32_t timeout_ms);
td_status td_mesh_device_write_wait(td_mesh_device *md, td_buffer *buffer, size_t offset, const void *src,
                                    size_t bytes, uint32_t timeout_ms);
/* Removes the lost devices: every object running on the mesh first
 * releases what it holds on the devices (td_owned.before_shrink), then the
 * workers stop, the lost devices close, the survivors are renumbered in
 * their order and get new workers, and the collectives are dropped (made
 * again on use). *dropped = how many went (0: none was lost, nothing
 * changes). TD_ERR_DEVICE_LOST when none would survive; TD_ERR_TIMEOUT
 * when a worker is still inside a job that timed out (it cannot be
 * dropped safely). */
td_status td_mesh_drop_lost(td_mesh *mesh, uint32_t *dropped);

/* Notes the job's kept devices of a re-plan across processes (appended,
 * copied; job_generation counts up). An object that planned for
 * generation k catches up by applying records k, k+1, ... in order. */
td_status td_mesh_note_job_keep(td_mesh *mesh, const bool *kept, uint32_t count);

/* Every object on the mesh lets go of its devices and plans again before
 * its next use, and the collectives are made again (learning the job's
 * processes anew), though no device of this mesh went: what a process
 * does when another process of the job lost devices. */
td_status td_mesh_replan(td_mesh *mesh);

/* The backends compiled in, in listing order (cpu first). */
uint32_t td_runtime_backend_count(void);
const td_backend_ops *td_runtime_backend(uint32_t i);
const td_backend_ops *td_runtime_backend_named(const char *name);
/* Whether tandem knows a backend of that name, built into this library or
 * not, and the list of all it knows ("cpu, opencl, vulkan"), for messages. */
bool td_runtime_backend_known(const char *name);
const char *td_runtime_backend_names(void);

/* One job per device: fn(arg, position) runs on device position's worker
 * thread. td_mesh_run waits for every job (each bounded by the context's
 * timeout) and returns the first failure, or TD_OK. */
typedef td_status (*td_job_fn)(void *arg, uint32_t position);
td_status td_mesh_run(td_mesh *mesh, td_job_fn fn, void *arg);

/* Worker threads: one per device (worker.c). Destroy cancels the devices
 * whose workers are still inside a job and joins every worker, bounded by
 * 2 x the context timeout + 1 s; false when one did not stop in that time
 * (then mesh->stranded: it is left running, and nothing may be freed). */
td_status td_worker_pool_create(td_mesh *mesh);
bool td_worker_pool_destroy(td_mesh *mesh);

/* The calling thread's mesh position when it is a worker, else -1. */
int td_worker_current_position(void);

/* Whether the calling device runs as a fiber on a carrier thread
 * (worker.c): its waits for anything another device does then take turns
 * rather than spin or sleep. */
bool td_worker_on_fiber(void);
/* On a fiber: lets the carrier run its other devices; returns when this
 * device's turn comes again -- after the doorbell rang, or by wake_at_ns
 * (td_platform_now_ns's clock; 0: no time of its own), or within 10 ms.
 * The caller checks again what it waits for, and its deadline. Nothing on
 * a thread. Never while holding a lock another device may take. */
void td_worker_take_turn(uint64_t wake_at_ns);
/* On a fiber: whether the device is the first its carrier runs (each
 * carrier has one such device). */
bool td_worker_first_on_carrier(void);
/* Wakes the mesh's devices taking turns to look again at what they wait
 * for: every event one may wait for rings it (a ring rank's progress, a
 * phase of the direct all-reduce closing, an abort, a fence). Nothing
 * when the mesh runs no fibers. Any thread. */
void td_mesh_ring_doorbell(td_mesh *mesh);

/* Called by a device's worker at the start of each program run: counts
 * the run and applies the item's injected fail / hang; a lost device
 * answers TD_ERR_DEVICE_LOST at once. An injected hang blocks until the
 * mesh fences the device off (its job timed out) or goes away. */
td_status td_mesh_device_begin_run(td_mesh *mesh, uint32_t position);
/* An injected slowdown: after work that took `elapsed_ns`, sleeps
 * (slow - 1) times as long, waking early when the device is fenced off
 * (then TD_ERR_DEVICE_LOST: the run stops there). */
td_status td_mesh_device_slow_down(td_mesh *mesh, uint32_t position, uint64_t elapsed_ns);
/* Submits and waits, bounded by the context timeout, until the device's
 * queue has run everything tandem gave it; called before what the queue
 * may use is freed. TD_ERR_TIMEOUT: it still runs (a kernel outlasting
 * the timeout), and the device is marked wedged -- its memory and the
 * device must then be left allocated. TD_OK, or a failure of the device
 * (its queue runs nothing more), clears the mark. Only from the thread
 * driving the device: its worker inside a job, or the mesh's caller when
 * no worker is in one. */
td_status td_mesh_device_drain(td_mesh *mesh, uint32_t position);
/* Whether any device of the mesh is wedged: host memory its pending copies
 * may read or write (a program's, a trainer's) must then be left too. */
bool td_mesh_any_wedged(const td_mesh *mesh);
/* Waits, bounded by the context timeout, for a job that timed out earlier
 * to end. false: a worker is still inside it, and whatever it may touch
 * (programs, trainers, their memory, the ring) must not be freed or reset. */
bool td_mesh_quiesce(td_mesh *mesh);
/* td_mesh_quiesce, as a status: TD_ERR_TIMEOUT naming the devices still
 * inside the old job. */
td_status td_mesh_wait_quiet(td_mesh *mesh);

#endif
