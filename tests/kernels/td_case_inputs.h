/* The inputs of a case: random floats in every buffer, then the family's
 * special values (td_case_inputs_fn) written where a call's argument lives. */
#ifndef TD_CASE_INPUTS_H
#define TD_CASE_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "td_conformance.h"

/* Deterministic floats uniform in [-1, 1) with full 24-bit mantissas, so
 * that a sum added in another order than the contract's shows. */
void td_case_random(float *x, size_t n, uint32_t seed);

/* The host memory of argument `slot` (TD_ROW_*) of call `call`. */
float *td_case_arg(const td_conformance_case *c, float *const *buffers, size_t call, int slot);

/* Elements from that argument's offset to the end of its buffer. */
size_t td_case_arg_room(const td_conformance_case *c, size_t call, int slot);

#endif
