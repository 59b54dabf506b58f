/* POOL and POOL_BACKWARD, max and both averages, with ties (every 7th
 * input is 0.75), a NaN, a -inf and windows wholly in padding. Max pooling
 * and its gradient compare and add in the contract's order: bitwise.
 * Averages divide, which devices may round within an ulp or two:
 * normalised MSE. */
#include "td_conformance.h"

#include <math.h>

#include "td_case_inputs.h"
#include "td_conv_geometry.h"
#include "td_reference.h"

static const struct pool_row {
    const char *what;
    td_geometry_row g; /* n h w c, kh kw, strides, padding t/b/l/r, dilations */
} rows[] = {
    {"3x2 window, strides 2x3, asymmetric padding", {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 1, 1, 1, 1}},
    {"2x2 stride 2", {1, 8, 8, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1}},
    {"3x3 SAME", {2, 4, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}},
    {"windows wholly in padding", {1, 3, 4, 2, 2, 2, 1, 2, 3, 3, 2, 3, 1, 1}},
    {"the window is the image", {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1}},
    {"3x3 stride 2 padding 1", {1, 5, 6, 2, 3, 3, 2, 2, 1, 1, 1, 0, 1, 1}},
    /* The CPU reference's vector blocks of 16 channels, and its one-pass
     * gradient where the windows tile the image. */
    {"2x2 stride 2 over 32 channels (the seed's pooling)", {2, 6, 8, 32, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1}},
    {"3x3 stride 2 padding 1 over 19 channels (a block and a tail)", {1, 7, 6, 19, 3, 3, 2, 2, 1, 1, 1, 0, 1, 1}},
    /* Other windows that tile the image over whole vectors of channels:
     * the CPU reference's AVX-512 path for them (td_reference_pool_tiled.c). */
    {"3x3 stride 3 tiling 9x6 over 16 channels", {2, 9, 6, 16, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1}},
    {"1x2 stride 1x2 over 48 channels", {1, 4, 6, 48, 1, 2, 1, 2, 0, 0, 0, 0, 1, 1}},
};

static const struct pool_mode {
    const char *name;
    int32_t mode, count_include_pad;
} modes[] = {
    {"max", TD_POOL_MAX, 0},
    {"avg", TD_POOL_AVG, 0},
    {"avg counting padding", TD_POOL_AVG, 1},
};

/* x is call 0's a in every case. A lone POOL_BACKWARD gets the y that
 * POOL gives for x, as the forward pass would have left it. */
static void pool_inputs(const td_conformance_case *c, float *const *buffers)
{
    const td_pool_params *p = &c->calls[0].p.pool;
    float *x = td_case_arg(c, buffers, 0, TD_ROW_A);
    int64_t pixels = td_conv_image_count(&p->geo);
    for (int64_t i = 0; i < pixels; i += 7)
        x[i] = 0.75f;
    x[4] = NAN;
    x[5] = -INFINITY;
    if (c->calls[0].kernel == TD_KERNEL_POOL_BACKWARD && p->mode == TD_POOL_MAX)
        td_reference_pool(td_case_arg(c, buffers, 0, TD_ROW_B), x, p);
}

void td_cases_pool(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            td_pool_params p = {.geo = td_geometry(&rows[i].g), .mode = modes[m].mode,
                                .count_include_pad = modes[m].count_include_pad};
            td_case_compare compare = p.mode == TD_POOL_MAX ? TD_COMPARE_BITWISE : TD_COMPARE_NMSE;
            uint64_t image = (uint64_t)td_conv_image_count(&p.geo), pooled = (uint64_t)td_conv_pooled_count(&p.geo);
            td_kernel_call pool = {.kernel = TD_KERNEL_POOL, .p.pool = p};
            td_kernel_call backward = {.kernel = TD_KERNEL_POOL_BACKWARD, .p.pool = p};

            /* x at 3, then y, gy and gx, in one buffer. */
            uint64_t x = 3, y = x + image + 2, gy = y + pooled + 2, gx = gy + pooled + 2;
            td_conformance_case *c = td_case_add(list, "pool %s: %s", modes[m].name, rows[i].what);
            td_case_call(c, pool, (td_case_args){.out = {0, y}, .a = {0, x}}, compare);
            c->inputs = pool_inputs;

            c = td_case_add(list, "pool_backward %s: %s", modes[m].name, rows[i].what);
            td_case_call(c, backward, (td_case_args){.out = {0, gx}, .a = {0, x}, .b = {0, y}, .c = {0, gy}},
                         compare);
            c->inputs = pool_inputs;

            /* Backward reads the y the device's forward wrote. */
            c = td_case_add(list, "pool then pool_backward in one segment, %s: %s", modes[m].name, rows[i].what);
            td_case_call(c, pool, (td_case_args){.out = {1, 4}, .a = {0, 0}}, compare);
            td_case_call(c, backward, (td_case_args){.out = {3, 1}, .a = {0, 0}, .b = {1, 4}, .c = {2, 0}},
                         compare);
            c->inputs = pool_inputs;
        }
}
