/* Calls the contract refuses (td_kernel_checks.h): an argument past its
 * buffer's end, a missing buffer, a bad mode, source type or geometry, an
 * unknown kernel. Every backend refuses them at segment_create, with a
 * message naming the kernel and the call's index, and creates nothing.
 * (Limits of one backend, such as 32-bit shader indices, are that
 * backend's own tests.) */
#include "td_conformance.h"

#define BAD TD_ERR_INVALID_ARGUMENT
#define NO_A (1u << TD_ROW_A)

/* A fill before the bad call, so that the message must say "call 1". */
#define AFTER_A_FILL {.kernel = TD_KERNEL_FILL, .n = 1}

/* A 4x4x2 image, 3x3 windows, SAME padding: patches 288 elements, image
 * and pooled output 32. (Macros: C wants constants in static tables.) */
#define GEOMETRY(stride_w_, dil_h_)                                                                              \
    {.n = 1, .h = 4, .w = 4, .c = 2, .kh = 3, .kw = 3, .oh = 4, .ow = 4, .stride_h = 1, .stride_w = (stride_w_), \
     .pad_top = 1, .pad_left = 1, .dil_h = (dil_h_), .dil_w = 1}
#define CONV GEOMETRY(1, 1)
#define MAX_POOL(stride_w_, dil_h_) {.geo = GEOMETRY(stride_w_, dil_h_), .mode = TD_POOL_MAX}

static const td_rejection_case rejections[] = {
    /* Sizes and offsets past the buffer. */
    {"fill one element past the end", 16, 1, {{.kernel = TD_KERNEL_FILL, .n = 17}}, 0, BAD, {"fill", "call 0"}},
    {"fill from an offset to one past the end", 16, 1, {{.kernel = TD_KERNEL_FILL, .n = 16, .out = {NULL, 1}}}, 0,
     BAD, {"fill", "call 0"}},
    {"fill of 101 in 100", 100, 1, {{.kernel = TD_KERNEL_FILL, .n = 101}}, 0, BAD, {"fill", "call 0"}},
    {"copy with no source buffer", 100, 1, {{.kernel = TD_KERNEL_COPY, .n = 10}}, NO_A, BAD, {"copy", "call 0"}},
    {"an unknown kernel id", 100, 1, {{.kernel = 99}}, 0, BAD, {"call 0"}},
    /* The row kernels, each with one argument past the end, then bad parameters. */
    {"softmax out past the end", 100, 1,
     {{.kernel = TD_KERNEL_SOFTMAX, .out = {NULL, 95}, .p.rows = {2, 5, 0, 0.0f}}}, 0, BAD, {"softmax", "call 0"}},
    {"argmax input past the end", 100, 1,
     {{.kernel = TD_KERNEL_ARGMAX, .a = {NULL, 95}, .p.rows = {2, 5, 0, 0.0f}}}, 0, BAD, {"argmax", "call 0"}},
    {"cast of 9 bytes from 3 words", 100, 1,
     {{.kernel = TD_KERNEL_CAST, .a = {NULL, 98}, .p.cast = {9, TD_CAST_U8}}}, 0, BAD, {"cast", "call 0"}},
    {"dropout mask step words past the end", 100, 1,
     {{.kernel = TD_KERNEL_DROPOUT_MASK, .b = {NULL, 99}, .p.dropout = {1, 4, 0, 0, 1u << 31, 2.0f}}}, 0, BAD,
     {"dropout_mask", "call 0"}},
    {"gather table past the end", 100, 1,
     {{.kernel = TD_KERNEL_GATHER_ROWS, .a = {NULL, 95}, .p.gather = {2, 3, 2}}}, 0, BAD,
     {"gather_rows", "call 0"}},
    {"scatter-add ids past the end", 100, 1,
     {{.kernel = TD_KERNEL_SCATTER_ADD_ROWS, .b = {NULL, 101}, .p.gather = {2, 3, 2}}}, 0, BAD,
     {"scatter_add_rows", "call 0"}},
    {"softmax mode 4", 100, 1, {{.kernel = TD_KERNEL_SOFTMAX, .p.rows = {2, 5, 4, 0.0f}}}, 0, BAD, {"softmax", "call 0"}},
    {"cast from type 9", 100, 1, {{.kernel = TD_KERNEL_CAST, .p.cast = {4, 9}}}, 0, BAD, {"cast", "call 0"}},
    /* Convolution and pooling. */
    {"im2col patches past the end", 1000, 2,
     {AFTER_A_FILL, {.kernel = TD_KERNEL_IM2COL, .out = {NULL, 800}, .p.conv = CONV}}, 0, BAD, {"im2col", "call 1"}},
    {"col2im patches past the end", 1000, 2,
     {AFTER_A_FILL, {.kernel = TD_KERNEL_COL2IM, .a = {NULL, 713}, .p.conv = CONV}}, 0, BAD, {"col2im", "call 1"}},
    {"pool input past the end", 1000, 2,
     {AFTER_A_FILL, {.kernel = TD_KERNEL_POOL, .a = {NULL, 969}, .p.pool = MAX_POOL(1, 1)}}, 0, BAD,
     {"pool", "call 1"}},
    {"pool_backward gradient past the end", 1000, 2,
     {AFTER_A_FILL, {.kernel = TD_KERNEL_POOL_BACKWARD, .c = {NULL, 980}, .p.pool = MAX_POOL(1, 1)}}, 0, BAD,
     {"pool_backward", "call 1"}},
    {"pool with stride 0", 1000, 1, {{.kernel = TD_KERNEL_POOL, .p.pool = MAX_POOL(0, 1)}}, 0, BAD,
     {"pool", "call 0"}},
    {"pool with dilation 2", 1000, 1, {{.kernel = TD_KERNEL_POOL, .p.pool = MAX_POOL(1, 2)}}, 0, BAD,
     {"pool", "call 0"}},
    /* GEMM's precision: fp32 (0) or bf16 (1), nothing else. */
    {"gemm with precision 7", 100, 2,
     {AFTER_A_FILL, {.kernel = TD_KERNEL_GEMM, .p.gemm = {.m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2,
                                                         .alpha = 1.0f, .precision = 7}}},
     0, BAD, {"gemm", "call 1", "precision 7"}},
};

const td_rejection_case *td_rejection_cases(size_t *count)
{
    *count = sizeof rejections / sizeof rejections[0];
    return rejections;
}
