/* What each argument of a call touches (see td_call_extents.h). */
#include "td_call_extents.h"

#include <string.h>

td_arg *td_call_arg(td_kernel_call *call, int slot)
{
    td_arg *args[TD_ROW_SLOTS] = {&call->out, &call->out2, &call->a, &call->b, &call->c};
    return args[slot];
}

uint64_t td_call_offset(const td_kernel_call *call, int slot)
{
    const td_arg *args[TD_ROW_SLOTS] = {&call->out, &call->out2, &call->a, &call->b, &call->c};
    return args[slot]->offset;
}

static void reads(td_arg_extent *e, int64_t elements)
{
    e->used = true;
    e->end = elements;
}

/* A dense output: one run of `elements`. */
static void writes(td_arg_extent *e, int64_t elements)
{
    e->used = true;
    e->written = true;
    e->end = elements;
    e->rows = 1;
    e->row_len = elements;
    e->row_stride = elements;
}

/* One past the furthest element a strided view reaches (strides >= 0);
 * nothing when an axis is empty. */
static int64_t strided_end(const int64_t *dims, const int64_t *strides, int rank)
{
    int64_t end = 1;
    for (int k = 0; k < rank; k++) {
        if (dims[k] == 0)
            return 0;
        end += (dims[k] - 1) * strides[k];
    }
    return end;
}

/* A row-major matrix of rows x cols with leading dimension ld. */
static int64_t matrix_end(int64_t rows, int64_t cols, int64_t ld)
{
    return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}

static void gemm_extents(const td_gemm_params *p, td_arg_extent ext[TD_ROW_SLOTS])
{
    reads(&ext[TD_ROW_A], matrix_end(p->trans_a ? p->k : p->m, p->trans_a ? p->m : p->k, p->lda));
    reads(&ext[TD_ROW_B], matrix_end(p->trans_b ? p->n : p->k, p->trans_b ? p->k : p->n, p->ldb));
    td_arg_extent *c = &ext[TD_ROW_OUT];
    writes(c, matrix_end(p->m, p->n, p->ldc));
    /* Only C's m x n elements are results; the ldc padding between rows
     * must keep its bits. */
    c->rows = p->m;
    c->row_len = p->n;
    c->row_stride = p->ldc;
}

static void reduce_extents(const td_reduce_params *p, td_arg_extent ext[TD_ROW_SLOTS])
{
    int64_t dims[2 * TD_KERNEL_RANK], strides[2 * TD_KERNEL_RANK];
    memcpy(dims, p->out_dims, sizeof p->out_dims);
    memcpy(dims + TD_KERNEL_RANK, p->red_dims, sizeof p->red_dims);
    memcpy(strides, p->out_strides, sizeof p->out_strides);
    memcpy(strides + TD_KERNEL_RANK, p->red_strides, sizeof p->red_strides);
    writes(&ext[TD_ROW_OUT], td_reduce_out_count(p));
    reads(&ext[TD_ROW_A], strided_end(dims, strides, 2 * TD_KERNEL_RANK));
}

/* The row kernels' ranges come from the contract's own checks. */
static void row_kernel_extents(const td_kernel_call *call, td_arg_extent ext[TD_ROW_SLOTS])
{
    int64_t need[TD_ROW_SLOTS] = {0};
    char why[160];
    td_row_kernel_extents(call, need, why, sizeof why);
    writes(&ext[TD_ROW_OUT], need[TD_ROW_OUT]);
    bool uses_a = call->kernel != TD_KERNEL_DROPOUT_MASK;
    bool uses_b = call->kernel == TD_KERNEL_DROPOUT_MASK || call->kernel == TD_KERNEL_GATHER_ROWS ||
                  call->kernel == TD_KERNEL_SCATTER_ADD_ROWS || call->kernel == TD_KERNEL_LAYER_NORM_BACKWARD;
    if (uses_a)
        reads(&ext[TD_ROW_A], need[TD_ROW_A]);
    if (uses_b)
        reads(&ext[TD_ROW_B], need[TD_ROW_B]);
    if (call->kernel == TD_KERNEL_LAYER_NORM)
        writes(&ext[TD_ROW_OUT2], need[TD_ROW_OUT2]);
    if (call->kernel == TD_KERNEL_LAYER_NORM_BACKWARD)
        reads(&ext[TD_ROW_C], need[TD_ROW_C]);
}

bool td_call_extents(const td_kernel_call *call, td_arg_extent ext[TD_ROW_SLOTS])
{
    memset(ext, 0, sizeof(td_arg_extent) * TD_ROW_SLOTS);
    const int64_t rows = call->p.xent.rows, cols = call->p.xent.cols;
    switch (call->kernel) {
    case TD_KERNEL_FILL:
        writes(&ext[TD_ROW_OUT], call->n);
        return true;
    case TD_KERNEL_COPY:
        writes(&ext[TD_ROW_OUT], call->n);
        reads(&ext[TD_ROW_A], call->n);
        return true;
    case TD_KERNEL_ELEMENTWISE:
        writes(&ext[TD_ROW_OUT], td_ew_count(&call->p.ew));
        reads(&ext[TD_ROW_A], strided_end(call->p.ew.dims, call->p.ew.a_strides, TD_KERNEL_RANK));
        if (td_ew_arity(call->p.ew.op) == 2)
            reads(&ext[TD_ROW_B], strided_end(call->p.ew.dims, call->p.ew.b_strides, TD_KERNEL_RANK));
        return true;
    case TD_KERNEL_REDUCE:
        reduce_extents(&call->p.reduce, ext);
        return true;
    case TD_KERNEL_GEMM:
        gemm_extents(&call->p.gemm, ext);
        return true;
    case TD_KERNEL_XENT_FORWARD:
        writes(&ext[TD_ROW_OUT], rows);
        writes(&ext[TD_ROW_OUT2], rows * cols);
        reads(&ext[TD_ROW_A], rows * cols);
        reads(&ext[TD_ROW_B], rows);
        return true;
    case TD_KERNEL_XENT_BACKWARD:
        writes(&ext[TD_ROW_OUT], rows * cols);
        reads(&ext[TD_ROW_A], rows * cols);
        reads(&ext[TD_ROW_B], rows);
        reads(&ext[TD_ROW_C], rows);
        return true;
    case TD_KERNEL_IM2COL:
        writes(&ext[TD_ROW_OUT], td_conv_patch_count(&call->p.conv));
        reads(&ext[TD_ROW_A], td_conv_image_count(&call->p.conv));
        return true;
    case TD_KERNEL_COL2IM:
        writes(&ext[TD_ROW_OUT], td_conv_image_count(&call->p.conv));
        reads(&ext[TD_ROW_A], td_conv_patch_count(&call->p.conv));
        return true;
    case TD_KERNEL_POOL:
        writes(&ext[TD_ROW_OUT], td_conv_pooled_count(&call->p.pool.geo));
        reads(&ext[TD_ROW_A], td_conv_image_count(&call->p.pool.geo));
        return true;
    case TD_KERNEL_POOL_BACKWARD:
        writes(&ext[TD_ROW_OUT], td_conv_image_count(&call->p.pool.geo));
        reads(&ext[TD_ROW_A], td_conv_image_count(&call->p.pool.geo));
        /* y is read for max pooling only. */
        if (call->p.pool.mode == TD_POOL_MAX)
            reads(&ext[TD_ROW_B], td_conv_pooled_count(&call->p.pool.geo));
        reads(&ext[TD_ROW_C], td_conv_pooled_count(&call->p.pool.geo));
        return true;
    default:
        if (!td_is_row_kernel(call->kernel))
            return false;
        row_kernel_extents(call, ext);
        return true;
    }
}
