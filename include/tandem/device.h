/* tandem — devices and meshes.
 *
 * A mesh is an ordered set of devices, possibly from several backends, built
 * from a spec string:
 *
 *   spec     := item ("," item)*
 *   item     := ("all" | backend [":" selector]) ["@" fault (";" fault)*]
 *   backend  := "cpu" | "opencl" | "vulkan"
 *   selector := index ["x" count] | "*"
 *   fault    := "slow=" factor | "fail=" run | "hang=" run
 *
 * "cpu:N" makes N simulated CPU devices (host threads; any N, more than the
 * cores included). For the other backends "opencl:I" is device I in the
 * backend's stable order (platforms in loader order, devices in platform
 * order), "opencl:*" is every device of the backend, and "vulkan:0x2" is two
 * logical tandem devices on physical device 0 (each with its own queue and
 * memory). "all" is every OpenCL and Vulkan device found, or one CPU device
 * when there are none. Mesh position i is the device's axis index in pmap.
 *
 * Faults, injected to rehearse a mixed or failing cluster on a laptop (for
 * tests and demos; they apply to every device of their item, on any
 * backend, though simulated CPU devices are what they are meant for):
 *   slow=F  (1 <= F <= 1000) every kernel segment of the device takes F
 *           times as long: the engine waits for it and then sleeps F - 1
 *           times its duration. "cpu:3,cpu:1@slow=3" is four devices, the
 *           last three times slower.
 *   fail=N  (N >= 1) the device fails at the start of its Nth program run
 *           (each trainer step, evaluation batch or td_program_run is one
 *           run, counted from 1): that run returns TD_ERR_DEVICE_LOST and
 *           the device stays lost.
 *   hang=N  the device stops answering in its Nth run: the run times out
 *           (tandem/context.h, timeout_ms) and the device is fenced off as
 *           lost.
 * Options are separated by ';' ("cpu:1@slow=2;fail=50"). A bad option is
 * TD_ERR_INVALID_ARGUMENT naming it. */
#ifndef TANDEM_DEVICE_H
#define TANDEM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 0.1. */
typedef struct td_mesh td_mesh;

#define TD_NAME_MAX 128

/* What tandem knows of one device. Sizes are bytes; 0 means unknown.
 * Since 0.1. */
typedef struct td_device_info {
    size_t struct_size; /* sizeof(td_device_info): growth-safe, see tandem/export.h */
    char backend[16];            /* "cpu", "opencl", "vulkan" */
    uint32_t index;              /* index within the backend */
    char name[TD_NAME_MAX];
    char vendor[TD_NAME_MAX];
    char driver_version[TD_NAME_MAX];
    char language_version[TD_NAME_MAX]; /* OpenCL C version, Vulkan API version, ... */
    uint32_t compute_units;
    uint64_t global_memory;
    uint64_t max_allocation;
    uint64_t max_buffer_range;   /* largest range one kernel argument may view */
    uint32_t max_workgroup_size;
    uint32_t subgroup_size;
    bool unified_memory;         /* device memory is host memory (zero-copy) */
} td_device_info;

/* What tandem knows of one backend compiled into the library.
 * Since 0.1. */
typedef struct td_backend_info {
    size_t struct_size; /* sizeof(td_backend_info): growth-safe, see tandem/export.h */
    char name[16];
    bool available;              /* a driver answered and listed >= 1 device */
    uint32_t device_count;
    char reason[256];            /* why unavailable; "" when available */
    /* The run-time libraries the backend opened, e.g. "libOpenCL.so.1,
     * libclblast.so.1" (GPU backends load them when first probed, never at
     * link time); "" when it found none (see reason). The cpu backend,
     * which opens none, names the GEMM engine its devices run there:
     * "GEMM own-fma (avx512)", "GEMM cblas", "GEMM own (deterministic
     * mode)" (since 0.2; "" before). */
    char runtime[256];
} td_backend_info;

/* Zeroes *info and sets its struct_size, ready for td_backend_query.
 * Since 0.1. */
TD_API td_status td_backend_info_init(td_backend_info *info);

/* Zeroes *info and sets its struct_size, ready for td_device_query and
 * td_mesh_device_info.
 * Since 0.1. */
TD_API td_status td_device_info_init(td_device_info *info);

/* Number of backends compiled into this build (cpu is always one).
 * Since 0.1. */
TD_API td_status td_backend_count(td_context *ctx, uint32_t *count);

/* Probes backend `i` (0 <= i < count) and reports whether it has devices and,
 * if not, why. Never fails because a driver is missing: that is reported in
 * info->reason.
 * Since 0.1. */
TD_API td_status td_backend_query(td_context *ctx, uint32_t i, td_backend_info *info);

/* Describes device `device` of backend `backend` ("opencl", ...).
 * Since 0.1. */
TD_API td_status td_device_query(td_context *ctx, const char *backend, uint32_t device,
                                 td_device_info *info);

/* Opens the devices a spec names (grammar above), each with its own worker
 * thread. Errors: TD_ERR_UNKNOWN_DEVICE for a spec that names no backend or a
 * device index that does not exist, TD_ERR_NO_DEVICE for a spec selecting
 * zero devices (e.g. "cpu:0"), TD_ERR_BACKEND_UNAVAILABLE for a backend not
 * built in or without a driver.
 * Since 0.1. */
TD_API td_status td_mesh_create(td_context *ctx, const char *spec, td_mesh **out);

/* Stops the mesh's workers and releases its devices. NULL is ignored. The
 * programs, trainers and evaluators compiled for the mesh are released with
 * it: their handles then accept only their destroy (other calls answer
 * TD_ERR_STATE), so destroying them before or after the mesh is safe.
 * Since 0.1. */
TD_API void td_mesh_destroy(td_mesh *mesh);

/* Number of devices in the mesh (its axis size).
 * Since 0.1. */
TD_API td_status td_mesh_size(const td_mesh *mesh, uint32_t *size);

/* Describes the device at mesh position `position`.
 * Since 0.1. */
TD_API td_status td_mesh_device_info(const td_mesh *mesh, uint32_t position, td_device_info *info);

#ifdef __cplusplus
}
#endif
#endif
