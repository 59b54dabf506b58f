/* The kernel calls every backend executes.
 *
 * The engine lowers a graph to a flat list of these calls; a backend runs them
 * on its own queue. The set is deliberately small: strided elementwise with
 * broadcasting, strided reduction, GEMM, softmax cross-entropy, fill and copy
 * cover every op of the graph and its gradient.
 *
 * Every tensor argument is a (buffer, element offset) pair: tensors are packed
 * into larger buffers (the gradient bucket, for one), and an element offset
 * avoids the alignment rules of OpenCL sub-buffers and Vulkan descriptor
 * offsets. All data is row-major float32 except the labels of XENT (int32).
 *
 * The semantics below are normative; kernels/cpu/td_reference.c is the one
 * reference implementation every backend is tested against. Backends must not
 * contract a*b+c into fma where the reference does two roundings (OpenCL:
 * `#pragma OPENCL FP_CONTRACT OFF`; GLSL: `precise`), so that elementwise
 * results match the reference bitwise on IEEE-conforming devices. */
#ifndef TD_KERNEL_H
#define TD_KERNEL_H

#include <stdint.h>

#define TD_KERNEL_RANK 4 /* elementwise and reduce view tensors as rank 4 */

typedef struct td_buffer td_buffer; /* backend-defined device buffer */

typedef struct td_arg {
    td_buffer *buffer;
    uint64_t offset; /* in elements (4 bytes each), not bytes */
} td_arg;

typedef enum td_kernel_id {
    TD_KERNEL_FILL = 0,        /* out[i] = alpha, i < n */
    TD_KERNEL_COPY,            /* out[i] = a[i], i < n */
    TD_KERNEL_ELEMENTWISE,     /* see td_ew_op */
    TD_KERNEL_REDUCE,          /* strided sum times alpha */
    TD_KERNEL_GEMM,            /* C = alpha op(A) op(B) + beta C */
    TD_KERNEL_XENT_FORWARD,    /* softmax cross-entropy, per row */
    TD_KERNEL_XENT_BACKWARD,   /* its gradient with respect to the logits */
    TD_KERNEL_COUNT
} td_kernel_id;

/* ELEMENTWISE: for every out index (i0,i1,i2,i3) < dims,
 *   x = a[a.offset + sum_k i_k * a_strides[k]]
 *   y = b[b.offset + sum_k i_k * b_strides[k]]   (binary ops only)
 *   out[out.offset + row-major index] = f(x, y)
 * Strides are in elements; a stride of 0 broadcasts that axis. `out` may
 * alias `a` or `b` exactly (same buffer and offset, dense strides). */
typedef enum td_ew_op {
    TD_EW_SCALE = 0,   /* alpha * x */
    TD_EW_ADD,         /* x + y */
    TD_EW_SUB,         /* x - y */
    TD_EW_MUL,         /* x * y */
    TD_EW_AXPY,        /* x + alpha * y   (two roundings, no fma) */
    TD_EW_RELU,        /* x > 0 ? x : 0   (NaN stays NaN: written as x > 0 ? x : (x != x ? x : 0)) */
    TD_EW_RELU_GRAD,   /* x > 0 ? y : 0   (x is the forward input, y the incoming gradient) */
    TD_EW_OP_COUNT
} td_ew_op;

typedef struct td_ew_params {
    int32_t op; /* td_ew_op */
    float alpha;
    int64_t dims[TD_KERNEL_RANK];
    int64_t a_strides[TD_KERNEL_RANK];
    int64_t b_strides[TD_KERNEL_RANK];
} td_ew_params;

/* REDUCE: out has prod(out_dims) elements, row-major. For each out index o
 * (o0..o3) the sum runs over every r (r0..r3) < red_dims in row-major order,
 * starting from 0.0f and adding one term at a time in that order:
 *   out[o] = alpha * sum_r a[a.offset + sum_k o_k*out_strides[k] + r_k*red_strides[k]]
 * out_strides/red_strides are strides into `a`. (GPU backends may use another
 * summation order; the tests bound the difference.) */
typedef struct td_reduce_params {
    float alpha;
    int64_t out_dims[TD_KERNEL_RANK];
    int64_t out_strides[TD_KERNEL_RANK];
    int64_t red_dims[TD_KERNEL_RANK];
    int64_t red_strides[TD_KERNEL_RANK];
} td_reduce_params;

/* GEMM, row-major: C[m,n] = alpha * sum_k opA[m,k] * opB[k,n] + beta * C[m,n],
 * opA = trans_a ? A^T : A with A stored M x K (or K x M when transposed) with
 * leading dimension lda; likewise B. beta == 0 means C is not read (NaN in C
 * does not propagate). */
typedef struct td_gemm_params {
    int32_t trans_a, trans_b;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    float alpha, beta;
} td_gemm_params;

/* XENT_FORWARD: logits a [rows x cols], labels b (int32) [rows].
 *   prob[r,c] = exp(a[r,c] - max_c a[r,:]) / sum_c exp(...)
 *   loss[r]   = log(sum_c exp(a[r,c] - max)) - (a[r,label] - max)
 * out = loss [rows], out2 = prob [rows x cols]. A label outside [0, cols)
 * gives loss NaN for that row (the engine validates labels before upload). */
/* XENT_BACKWARD: prob a [rows x cols], labels b [rows], incoming gradient
 * c [rows]:  out[r,col] = c[r] * (prob[r,col] - (col == label[r] ? 1 : 0)). */
typedef struct td_xent_params {
    int64_t rows, cols;
} td_xent_params;

typedef struct td_kernel_call {
    int32_t kernel; /* td_kernel_id */
    int64_t n;      /* FILL/COPY element count; others derive sizes from params */
    float alpha;    /* FILL value */
    td_arg out, out2, a, b, c;
    union {
        td_ew_params ew;
        td_reduce_params reduce;
        td_gemm_params gemm;
        td_xent_params xent;
    } p;
} td_kernel_call;

/* For GEMM the arguments are a = A, b = B, out = C. */

/* Name of a kernel id ("gemm", ...), for messages and traces. */
const char *td_kernel_name(int32_t kernel);

#endif
