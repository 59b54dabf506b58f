/* Convolution and pooling geometries written as table rows: the output
 * size follows from the padding on all four sides, as flax's padding
 * pairs give it. */
#ifndef TD_CONV_GEOMETRY_H
#define TD_CONV_GEOMETRY_H

#include <stdint.h>

#include "td_kernel.h"

typedef struct td_geometry_row {
    int64_t n, h, w, c, kh, kw;
    int64_t stride_h, stride_w;
    int64_t pad_top, pad_bottom, pad_left, pad_right;
    int64_t dil_h, dil_w;
} td_geometry_row;

static inline td_conv_params td_geometry(const td_geometry_row *g)
{
    int64_t span_h = g->dil_h * (g->kh - 1) + 1, span_w = g->dil_w * (g->kw - 1) + 1;
    return (td_conv_params){.n = g->n, .h = g->h, .w = g->w, .c = g->c, .kh = g->kh, .kw = g->kw,
                            .oh = (g->h + g->pad_top + g->pad_bottom - span_h) / g->stride_h + 1,
                            .ow = (g->w + g->pad_left + g->pad_right - span_w) / g->stride_w + 1,
                            .stride_h = g->stride_h, .stride_w = g->stride_w, .pad_top = g->pad_top,
                            .pad_left = g->pad_left, .dil_h = g->dil_h, .dil_w = g->dil_w};
}

#endif
