/* What each argument of a td_kernel_call touches, from td_kernel.h alone:
 * which arguments a kernel uses, how far past its offset each reaches (to
 * size a case's buffers) and which elements each output holds (to compare
 * them with their tolerance while everything else must keep its bits). */
#ifndef TD_CALL_EXTENTS_H
#define TD_CALL_EXTENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "td_kernel_checks.h"

typedef struct td_arg_extent {
    bool used;    /* the kernel reads or writes this argument */
    bool written; /* an output */
    int64_t end;  /* one past the last element touched, counted from the offset */
    /* An output's elements: `rows` runs of row_len, row_stride apart (a
     * GEMM's C with ldc > n; dense outputs are one run). */
    int64_t rows, row_len, row_stride;
} td_arg_extent;

/* Argument `slot` (TD_ROW_*) of a call, and its offset. */
td_arg *td_call_arg(td_kernel_call *call, int slot);
uint64_t td_call_offset(const td_kernel_call *call, int slot);

/* Fills ext[TD_ROW_*]; false for a kernel id td_kernel.h does not list.
 * Only calls the contract accepts are described (the cases are valid). */
bool td_call_extents(const td_kernel_call *call, td_arg_extent ext[TD_ROW_SLOTS]);

#endif
