#version 450
#extension GL_EXT_control_flow_attributes : require
// GEMM, row-major: C = alpha op(A) op(B) + beta C (td_kernel.h); with
// precision bf16, A and B rounded to bfloat16 as they enter shared memory.
// Each 8x8 workgroup computes a 64x64 tile of C; each invocation an 8x8
// register block at rows ty+8i, cols tx+8j, so neighbouring invocations
// read neighbouring shared-memory words. K advances in slabs of BK held in
// shared memory; out-of-range elements load as 0 so edges need no branches
// in the inner loop. Sizes measured on lavapipe (2 cores): 64 invocations
// with 8x8 blocks and BK 32 ran 1.5-2x faster than 256 invocations with 4x4
// blocks, as lavapipe pays per invocation at every barrier. TILE must match
// TD_VK_GEMM_TILE in backends/vulkan/vk_internal.h. The loops inside a
// slab are unrolled: lavapipe counts every loop iteration of an invocation
// against one limit of 65535 and silently leaves loops past it, so only the
// slab loop may iterate (K up to about 2 million).
#ifndef TILE
#define TILE 64
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WG
#define WG 8
#endif
#define PER (TILE / WG)

layout(local_size_x = WG, local_size_y = WG) in;

layout(std430, binding = 0) buffer C { float d[]; } cbuf;
layout(std430, binding = 2) readonly buffer A { float d[]; } abuf;
layout(std430, binding = 3) readonly buffer B { float d[]; } bbuf;

layout(push_constant) uniform Params {
    int trans_a;
    int trans_b;
    int m;
    int n;
    int k;
    int lda;
    int ldb;
    int ldc;
    float alpha;
    float beta;
    uint a_off;
    uint b_off;
    uint c_off;
    int bf16; // td_gemm_precision: 1 = bf16
} p;

// td_bf16_round (td_kernel.h): to nearest even on the bits, NaN kept. A
// product of two rounded values is exact in float, so the sums below are
// the reference's sums of the same products.
float bf16_round(float x)
{
    uint u = floatBitsToUint(x);
    u = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return uintBitsToFloat(u & 0xffff0000u);
}

shared float As[BK][TILE];
shared float Bs[BK][TILE];

void main()
{
    int tx = int(gl_LocalInvocationID.x);
    int ty = int(gl_LocalInvocationID.y);
    int tid = ty * WG + tx;
    int row0 = int(gl_WorkGroupID.y) * TILE;
    int col0 = int(gl_WorkGroupID.x) * TILE;

    float acc[PER][PER];
    for (int i = 0; i < PER; i++)
        for (int j = 0; j < PER; j++)
            acc[i][j] = 0.0;

    for (int k0 = 0; k0 < p.k; k0 += BK) {
        // BK*TILE elements per operand, WG*WG invocations load PER*BK/WG each.
        [[unroll]] for (int l = 0; l < (BK * TILE) / (WG * WG); l++) {
            int e = tid + l * WG * WG;
            // Walk memory-contiguous dimension fastest for each layout.
            int mm, kk;
            if (p.trans_a != 0) { mm = e % TILE; kk = e / TILE; }
            else { kk = e % BK; mm = e / BK; }
            int gm = row0 + mm, gk = k0 + kk;
            float v = 0.0;
            if (gm < p.m && gk < p.k)
                v = abuf.d[p.a_off + uint(p.trans_a != 0 ? gk * p.lda + gm : gm * p.lda + gk)];
            As[kk][mm] = p.bf16 != 0 ? bf16_round(v) : v;

            int nn;
            if (p.trans_b != 0) { kk = e % BK; nn = e / BK; }
            else { nn = e % TILE; kk = e / TILE; }
            int gn = col0 + nn;
            gk = k0 + kk;
            float w = 0.0;
            if (gn < p.n && gk < p.k)
                w = bbuf.d[p.b_off + uint(p.trans_b != 0 ? gn * p.ldb + gk : gk * p.ldb + gn)];
            Bs[kk][nn] = p.bf16 != 0 ? bf16_round(w) : w;
        }
        barrier();
        [[unroll]] for (int kk = 0; kk < BK; kk++) {
            float av[PER], bv[PER];
            [[unroll]] for (int i = 0; i < PER; i++)
                av[i] = As[kk][ty + WG * i];
            [[unroll]] for (int j = 0; j < PER; j++)
                bv[j] = Bs[kk][tx + WG * j];
            [[unroll]] for (int i = 0; i < PER; i++)
                [[unroll]] for (int j = 0; j < PER; j++)
                    acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }

    for (int i = 0; i < PER; i++) {
        int gm = row0 + ty + WG * i;
        if (gm >= p.m)
            continue;
        for (int j = 0; j < PER; j++) {
            int gn = col0 + tx + WG * j;
            if (gn >= p.n)
                continue;
            uint ci = p.c_off + uint(gm * p.ldc + gn);
            // beta == 0: C is not read, so NaN there does not propagate.
            float r = p.alpha * acc[i][j];
            if (p.beta != 0.0)
                r += p.beta * cbuf.d[ci];
            cbuf.d[ci] = r;
        }
    }
}
