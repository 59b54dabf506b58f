/* tandem's own GEMM (td_kernel.h), one kernel per transpose combination
 * and precision (td_gemm_bf16_*: every input rounded to bfloat16 as it is
 * loaded, td_bf16_round's rule; the products of rounded values are exact,
 * so fma adds them with the one rounding of the reference's sum).
 * Each work-item computes a 4x4 block of C held in four float4 registers
 * (rows 4*ly..4*ly+3 and columns 4*lx..4*lx+3 of its group's tile). Out-of-range rows/columns are clamped for loading and skipped when
 * storing, which keeps the inner loop free of branches. The group is 8x8
 * work-items (a 32x32 tile of C); the host must launch with that local size.
 * No local memory: on CPU devices it only adds copies. */
#pragma OPENCL FP_CONTRACT OFF

#define TD_GEMM_L 8

#define TD_A_N(i, p) a[(i) * lda + (p)]
#define TD_A_T(i, p) a[(p) * lda + (i)]
#define TD_B_N(p, j) b[(p) * ldb + (j)]
#define TD_B_T(p, j) b[(j) * ldb + (p)]

/* td_bf16_round (td_kernel.h): to nearest even on the bits, NaN kept. */
float td_bf16(float x)
{
    uint u = as_uint(x);
    u = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return as_float(u & 0xffff0000u);
}

float4 td_bf16_4(float4 v)
{
    return (float4)(td_bf16(v.s0), td_bf16(v.s1), td_bf16(v.s2), td_bf16(v.s3));
}

void td_gemm_store(__global float *c, long ldc, long row, long m, long n, long4 col, float4 v,
                   float alpha, float beta)
{
    if (row >= m)
        return;
    __global float *dst = c + row * ldc;
    float vs[4] = {v.s0, v.s1, v.s2, v.s3};
    long cs[4] = {col.s0, col.s1, col.s2, col.s3};
    for (int q = 0; q < 4; q++) {
        if (cs[q] >= n)
            continue;
        /* Two roundings as in the reference; beta == 0 never reads C. */
        float r = alpha * vs[q];
        if (beta != 0.0f) {
            float t = beta * dst[cs[q]];
            r = r + t;
        }
        dst[cs[q]] = r;
    }
}

/* Full blocks (all four rows and columns inside C) take the first loop,
 * where a non-transposed B is read with one vload4; edge blocks clamp. */
#define TD_GEMM_KERNEL(name, LA, LB, LB4)                                                        \
    __kernel void td_gemm_##name(__global float *c, ulong c_off, __global const float *a,        \
                                 ulong a_off, __global const float *b, ulong b_off, long m,       \
                                 long n, long k, long lda, long ldb, long ldc, float alpha,      \
                                 float beta)                                                     \
    {                                                                                            \
        long row0 = (long)get_group_id(1) * (4 * TD_GEMM_L) + (long)get_local_id(1) * 4;         \
        long col0 = (long)get_group_id(0) * (4 * TD_GEMM_L) + (long)get_local_id(0) * 4;         \
        if (row0 >= m || col0 >= n)                                                              \
            return;                                                                              \
        a += a_off;                                                                              \
        b += b_off;                                                                              \
        c += c_off;                                                                              \
        long i0 = row0, i1 = min(row0 + 1, m - 1), i2 = min(row0 + 2, m - 1);                    \
        long i3 = min(row0 + 3, m - 1);                                                          \
        long4 col = (long4)(col0, col0 + 1, col0 + 2, col0 + 3);                                 \
        long j0 = col.s0, j1 = min(col.s1, n - 1), j2 = min(col.s2, n - 1);                      \
        long j3 = min(col.s3, n - 1);                                                            \
        float4 acc0 = (float4)(0.0f), acc1 = (float4)(0.0f);                                     \
        float4 acc2 = (float4)(0.0f), acc3 = (float4)(0.0f);                                     \
        if (col0 + 3 < n) {                                                                      \
            for (long p = 0; p < k; p++) {                                                       \
                float4 bv = LB4(p, j0);                                                          \
                acc0 = fma((float4)(LA(i0, p)), bv, acc0);                                       \
                acc1 = fma((float4)(LA(i1, p)), bv, acc1);                                       \
                acc2 = fma((float4)(LA(i2, p)), bv, acc2);                                       \
                acc3 = fma((float4)(LA(i3, p)), bv, acc3);                                       \
            }                                                                                    \
        } else {                                                                                 \
            for (long p = 0; p < k; p++) {                                                       \
                float4 bv = (float4)(LB(p, j0), LB(p, j1), LB(p, j2), LB(p, j3));                \
                acc0 = fma((float4)(LA(i0, p)), bv, acc0);                                       \
                acc1 = fma((float4)(LA(i1, p)), bv, acc1);                                       \
                acc2 = fma((float4)(LA(i2, p)), bv, acc2);                                       \
                acc3 = fma((float4)(LA(i3, p)), bv, acc3);                                       \
            }                                                                                    \
        }                                                                                        \
        td_gemm_store(c, ldc, row0, m, n, col, acc0, alpha, beta);                               \
        td_gemm_store(c, ldc, row0 + 1, m, n, col, acc1, alpha, beta);                           \
        td_gemm_store(c, ldc, row0 + 2, m, n, col, acc2, alpha, beta);                           \
        td_gemm_store(c, ldc, row0 + 3, m, n, col, acc3, alpha, beta);                           \
    }

#define TD_B4_N(p, j) vload4(0, b + (p) * ldb + (j))
#define TD_B4_T(p, j) (float4)(TD_B_T(p, j), TD_B_T(p, (j) + 1), TD_B_T(p, (j) + 2), TD_B_T(p, (j) + 3))

TD_GEMM_KERNEL(nn, TD_A_N, TD_B_N, TD_B4_N)
TD_GEMM_KERNEL(nt, TD_A_N, TD_B_T, TD_B4_T)
TD_GEMM_KERNEL(tn, TD_A_T, TD_B_N, TD_B4_N)
TD_GEMM_KERNEL(tt, TD_A_T, TD_B_T, TD_B4_T)

#define TD_RA_N(i, p) td_bf16(TD_A_N(i, p))
#define TD_RA_T(i, p) td_bf16(TD_A_T(i, p))
#define TD_RB_N(p, j) td_bf16(TD_B_N(p, j))
#define TD_RB_T(p, j) td_bf16(TD_B_T(p, j))
#define TD_RB4_N(p, j) td_bf16_4(TD_B4_N(p, j))
#define TD_RB4_T(p, j) td_bf16_4(TD_B4_T(p, j))

TD_GEMM_KERNEL(bf16_nn, TD_RA_N, TD_RB_N, TD_RB4_N)
TD_GEMM_KERNEL(bf16_nt, TD_RA_N, TD_RB_T, TD_RB4_T)
TD_GEMM_KERNEL(bf16_tn, TD_RA_T, TD_RB_N, TD_RB4_N)
TD_GEMM_KERNEL(bf16_tt, TD_RA_T, TD_RB_T, TD_RB4_T)
