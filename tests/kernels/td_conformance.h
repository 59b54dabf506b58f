/* The kernel conformance suite: one table of kernel cases, each run on a
 * device and on the CPU reference (kernels/cpu) from the same inputs and
 * compared as td_kernel.h and td_ew_ops.h demand.
 *
 * A case is a short list of td_kernel_calls over a few buffers; each
 * argument is an element offset into one of them, so cases place tensors in
 * shared buffers, at awkward offsets, or alias them where the contract
 * allows. Every element of every buffer is compared after the run: what a
 * call writes within its call's tolerance, everything else bit for bit, so
 * a write outside an output is a failure too.
 *
 * Cases come from families (cases_*.c), one per kernel or pair of
 * kernels, each a table of rows that its function expands (every
 * elementwise op per layout, every transpose per GEMM shape...). A new case
 * is a row. A new kernel is a family file, one line in
 * TD_CONFORMANCE_FAMILIES, and its entries in td_call_extents.c (what its
 * arguments touch) and td_conformance_reference.c; until it has cases,
 * kernel_conformance/every_kernel_and_op_has_cases fails. A backend needs
 * nothing: test_kernel_conformance.c runs every family on every backend
 * the build has. */
#ifndef TD_CONFORMANCE_H
#define TD_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "td_backend.h"
#include "td_kernel_checks.h"

enum { TD_CASE_MAX_CALLS = 4, TD_CASE_MAX_BUFFERS = 6 };

/* How what a call writes must match the reference. Memory that no call of
 * the case writes must keep its bits, whatever the mode. */
typedef enum td_case_compare {
    /* Bit for bit (any NaN matches any NaN: payloads are not part of the
     * contract): exact arithmetic, copies, comparisons, and sums whose
     * order the contract fixes. */
    TD_COMPARE_BITWISE = 0,
    /* The contract of the call's elementwise op (td_test_compare.h):
     * bitwise for exact ops, ulp-level bounds for the others. */
    TD_COMPARE_EW,
    /* exp and log, which devices round within their ulp bounds: each
     * element within 1e-5 relative plus 1e-6 absolute, NaN and the same
     * infinities in the same places. */
    TD_COMPARE_ELEMENTS,
    /* Sums a backend may add in another order (GEMM, REDUCE) or divides:
     * normalised mean squared error below 1e-10 over the call's outputs,
     * NaN and the same infinities in the same places. */
    TD_COMPARE_NMSE,
} td_case_compare;

/* Where an argument lives: which of the case's buffers, at which element. */
typedef struct td_case_at {
    uint8_t buffer;
    uint64_t offset;
} td_case_at;

/* A call's argument places, named as in td_kernel_call. Arguments the
 * kernel does not use are left unbound (NULL buffer), as the engine does. */
typedef struct td_case_args {
    td_case_at out, out2, a, b, c;
} td_case_args;

typedef struct td_conformance_case td_conformance_case;

/* Writes a family's special inputs (labels, ids, NaN, ties...) over the
 * random floats each buffer starts with. */
typedef void (*td_case_inputs_fn)(const td_conformance_case *c, float *const *buffers);

struct td_conformance_case {
    char name[128];
    size_t call_count;
    /* Offsets are set; buffers are bound per device from buffer_of. */
    td_kernel_call calls[TD_CASE_MAX_CALLS];
    uint8_t buffer_of[TD_CASE_MAX_CALLS][TD_ROW_SLOTS];
    td_case_compare compare[TD_CASE_MAX_CALLS];
    size_t buffer_count;
    size_t buffer_elems[TD_CASE_MAX_BUFFERS];
    uint32_t seed;            /* of the random floats, per case */
    td_case_inputs_fn inputs; /* NULL: random floats only */
    const void *row;          /* the family's table row, for inputs */
};

typedef struct td_case_list {
    td_conformance_case *cases;
    size_t count, capacity;
} td_case_list;

/* A new case at the end of the list, named from the format, with no calls
 * yet. Fails the test when memory runs out. */
td_conformance_case *td_case_add(td_case_list *list, const char *name_format, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends a call with its arguments at `at`; the buffers grow to hold what
 * it touches, plus a few elements beyond, where a stray write shows. */
void td_case_call(td_conformance_case *c, td_kernel_call call, td_case_args at, td_case_compare compare);

void td_case_list_free(td_case_list *list);

/* ---- the families ---- */

/* X(arg, family): every family, each defined in cases_<family>.c as
 * `void td_cases_<family>(td_case_list *list)`. */
#define TD_CONFORMANCE_FAMILIES(X, arg) \
    X(arg, fill_copy)                   \
    X(arg, elementwise)                 \
    X(arg, reduce)                      \
    X(arg, gemm)                        \
    X(arg, xent)                        \
    X(arg, conv)                        \
    X(arg, pool)                        \
    X(arg, rows)                        \
    X(arg, cast)                        \
    X(arg, dropout)                     \
    X(arg, gather)                      \
    X(arg, norm)

#define TD_CONFORMANCE_DECLARE_FAMILY(arg, family) void td_cases_##family(td_case_list *list);
TD_CONFORMANCE_FAMILIES(TD_CONFORMANCE_DECLARE_FAMILY, unused)
#undef TD_CONFORMANCE_DECLARE_FAMILY

/* Every family's cases, in the order above. */
void td_cases_all(td_case_list *list);

/* ---- calls every backend must refuse ---- */

/* One call (the last of a short segment) that segment_create must refuse
 * with `status`, its message mentioning each of `mentions`. Every argument
 * is bound to one buffer of buffer_elems elements, except the slots in
 * `unbound` (bits 1 << TD_ROW_*). */
typedef struct td_rejection_case {
    const char *name;
    size_t buffer_elems;
    size_t call_count;
    td_kernel_call calls[2];
    uint32_t unbound;
    td_status status;
    const char *mentions[3];
} td_rejection_case;

/* The rejection table (cases_rejections.c). */
const td_rejection_case *td_rejection_cases(size_t *count);

/* ---- running ---- */

/* An opened device and what failures name it by ("opencl:1 (pthread)"). */
typedef struct td_conformance_device {
    const td_backend_ops *ops;
    td_context *ctx;
    td_device *dev;
    char label[160];
    /* Its results must also be bit for bit those of devices[0] (the same
     * backend run another way: the CPU's every-call-in-parts device). */
    bool bitwise_as_first;
} td_conformance_device;

/* Runs every case (whose name contains TD_CONFORMANCE_FILTER, when that is
 * set) on each device, the reference once per case for all of them, and
 * logs each failure with what differs, so that one run lists every broken
 * case. failures[i] counts device i's; returns the cases run on each.
 * TD_CONFORMANCE_TRACE=1 prints each case's name before it runs, for a
 * case that crashes a driver. */
size_t td_conformance_run(const td_conformance_device *devices, size_t device_count, const td_case_list *cases,
                          size_t *failures);

/* Offers each rejection case to segment_create; returns the failures,
 * each logged. */
size_t td_conformance_run_rejections(const td_conformance_device *d, size_t *ran);

#endif
