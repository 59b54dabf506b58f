/* The one header through which the benches reach below the public API.
 *
 * Measuring a device, a kernel or the ring needs what no application
 * should: a mesh's devices with their backend vtables and jobs on their
 * worker threads (td_mesh_internal.h, td_backend.h), the ring collectives
 * (td_ring.h) and the CPU reference kernels (td_reference.h). A bench
 * includes this, the public headers and td_bench_time.h, and nothing else
 * of the engine; bench/meson.build gives it only the include paths these
 * need, so an engine header outside this list does not compile there. */
#ifndef TD_BENCH_SUPPORT_H
#define TD_BENCH_SUPPORT_H

#include "tandem/tandem.h"
#include "td_backend.h"
#include "td_mesh_internal.h"
#include "td_reference.h"
#include "td_ring.h"

#endif
