/* The elementwise operations, once, for every backend.
 *
 * This file is read by three preprocessors: C (the CPU reference), OpenCL C
 * (prepended to the program source) and GLSL (glslc, through
 * GL_GOOGLE_include_directive). It holds only a list macro, so each includer
 * expands it into what it needs: an enum and a switch in C, one kernel per
 * op in OpenCL, a switch in GLSL, and the names and arities the backends
 * check arguments with. A new elementwise op is one line here plus its
 * gradient rule in engine/graph/ops_elementwise.c.
 *
 * X(id, NAME, arity, exact, expression)
 *   id          the stable number of the op (td_ew_op), dense from 0
 *   arity       1: the expression reads x only; 2: x and y
 *   exact       1: only + - * and comparisons, so every IEEE device must
 *               match the reference bitwise (the tests demand it); 0: the
 *               expression divides or calls a function, and devices may
 *               differ by their documented ulp bounds
 *   expression  in x, y and alpha (all float), using only operators that
 *               mean the same in the three languages and these functions,
 *               which the includer defines: TD_EXP, TD_LOG, TD_SQRT,
 *               TD_TANH, TD_ERF, TD_ISNAN (single precision).
 *
 * Every product and sum is its own rounding (no fma): C is compiled with
 * -ffp-contract=off, OpenCL with FP_CONTRACT OFF, GLSL results are
 * `precise`.
 *
 * Gradient helpers (..._GRAD) take x = the forward value named in the
 * comment and y = the incoming gradient. */
#ifndef TD_EW_OPS_H
#define TD_EW_OPS_H

/* Constants of the GELU forms: sqrt(2/pi), 1/sqrt(2), 1/sqrt(2 pi). */
#define TD_GELU_C 0.7978845608028654f
#define TD_GELU_A 0.044715f
#define TD_RSQRT2 0.7071067811865476f
#define TD_RSQRT2PI 0.3989422804014327f

#define TD_EW_OPS(X)                                                                                       \
    X(0, SCALE, 1, 1, alpha * x)                                                                              \
    X(1, ADD, 2, 1, x + y)                                                                                    \
    X(2, SUB, 2, 1, x - y)                                                                                    \
    X(3, MUL, 2, 1, x * y)                                                                                    \
    X(4, AXPY, 2, 1, x + alpha * y)                                                                           \
    X(5, RELU, 1, 1, x > 0.0f ? x : (TD_ISNAN(x) ? x : 0.0f))                                                 \
    X(6, RELU_GRAD, 2, 1, x > 0.0f ? y : 0.0f) /* x: relu input */                                            \
    X(7, NEG, 1, 1, -x)                                                                                       \
    X(8, EXP, 1, 0, TD_EXP(x))                                                                                \
    X(9, LOG, 1, 0, TD_LOG(x))                                                                                \
    X(10, SQRT, 1, 0, TD_SQRT(x))                                                                             \
    X(11, TANH, 1, 0, TD_TANH(x))                                                                             \
    X(12, SIGMOID, 1, 0, 1.0f / (1.0f + TD_EXP(-x)))                                                          \
    X(13, SILU, 1, 0, x / (1.0f + TD_EXP(-x)))                                                                \
    X(14, GELU_TANH, 1, 0, 0.5f * x * (1.0f + TD_TANH(TD_GELU_C * (x + TD_GELU_A * x * x * x))))              \
    X(15, GELU_ERF, 1, 0, 0.5f * x * (1.0f + TD_ERF(x * TD_RSQRT2)))                                          \
    X(16, DIV, 2, 0, x / y)                                                                                   \
    /* NaN in either operand propagates, as jnp.maximum / jnp.minimum do */                                \
    X(17, MAXIMUM, 2, 1, (TD_ISNAN(x) || x >= y) ? x : y)                                                     \
    X(18, MINIMUM, 2, 1, (TD_ISNAN(x) || x <= y) ? x : y)                                                     \
    /* 1 where x >= y: routes max/min gradients, ties to the first operand */                              \
    X(19, GE_MASK, 2, 1, x >= y ? 1.0f : 0.0f)                                                                \
    X(20, TANH_GRAD, 2, 1, y * (1.0f - x * x)) /* x: tanh output */                                           \
    X(21, SIGMOID_GRAD, 2, 1, y * (x * (1.0f - x))) /* x: sigmoid output */                                   \
    X(22, SILU_GRAD, 2, 0, y * ((1.0f / (1.0f + TD_EXP(-x))) * (1.0f + x * (1.0f - 1.0f / (1.0f + TD_EXP(-x)))))) \
    X(23, GELU_TANH_GRAD, 2, 0,                                                                               \
      y * (0.5f * (1.0f + TD_TANH(TD_GELU_C * (x + TD_GELU_A * x * x * x))) +                             \
           0.5f * x * (1.0f - TD_TANH(TD_GELU_C * (x + TD_GELU_A * x * x * x)) *                           \
                                  TD_TANH(TD_GELU_C * (x + TD_GELU_A * x * x * x))) *                      \
               TD_GELU_C * (1.0f + 3.0f * TD_GELU_A * x * x)))                                             \
    X(24, GELU_ERF_GRAD, 2, 0,                                                                                \
      y * (0.5f * (1.0f + TD_ERF(x * TD_RSQRT2)) + x * TD_RSQRT2PI * TD_EXP(-0.5f * x * x)))               \
    X(25, SQRT_GRAD, 2, 0, (0.5f * y) / x) /* x: sqrt output */                                               \
    X(26, RSQRT, 1, 0, 1.0f / TD_SQRT(x))                                                                     \
    X(27, SQUARE, 1, 1, x * x)                                                                             \
    X(28, EQUAL, 2, 1, x == y ? 1.0f : 0.0f) /* 1 where equal: accuracy from argmax and labels */

#define TD_EW_OPS_COUNT 29

#endif
