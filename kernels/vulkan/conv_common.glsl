// Shared by im2col, col2im, pool and pool_backward: the geometry of
// td_conv_params in push constants (32-bit: the host checks every index
// fits before recording), the bindings, and the window helpers.
layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer Out { float d[]; } o;
layout(std430, binding = 2) readonly buffer A { float d[]; } a;
layout(std430, binding = 3) readonly buffer B { float d[]; } b;
layout(std430, binding = 4) readonly buffer C { float d[]; } c;

layout(push_constant) uniform Params {
    int n, h, w, ch;
    int kh, kw, oh, ow;
    int stride_h, stride_w, pad_top, pad_left;
    int dil_h, dil_w;
    uint count;
    uint out_off, a_off, b_off, c_off;
    int mode;        // POOL: 0 max, 1 avg
    int include_pad; // POOL avg: divide by kh*kw
} p;

// The window whose tap t lands on pos, or -1 when none does. Trying t from
// the last tap down visits windows in increasing order (the contract's).
int window_of(int pos, int t, int stride, int pad, int dil, int outs)
{
    int num = pos + pad - t * dil;
    if (num < 0 || num % stride != 0)
        return -1;
    int w_ = num / stride;
    return w_ < outs ? w_ : -1;
}

// Taps 0 <= k < taps (no dilation) with 0 <= o*stride - pad + k < size.
int inside(int o_, int taps, int stride, int pad, int size)
{
    int lo = o_ * stride - pad;
    int first = max(lo, 0), last = min(lo + taps, size);
    return last > first ? last - first : 0;
}

int avg_divisor(int oy, int ox)
{
    if (p.include_pad != 0)
        return p.kh * p.kw;
    return inside(oy, p.kh, p.stride_h, p.pad_top, p.h) * inside(ox, p.kw, p.stride_w, p.pad_left, p.w);
}
