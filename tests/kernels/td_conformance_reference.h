/* The expected result of a call: the CPU reference (kernels/cpu) run over
 * host copies of a case's buffers. */
#ifndef TD_CONFORMANCE_REFERENCE_H
#define TD_CONFORMANCE_REFERENCE_H

#include <stdbool.h>

#include "td_kernel_checks.h"

/* Runs `call` with its arguments at at[TD_ROW_*] (host pointers, already
 * offset); false for a kernel id the reference does not have. */
bool td_conformance_reference(const td_kernel_call *call, float *const at[TD_ROW_SLOTS]);

#endif
