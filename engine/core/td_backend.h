/* The backend interface: one vtable, many implementations (cpu, opencl, vulkan).
 *
 * A backend knows nothing of graphs or training. It lists its devices, opens
 * them, allocates device buffers and host-pinned staging buffers, copies
 * between them, and runs td_kernel_call lists ("segments") on the device's one
 * in-order queue. Each opened device is driven by exactly one engine worker
 * thread, so a device's functions are never called concurrently for the same
 * td_device; different devices are driven concurrently.
 *
 * Ordering: write/read/copy/segment_run only *enqueue*; they execute in enqueue
 * order. submit() flushes what was enqueued and returns a ticket; wait()
 * blocks until everything up to that ticket is done (or the timeout passes:
 * TD_ERR_TIMEOUT, never a hang). Host memory handed to write/read must stay
 * valid and untouched until a wait covering it returns.
 *
 * Errors: every function that can fail returns a td_status and, on failure,
 * records a message with td_error_set(ctx, ...) naming the driver call and the
 * driver's error name (e.g. "clEnqueueNDRangeKernel: CL_OUT_OF_RESOURCES").
 * After TD_ERR_DEVICE_LOST every later call on the device fails fast. */
#ifndef TD_BACKEND_H
#define TD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/device.h"
#include "td_backend_list.h"
#include "td_kernel.h"

typedef struct td_device td_device;     /* backend-defined, one opened device */
typedef struct td_staging td_staging;   /* backend-defined, host-pinned memory */
typedef struct td_segment td_segment;   /* backend-defined, a compiled call list */

/* What a backend's devices are, asked through td_backend_ops.caps so that
 * the engine never compares a vtable with a particular backend's: a new
 * backend states its nature here and needs no edit in the engine. */
enum {
    /* Devices are simulated on host threads, not hardware: "NAME:N" in a
     * device spec asks for N of them (no probe, no index), and "all" leaves
     * them out, taking one only when no real device exists. */
    TD_BACKEND_SIMULATED = 1u << 0,
    /* Every buffer is plain host memory that buffer_host_pointer returns:
     * the ring reduces in it directly and reserves no staging for it. */
    TD_BACKEND_HOST_BUFFERS = 1u << 1,
};

typedef struct td_backend_ops {
    const char *name; /* "cpu", "opencl", "vulkan" */
    uint32_t caps;    /* TD_BACKEND_* flags */

    /* Discovery. probe() fills *info (available, device_count, reason) and
     * must not fail because a driver is absent: that is info->available =
     * false with the reason. describe() fills one device's info. */
    td_status (*probe)(td_context *ctx, td_backend_info *info);
    td_status (*describe)(td_context *ctx, uint32_t index, td_device_info *info);

    /* Opens device `index`. `instance` counts logical devices opened on the
     * same physical device within one mesh ("vulkan:0x2" opens instance 0
     * and 1); each must get its own queue and memory. */
    td_status (*open)(td_context *ctx, uint32_t index, uint32_t instance, td_device **out);
    void (*close)(td_device *dev);

    /* Device buffers, at least 64-byte aligned. bytes may be 0 (a valid,
     * empty buffer). Contents are undefined after creation. */
    td_status (*buffer_create)(td_device *dev, size_t bytes, td_buffer **out);
    void (*buffer_destroy)(td_device *dev, td_buffer *buf);
    /* Host pointer to a buffer's memory when the device works in host memory
     * (zero-copy: CPU devices, PoCL with unified memory); NULL otherwise. A
     * non-NULL pointer may be read and written between waits. */
    void *(*buffer_host_pointer)(td_device *dev, td_buffer *buf);

    /* Host-pinned staging memory for the ring (OpenCL CL_MEM_ALLOC_HOST_PTR
     * mapped once; Vulkan host-visible cached memory). *host stays valid and
     * mapped until staging_destroy. */
    td_status (*staging_create)(td_device *dev, size_t bytes, td_staging **out, void **host);
    void (*staging_destroy)(td_device *dev, td_staging *staging);

    /* Optional zero-copy access for devices whose memory is host memory but
     * reachable only through a mapping (OpenCL unified-memory devices).
     * map() blocks, bounded by timeout_ms, until the work enqueued before it
     * is done, then returns a host pointer to [offset, offset+bytes); the
     * host may read and write it until unmap(), and the device must not
     * touch that range meanwhile. NULL entries, or TD_ERR_UNSUPPORTED (with
     * no error recorded), mean the ring goes through staging instead. */
    td_status (*map)(td_device *dev, td_buffer *buf, size_t offset, size_t bytes, uint32_t timeout_ms, void **host);
    td_status (*unmap)(td_device *dev, td_buffer *buf, void *host);

    /* Enqueue copies; offsets and sizes in bytes. `host` may be staging memory
     * (fast path) or any host memory. */
    td_status (*write)(td_device *dev, td_buffer *dst, size_t offset, const void *host, size_t bytes);
    td_status (*read)(td_device *dev, td_buffer *src, size_t offset, void *host, size_t bytes);
    td_status (*copy)(td_device *dev, td_buffer *src, size_t src_offset, td_buffer *dst,
                      size_t dst_offset, size_t bytes);

    /* Compiles a list of kernel calls once (build programs/pipelines, bind
     * arguments, record command buffers) so that segment_run re-enqueues it
     * with no allocation. The calls array is copied; buffers must outlive the
     * segment. */
    td_status (*segment_create)(td_device *dev, const td_kernel_call *calls, size_t count,
                                td_segment **out);
    td_status (*segment_run)(td_device *dev, td_segment *segment);
    void (*segment_destroy)(td_device *dev, td_segment *segment);

    td_status (*submit)(td_device *dev, uint64_t *ticket);
    td_status (*wait)(td_device *dev, uint64_t ticket, uint32_t timeout_ms);

    /* Optional: the engine gave up on the device (fenced it off after a
     * timeout, or its mesh is stopping). Called from another thread while
     * the device's worker may be inside segment_run, so it may only set a
     * flag: no blocking, no lock the worker could hold. Afterwards the
     * running segment and every later one stop at their next bounded point
     * and return TD_ERR_DEVICE_LOST (results undefined, no message: the
     * engine already reported the device); copies, reads, writes and waits
     * keep working, so parameter I/O still reaches the device. Needed by a
     * backend that computes on the worker's thread (the CPU's: a worker
     * left inside OpenBLAS would outlive td_context_destroy). NULL for the
     * GPU backends, whose worker only enqueues and waits, every wait
     * bounded by its timeout. */
    void (*cancel)(td_device *dev);
} td_backend_ops;

/* The backends compiled in, one vtable each (td_cpu_backend always): the
 * list is generated from the one in meson.build. */
#define TD_BACKEND_DECLARE(name) extern const td_backend_ops td_##name##_backend;
TD_BACKENDS_BUILT(TD_BACKEND_DECLARE)
#undef TD_BACKEND_DECLARE

#endif
