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

#include "td_ew_ops.h"

#define TD_KERNEL_RANK 4 /* elementwise and reduce view tensors as rank 4 */

typedef struct td_buffer td_buffer; /* backend-defined device buffer */

typedef struct td_arg {
    td_buffer *buffer;
    uint64_t offset; /* in elements (4 bytes each), not bytes */
} td_arg;

/* Every kernel, once: X(ID, name). The enum (TD_KERNEL_ID), the names
 * (td_kernel_name) and the Vulkan shader table (the SPIR-V of `name`) are
 * made from this list, so a kernel is named in one place.
 *   FILL              out[i] = alpha, i < n
 *   COPY              out[i] = a[i], i < n
 *   ELEMENTWISE       see td_ew_op
 *   REDUCE            strided sum times alpha
 *   GEMM              C = alpha op(A) op(B) + beta C
 *   XENT_FORWARD      softmax cross-entropy, per row
 *   XENT_BACKWARD     its gradient with respect to the logits
 *   IM2COL            NHWC image -> convolution patches (td_conv_params)
 *   COL2IM            its adjoint: patches summed back into the image
 *   POOL              max / average pooling, NHWC (td_pool_params)
 *   POOL_BACKWARD     its gradient with respect to the input
 *   SOFTMAX           softmax / log-softmax per row (td_rows_params)
 *   ARGMAX            index of the first maximum per row, as a float
 *   CAST              u8 or i32 -> f32 (td_cast_params)
 *   DROPOUT_MASK      counter-based keep mask (td_dropout_params)
 *   GATHER_ROWS       out rows = table rows picked by i32 ids
 *   SCATTER_ADD_ROWS  its adjoint: rows summed into the table, in id order
 *   LAYER_NORM        normalise each row, keeping its mean and 1/std (td_rows_params)
 *   LAYER_NORM_BACKWARD  its gradient with respect to the input */
#define TD_KERNELS(X)                   \
    X(FILL, fill)                       \
    X(COPY, copy)                       \
    X(ELEMENTWISE, elementwise)         \
    X(REDUCE, reduce)                   \
    X(GEMM, gemm)                       \
    X(XENT_FORWARD, xent_forward)       \
    X(XENT_BACKWARD, xent_backward)     \
    X(IM2COL, im2col)                   \
    X(COL2IM, col2im)                   \
    X(POOL, pool)                       \
    X(POOL_BACKWARD, pool_backward)     \
    X(SOFTMAX, softmax)                 \
    X(ARGMAX, argmax)                   \
    X(CAST, cast)                       \
    X(DROPOUT_MASK, dropout_mask)       \
    X(GATHER_ROWS, gather_rows)         \
    X(SCATTER_ADD_ROWS, scatter_add_rows) \
    X(LAYER_NORM, layer_norm)           \
    X(LAYER_NORM_BACKWARD, layer_norm_backward)

typedef enum td_kernel_id {
#define TD_KERNEL_ENUM_ENTRY(ID, name) TD_KERNEL_##ID,
    TD_KERNELS(TD_KERNEL_ENUM_ENTRY)
#undef TD_KERNEL_ENUM_ENTRY
    TD_KERNEL_COUNT
} td_kernel_id;

/* ELEMENTWISE: for every out index (i0,i1,i2,i3) < dims,
 *   x = a[a.offset + sum_k i_k * a_strides[k]]
 *   y = b[b.offset + sum_k i_k * b_strides[k]]   (ops of arity 2 only)
 *   out[out.offset + row-major index] = f(x, y)
 * where f is the op's expression in kernels/common/td_ew_ops.h, the one
 * list every backend expands.
 * Strides are in elements; a stride of 0 broadcasts that axis. `out` may
 * alias `a` or `b` exactly (same buffer and offset, dense strides). */
typedef enum td_ew_op {
#define TD_EW_ENUM_ENTRY(id, NAME, arity, exact, expr) TD_EW_##NAME = id,
    TD_EW_OPS(TD_EW_ENUM_ENTRY)
#undef TD_EW_ENUM_ENTRY
    TD_EW_OP_COUNT = TD_EW_OPS_COUNT
} td_ew_op;

/* From the same list: 1 or 2 for a known op, 0 otherwise; whether the op
 * must match the reference bitwise; and its name ("GELU_TANH"), "unknown"
 * otherwise. */
int td_ew_arity(int32_t op);
int td_ew_exact(int32_t op);
const char *td_ew_name(int32_t op);

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
 * does not propagate).
 *
 * precision (td_gemm_precision; 0, the default, is fp32): with
 * TD_GEMM_BF16 each element of opA and opB is first rounded to bfloat16
 * (the upper 16 bits of a float, round to nearest, ties to even; a NaN
 * stays a NaN, a finite value past bfloat16's range becomes infinity) and
 * the products of those rounded values are summed in float; A, B and C
 * stay float32 in memory, and alpha, beta and C are applied as in fp32.
 * The product of two bfloat16 values is exact in float, so a bf16 result
 * differs from the reference (td_bf16_round, then the fp32 GEMM) only by
 * the order of the float sums, as an fp32 GEMM's does; and by hardware
 * bfloat16 dot products that flush subnormal inputs and results to zero
 * (x86's VDPBF16PS). The conformance suite holds every backend to the
 * reference within the fp32 GEMM's bound (normalised MSE 1e-10). */
typedef enum td_gemm_precision {
    TD_GEMM_FP32 = 0,
    TD_GEMM_BF16 = 1,
} td_gemm_precision;

typedef struct td_gemm_params {
    int32_t trans_a, trans_b;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    float alpha, beta;
    int32_t precision; /* td_gemm_precision */
} td_gemm_params;

/* x rounded to bfloat16 and widened back to float: round to nearest, ties
 * to even, on the bits (so it does not depend on the FPU's rounding mode or
 * its treatment of subnormals); NaN stays NaN (quietened), a finite x that
 * rounds past bfloat16's largest value becomes infinity, as IEEE rounding
 * does. The rounding every backend's bf16 GEMM applies to its inputs. */
static inline float td_bf16_round(float x)
{
    union {
        float f;
        uint32_t u;
    } v = {x};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        v.u |= 0x00400000u; /* NaN: quiet it, so truncating keeps it NaN */
    else
        v.u += 0x7fffu + ((v.u >> 16) & 1u);
    v.u &= 0xffff0000u;
    return v.f;
}

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

/* ---- convolution and pooling (NHWC images, row-major) ----
 *
 * The geometry both share: an input image [n, h, w, c]; a window of kh x kw
 * taps, tap (i, j) of output pixel (oy, ox) reading input pixel
 *   iy = oy * stride_h - pad_top + i * dil_h,  ix = ox * stride_w - pad_left + j * dil_w
 * (outside 0 <= iy < h, 0 <= ix < w it is padding); the output is
 * [n, oh, ow, c_out]. Padding on the bottom/right is implied by oh/ow. */
typedef struct td_conv_params {
    int64_t n, h, w, c;     /* input image */
    int64_t kh, kw;         /* window */
    int64_t oh, ow;         /* output spatial size */
    int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
} td_conv_params;

/* IM2COL: a = image [n, h, w, c]; out = patches [n*oh*ow, kh*kw*c]:
 *   out[((b*oh + oy)*ow + ox) * (kh*kw*c) + (i*kw + j)*c + ch]
 *     = a[((b*h + iy)*w + ix)*c + ch], or 0 for padding.
 * With an HWIO kernel reshaped to [kh*kw*c, c_out], patches x kernel is the
 * NHWC convolution output (flax's layout).
 * COL2IM: a = patches [n*oh*ow, kh*kw*c]; out = image [n, h, w, c], every
 * element written: out[b, iy, ix, ch] = the sum of the patch entries that
 * IM2COL copied from (b, iy, ix, ch), added in increasing (oy, ox, i, j)
 * order starting from 0.0f — a fixed order, so results are reproducible;
 * pixels no tap reads get 0. (GPU backends may add in another order; the
 * tests bound the difference.) */

/* POOL: a = x [n, h, w, c], out = [n, oh, ow, c] (the geometry above with
 * c_out = c, no dilation: dil_h = dil_w = 1).
 *   max: the maximum over the window's taps that are inside the image,
 *        scanned in (i, j) order: m = first tap, then m = v when v > m or v
 *        is NaN (a NaN is kept). A window with no tap inside gives -inf.
 *   avg: the sum over taps inside the image, in (i, j) order from 0.0f,
 *        divided by kh*kw when count_include_pad, else by the number of taps
 *        inside (flax's avg_pool counts the padding: count_include_pad = 1).
 * POOL_BACKWARD: a = x, b = y (POOL's output; read for max only),
 *   c = gy [n, oh, ow, c]; out = gx [n, h, w, c], every element written:
 *   gx[p] = sum over windows W containing tap p, in increasing (oy, ox)
 *   order from 0.0f, of
 *     max: gy[W] if p is W's first tap (in (i, j) order, inside the image)
 *          whose value equals y[W] (or is NaN when y[W] is NaN), else 0 —
 *          the gradient goes to the first maximum of each window;
 *     avg: gy[W] / (the divisor POOL used for W). */
typedef enum td_pool_mode { TD_POOL_MAX = 0, TD_POOL_AVG = 1 } td_pool_mode;

typedef struct td_pool_params {
    td_conv_params geo;
    int32_t mode; /* td_pool_mode */
    int32_t count_include_pad;
} td_pool_params;

/* ---- row kernels: a [rows, cols] row-major ----
 * SOFTMAX: out [rows, cols]; per row m = max (as XENT_FORWARD: a NaN
 *   propagates), e[c] = exp(a[c] - m), s = sum of e in column order from
 *   0.0f;  mode 0 (softmax): out[c] = e[c] * (1.0f / s);
 *          mode 1 (log-softmax): out[c] = (a[c] - m) - log(s).
 *   With TD_ROWS_CAUSAL added to the mode, row r sees only its first
 *   (r mod cols) + 1 columns (rows are square blocks of attention scores,
 *   query position r mod cols): m and s run over those columns only, in
 *   the same order, and every later column gets 0 (softmax) or -inf
 *   (log-softmax), whatever a holds there.
 * ARGMAX: out [rows] (f32): the column index of the first maximum (a > m
 *   replaces; the first NaN wins over everything), as a float — exact for
 *   cols <= 2^24. */
enum { TD_ROWS_CAUSAL = 2 };

/* LAYER_NORM: a = x [rows, cols]; out = xhat [rows, cols], out2 = stats
 *   [rows, 2]. Per row, in column order from 0.0f:
 *     s = sum x[c];  mean = s / cols;  v = sum (x[c] - mean)^2 (the
 *     difference rounded, then squared);  rstd = 1 / sqrt(v / cols + epsilon);
 *     xhat[c] = (x[c] - mean) * rstd;  stats = {mean, rstd}.
 * LAYER_NORM_BACKWARD: a = g (the gradient with respect to xhat) [rows,
 *   cols], b = xhat, c = stats; out = dx [rows, cols]. Per row, in column
 *   order from 0.0f: sg = sum g[c], sgx = sum g[c] * xhat[c];
 *     dx[c] = rstd * ((g[c] - sg / cols) - xhat[c] * (sgx / cols)).
 * (sqrt and division may differ by their ulp bounds on other devices.) */
typedef struct td_rows_params {
    int64_t rows, cols;
    int32_t mode;  /* SOFTMAX: 0 softmax, 1 log-softmax, plus TD_ROWS_CAUSAL */
    float epsilon; /* LAYER_NORM: > 0 */
} td_rows_params;

/* CAST: out[i] = (float) value i of a, i < n, where a holds `from`:
 *   TD_CAST_U8:  bytes; value i is byte (a.offset * 4 + i) of a's buffer
 *                (u8 tensors are packed 4 per element slot);
 *   TD_CAST_I32: int32 words; value i is word a.offset + i, rounded to
 *                nearest float. */
typedef enum td_cast_from { TD_CAST_U8 = 0, TD_CAST_I32 = 1 } td_cast_from;

typedef struct td_cast_params {
    int64_t n;
    int32_t from; /* td_cast_from */
} td_cast_params;

/* DROPOUT_MASK: out [rows, cols], one row per example. b points at two
 * uint32 words written by the engine before each run (so recorded command
 * buffers need not change): b[0] = step, b[1] = global index of row 0's
 * example. For row r, column j, with example e = b[1] + r:
 *   word = Philox4x32-10(counter = {j / 4, e, b[0], 0x64726f70 ("drop")},
 *                        key = {seed_lo, seed_hi})[j % 4]
 *   out[r*cols + j] = word < keep_threshold ? scale : 0.0f
 * (engine/core/td_random.h is the host version; the mask of an example is
 * thus the same on every mesh). keep_threshold = keep_prob * 2^32 rounded
 * down, scale = 1 / keep_prob, 0 < keep_prob < 1. */
typedef struct td_dropout_params {
    int64_t rows, cols;
    uint32_t seed_lo, seed_hi;
    uint32_t keep_threshold;
    float scale;
} td_dropout_params;

/* GATHER_ROWS: a = table [vocab, dim], b = ids (int32) [n];
 *   out[i, :] = a[ids[i], :], and a row of NaN when ids[i] is outside
 *   [0, vocab) (never an out-of-bounds read).
 * SCATTER_ADD_ROWS: a = g [n, dim], b = ids [n]; out = [vocab, dim], every
 *   element written: out[v, :] = sum over i with ids[i] == v, in increasing
 *   i from 0.0f, of g[i, :]; ids outside [0, vocab) are ignored. */
typedef struct td_gather_params {
    int64_t n, vocab, dim;
} td_gather_params;

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
        td_conv_params conv;   /* IM2COL, COL2IM */
        td_pool_params pool;   /* POOL, POOL_BACKWARD */
        td_rows_params rows;   /* SOFTMAX, ARGMAX, LAYER_NORM(_BACKWARD) */
        td_cast_params cast;
        td_dropout_params dropout;
        td_gather_params gather; /* GATHER_ROWS, SCATTER_ADD_ROWS */
    } p;
} td_kernel_call;

/* For GEMM the arguments are a = A, b = B, out = C. */

/* Name of a kernel id ("gemm", ...), for messages and traces. */
const char *td_kernel_name(int32_t kernel);

#endif
