/* IM2COL and COL2IM: strides, dilations, asymmetric and oversized padding,
 * overlapping windows, 1x1 and whole-image windows. Both are bitwise:
 * im2col copies, and col2im adds in the contract's fixed order (the random
 * inputs have full mantissas, so another order shows). */
#include "td_conformance.h"

#include "td_conv_geometry.h"

static const struct conv_row {
    const char *what;
    td_geometry_row g; /* n h w c, kh kw, strides, padding t/b/l/r, dilations */
} rows[] = {
    {"strides 2x3, dilation 1x2, asymmetric padding", {2, 7, 5, 3, 3, 2, 2, 3, 1, 2, 2, 0, 1, 2}},
    {"dilation 2, stride 3x2", {1, 9, 8, 2, 3, 3, 3, 2, 0, 1, 1, 2, 2, 2}},
    {"padding larger than the window", {3, 4, 6, 1, 2, 2, 1, 1, 4, 3, 5, 4, 1, 1}},
    {"the window is the image", {2, 5, 4, 3, 5, 4, 1, 1, 0, 0, 0, 0, 1, 1}},
    {"1x1", {2, 5, 3, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1}},
    {"3x3 SAME, nine terms per pixel", {1, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}},
    {"dilation 2, stride 1", {1, 7, 7, 1, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2}},
    {"3x3 stride 2 padding 1", {1, 5, 6, 2, 3, 3, 2, 2, 1, 1, 1, 0, 1, 1}},
};

void td_cases_conv(td_case_list *list)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        td_conv_params p = td_geometry(&rows[i].g);
        uint64_t image = (uint64_t)td_conv_image_count(&p);
        td_kernel_call im2col = {.kernel = TD_KERNEL_IM2COL, .p.conv = p};
        td_kernel_call col2im = {.kernel = TD_KERNEL_COL2IM, .p.conv = p};

        /* Image at 3, patches after it, in one buffer. */
        td_conformance_case *c = td_case_add(list, "im2col: %s", rows[i].what);
        td_case_call(c, im2col, (td_case_args){.out = {0, 9 + image}, .a = {0, 3}}, TD_COMPARE_BITWISE);
        c = td_case_add(list, "col2im: %s", rows[i].what);
        td_case_call(c, col2im, (td_case_args){.out = {0, 3}, .a = {0, 9 + image}}, TD_COMPARE_BITWISE);

        /* Independent in one segment: col2im of other patches than the
         * ones im2col writes. */
        c = td_case_add(list, "im2col and an independent col2im in one segment: %s", rows[i].what);
        td_case_call(c, im2col, (td_case_args){.out = {1, 1}, .a = {0, 3}}, TD_COMPARE_BITWISE);
        td_case_call(c, col2im, (td_case_args){.out = {3, 2}, .a = {2, 1}}, TD_COMPARE_BITWISE);

        /* col2im of the patches im2col just wrote: the adjoint pair. */
        c = td_case_add(list, "im2col then col2im of its patches: %s", rows[i].what);
        td_case_call(c, im2col, (td_case_args){.out = {1, 0}, .a = {0, 5}}, TD_COMPARE_BITWISE);
        td_case_call(c, col2im, (td_case_args){.out = {2, 0}, .a = {1, 0}}, TD_COMPARE_BITWISE);
    }
}
