/* Row kernels (td_kernel.h): softmax, argmax, cast, dropout mask, gather and
 * scatter-add of rows. Each output element (or row) is one work-item
 * running the reference's serial order, so the kernels without exp/log match
 * it bitwise. The global size is rounded up to the local size, hence the
 * bounds checks. */
#pragma OPENCL FP_CONTRACT OFF

/* One work-item per row: rows are examples, a row a few thousand classes at
 * most; the column order of the sum is the contract's. */
__kernel void td_softmax(__global float *out, ulong out_off, __global const float *a, ulong a_off, long rows,
                         long cols, int mode)
{
    long r = (long)get_global_id(0);
    if (r >= rows)
        return;
    __global const float *row = a + a_off + r * cols;
    __global float *orow = out + out_off + r * cols;
    long seen = (mode & 2) ? r % cols + 1 : cols; /* TD_ROWS_CAUSAL */
    float m = -INFINITY;
    for (long c = 0; c < seen; c++)
        m = row[c] > m ? row[c] : m;
    float s = 0.0f;
    for (long c = 0; c < seen; c++)
        s += exp(row[c] - m);
    if ((mode & 1) == 0) {
        float inv = 1.0f / s;
        for (long c = 0; c < seen; c++)
            orow[c] = exp(row[c] - m) * inv;
        for (long c = seen; c < cols; c++)
            orow[c] = 0.0f;
    } else {
        float ls = log(s);
        for (long c = 0; c < seen; c++)
            orow[c] = (row[c] - m) - ls;
        for (long c = seen; c < cols; c++)
            orow[c] = -INFINITY;
    }
}

__kernel void td_argmax(__global float *out, ulong out_off, __global const float *a, ulong a_off, long rows,
                        long cols)
{
    long r = (long)get_global_id(0);
    if (r >= rows)
        return;
    if (cols == 0) {
        out[out_off + r] = NAN;
        return;
    }
    __global const float *row = a + a_off + r * cols;
    long best = 0;
    float m = row[0];
    for (long c = 1; c < cols && !isnan(m); c++)
        if (isnan(row[c]) || row[c] > m) {
            m = row[c];
            best = c;
        }
    out[out_off + r] = (float)best;
}

/* u8 values are bytes of the same buffer (4 per element slot, little
 * endian on every device tandem opens): byte_off = a.offset * 4. */
__kernel void td_cast_u8(__global float *out, ulong out_off, __global const uchar *a, ulong byte_off, long n)
{
    long i = (long)get_global_id(0);
    if (i < n)
        out[out_off + i] = convert_float(a[byte_off + i]);
}

__kernel void td_cast_i32(__global float *out, ulong out_off, __global const int *a, ulong a_off, long n)
{
    long i = (long)get_global_id(0);
    if (i < n)
        out[out_off + i] = convert_float_rte(a[a_off + i]);
}

/* Philox4x32-10 as engine/core/random.c computes it on the host. */
static uint4 td_philox(uint4 ctr, uint2 key)
{
    for (int round = 0; round < 10; round++) {
        uint hi0 = mul_hi(0xD2511F53u, ctr.x), lo0 = 0xD2511F53u * ctr.x;
        uint hi1 = mul_hi(0xCD9E8D57u, ctr.z), lo1 = 0xCD9E8D57u * ctr.z;
        ctr = (uint4)(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
        key.x += 0x9E3779B9u;
        key.y += 0xBB67AE85u;
    }
    return ctr;
}

/* One work-item per four columns: one Philox block gives their four words. */
__kernel void td_dropout_mask(__global float *out, ulong out_off, __global const uint *b, ulong b_off, long rows,
                              long cols, uint seed_lo, uint seed_hi, uint threshold, float scale)
{
    long blocks = (cols + 3) / 4;
    long g = (long)get_global_id(0);
    if (g >= rows * blocks)
        return;
    long r = g / blocks, q = g % blocks;
    uint4 w = td_philox((uint4)((uint)q, b[b_off + 1] + (uint)r, b[b_off], 0x64726f70u), (uint2)(seed_lo, seed_hi));
    uint words[4] = {w.x, w.y, w.z, w.w};
    __global float *o = out + out_off + r * cols + q * 4;
    for (long k = 0; k < 4 && q * 4 + k < cols; k++)
        o[k] = words[k] < threshold ? scale : 0.0f;
}

__kernel void td_gather_rows(__global float *out, ulong out_off, __global const float *table, ulong table_off,
                             __global const int *ids, ulong ids_off, long n, long vocab, long dim)
{
    long e = (long)get_global_id(0);
    if (e >= n * dim)
        return;
    long i = e / dim, d = e % dim;
    int id = ids[ids_off + i];
    out[out_off + e] = id < 0 || id >= vocab ? NAN : table[table_off + (long)id * dim + d];
}

/* Gather formulation of the adjoint: each (v, column) scans every id in
 * increasing i, the contract's order, with no atomics. */
__kernel void td_scatter_add_rows(__global float *out, ulong out_off, __global const float *g, ulong g_off,
                                  __global const int *ids, ulong ids_off, long n, long vocab, long dim)
{
    long e = (long)get_global_id(0);
    if (e >= vocab * dim)
        return;
    long v = e / dim, d = e % dim;
    float s = 0.0f;
    for (long i = 0; i < n; i++)
        if (ids[ids_off + i] == v)
            s += g[g_off + i * dim + d];
    out[out_off + e] = s;
}

/* One work-item per row, in the reference's column order (td_kernel.h). */
__kernel void td_layer_norm(__global float *out, ulong out_off, __global float *stats, ulong stats_off,
                            __global const float *a, ulong a_off, long rows, long cols, float epsilon)
{
    long r = (long)get_global_id(0);
    if (r >= rows)
        return;
    __global const float *x = a + a_off + r * cols;
    __global float *y = out + out_off + r * cols;
    float s = 0.0f;
    for (long c = 0; c < cols; c++)
        s += x[c];
    float mean = s / (float)cols;
    float v = 0.0f;
    for (long c = 0; c < cols; c++) {
        float d = x[c] - mean;
        v += d * d;
    }
    float rstd = 1.0f / sqrt(v / (float)cols + epsilon);
    for (long c = 0; c < cols; c++)
        y[c] = (x[c] - mean) * rstd;
    stats[stats_off + 2 * r] = mean;
    stats[stats_off + 2 * r + 1] = rstd;
}

__kernel void td_layer_norm_backward(__global float *out, ulong out_off, __global const float *g, ulong g_off,
                                     __global const float *xhat, ulong x_off, __global const float *stats,
                                     ulong stats_off, long rows, long cols)
{
    long r = (long)get_global_id(0);
    if (r >= rows)
        return;
    __global const float *gr = g + g_off + r * cols, *xr = xhat + x_off + r * cols;
    __global float *o = out + out_off + r * cols;
    float sg = 0.0f, sgx = 0.0f;
    for (long c = 0; c < cols; c++) {
        sg += gr[c];
        sgx += gr[c] * xr[c];
    }
    float mg = sg / (float)cols, mgx = sgx / (float)cols, rstd = stats[stats_off + 2 * r + 1];
    for (long c = 0; c < cols; c++)
        o[c] = rstd * ((gr[c] - mg) - xr[c] * mgx);
}
