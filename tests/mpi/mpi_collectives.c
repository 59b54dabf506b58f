/* Collectives over several processes (run under mpirun by
 * tests/mpi/run_mpi_test.sh): psum, pmean, all_gather, broadcast and
 * axis_index over a global mesh of every process's CPU devices, compared
 * with the naive sums of every global device's slice, at awkward sizes
 * (one element; 3 x 7; past two ring slices) and device counts that differ
 * per process. Every device of every process must hold bitwise the same
 * result: each process hashes its results and the hashes are compared.
 *
 * Usage: mpi_collectives COUNTS, COUNTS = one local device count for all
 * processes ("2") or one per process ("1/2/1"). Prints "N passed, N failed"
 * on rank 0; exits non-zero on any failure. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/tandem.h"
#include "mpi_test_util.h"

enum { OUT_PSUM, OUT_PMEAN, OUT_GATHER, OUT_BCAST_FIRST, OUT_BCAST_LAST, OUT_AXIS, OUT_COUNT };

/* The value of global row i, column c: random-looking, so every sum
 * rounds, and a wrong order or a missing term shows. */
static float value_at(uint64_t i, int64_t c)
{
    uint64_t h = (i * 1000003u + (uint64_t)c * 7919u) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return (float)((double)(h % 100000) / 7777.0 - 6.0);
}

static void check_size(mt_run *run, td_context *ctx, td_mesh *mesh, int64_t rows, int64_t cols)
{
    uint32_t global = 0, first = 0, local = 0;
    MT_OK(run, ctx, td_processes_mesh(mesh, &global, &first));
    MT_OK(run, ctx, td_mesh_size(mesh, &local));
    td_graph *g = NULL;
    MT_OK(run, ctx, td_graph_create(ctx, &g));
    int64_t xd[2] = {(int64_t)global * rows, cols};
    td_node x, out[OUT_COUNT], operand;
    MT_OK(run, ctx, td_graph_input(g, "x", TD_F32, 2, xd, TD_SHARDED, &x));
    MT_OK(run, ctx, td_graph_scale(g, x, 1.0f, &operand));
    MT_OK(run, ctx, td_graph_psum(g, operand, &out[OUT_PSUM]));
    MT_OK(run, ctx, td_graph_scale(g, x, 1.0f, &operand));
    MT_OK(run, ctx, td_graph_pmean(g, operand, &out[OUT_PMEAN]));
    MT_OK(run, ctx, td_graph_scale(g, x, 1.0f, &operand));
    MT_OK(run, ctx, td_graph_all_gather(g, operand, &out[OUT_GATHER]));
    MT_OK(run, ctx, td_graph_scale(g, x, 1.0f, &operand));
    MT_OK(run, ctx, td_graph_broadcast(g, operand, 0, &out[OUT_BCAST_FIRST]));
    MT_OK(run, ctx, td_graph_scale(g, x, 1.0f, &operand));
    MT_OK(run, ctx, td_graph_broadcast(g, operand, global - 1, &out[OUT_BCAST_LAST]));
    MT_OK(run, ctx, td_graph_axis_index(g, &out[OUT_AXIS]));
    td_program *p = NULL;
    MT_OK(run, ctx, td_pmap_compile(g, mesh, OUT_COUNT, out, &p));

    /* This process binds its own rows only. */
    int64_t bd[2] = {(int64_t)local * rows, cols};
    td_tensor *xt = NULL;
    MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, 2, bd, &xt));
    float *xv;
    td_tensor_data(xt, (void **)&xv);
    for (int64_t i = 0; i < bd[0]; i++)
        for (int64_t c = 0; c < cols; c++)
            xv[i * cols + c] = value_at((uint64_t)first * (uint64_t)rows + (uint64_t)i, c);
    td_binding b = {x, xt};
    MT_OK(run, ctx, td_program_run(p, 1, &b));

    /* The naive sums, over global devices in order, in double: the ring's
     * float sum must be within n roundings of it. */
    const size_t per = (size_t)(rows * cols);
    double *sum = calloc(per, sizeof *sum), *magnitude = calloc(per, sizeof *magnitude);
    for (uint32_t d = 0; d < global; d++)
        for (size_t e = 0; e < per; e++) {
            const float v = value_at((uint64_t)d * (uint64_t)rows + e / (size_t)cols, (int64_t)(e % (size_t)cols));
            sum[e] += v;
            magnitude[e] += fabs(v);
        }
    int64_t od[2] = {rows, cols}, gd[2] = {(int64_t)global * rows, cols};
    td_tensor *o = NULL, *og = NULL, *oi = NULL;
    MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, 2, od, &o));
    MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, 2, gd, &og));
    MT_OK(run, ctx, td_tensor_create(ctx, TD_F32, 0, NULL, &oi));
    float *ov, *ogv, *oiv;
    td_tensor_data(o, (void **)&ov);
    td_tensor_data(og, (void **)&ogv);
    td_tensor_data(oi, (void **)&oiv);
    uint64_t hash = 0; /* device 0's results; every other device's must hash the same */
    int differ = 0;
    int bad_sum = 0, bad_mean = 0, bad_gather = 0, bad_first = 0, bad_last = 0, bad_axis = 0;
    for (uint32_t d = 0; d < local; d++) {
        uint64_t h = 1469598103934665603ull;
        MT_OK(run, ctx, td_program_read_output(p, OUT_PSUM, d, o));
        for (size_t e = 0; e < per; e++)
            bad_sum += fabs(ov[e] - sum[e]) > 2.0 * global * 5.96e-8 * magnitude[e] + 1e-30;
        h = mt_hash(h, ov, per * sizeof *ov);
        MT_OK(run, ctx, td_program_read_output(p, OUT_PMEAN, d, o));
        for (size_t e = 0; e < per; e++)
            bad_mean += fabs(ov[e] - sum[e] / global) > (2.0 * global * 5.96e-8 * magnitude[e] + 1e-30) / global +
                                                            1.2e-7 * fabs(sum[e] / global);
        h = mt_hash(h, ov, per * sizeof *ov);
        if (d == 0)
            hash = h;
        differ += h != hash;
        MT_OK(run, ctx, td_program_read_output(p, OUT_GATHER, d, og));
        for (size_t e = 0; e < (size_t)global * per; e++)
            bad_gather += ogv[e] != value_at(e / (size_t)cols, (int64_t)(e % (size_t)cols));
        MT_OK(run, ctx, td_program_read_output(p, OUT_BCAST_FIRST, d, o));
        for (size_t e = 0; e < per; e++)
            bad_first += ov[e] != value_at(e / (size_t)cols, (int64_t)(e % (size_t)cols));
        MT_OK(run, ctx, td_program_read_output(p, OUT_BCAST_LAST, d, o));
        for (size_t e = 0; e < per; e++)
            bad_last += ov[e] != value_at((uint64_t)(global - 1) * (uint64_t)rows + e / (size_t)cols,
                                          (int64_t)(e % (size_t)cols));
        MT_OK(run, ctx, td_program_read_output(p, OUT_AXIS, d, oi));
        bad_axis += *oiv != (float)(first + d);
    }
    mt_check(run, bad_sum == 0, "psum [%lld, %lld]: %d elements off the naive sum", (long long)rows, (long long)cols,
             bad_sum);
    mt_check(run, bad_mean == 0, "pmean [%lld, %lld]: %d elements off", (long long)rows, (long long)cols, bad_mean);
    mt_check(run, bad_gather == 0, "all_gather [%lld, %lld]: %d elements differ", (long long)rows, (long long)cols,
             bad_gather);
    mt_check(run, bad_first == 0 && bad_last == 0, "broadcast [%lld, %lld]: %d + %d elements differ",
             (long long)rows, (long long)cols, bad_first, bad_last);
    mt_check(run, bad_axis == 0, "axis_index: %d devices off their global position", bad_axis);
    mt_check(run, differ == 0, "psum/pmean [%lld, %lld]: %d local devices differ from device 0", (long long)rows,
             (long long)cols, differ);
    mt_check(run, mt_same_on_every_process(run, ctx, hash), "psum/pmean [%lld, %lld]: processes hold different bits",
             (long long)rows, (long long)cols);
    free(sum);
    free(magnitude);
    td_tensor_destroy(o);
    td_tensor_destroy(og);
    td_tensor_destroy(oi);
    td_tensor_destroy(xt);
    td_program_destroy(p);
    td_graph_destroy(g);
}

int main(int argc, char **argv)
{
    mt_run run;
    td_context *ctx = mt_start(&run, argc, argv);
    td_mesh *mesh = mt_mesh(&run, ctx, argc > 1 ? argv[1] : "1");
    check_size(&run, ctx, mesh, 1, 1);
    check_size(&run, ctx, mesh, 3, 7);
    check_size(&run, ctx, mesh, 5, 33333); /* 166665 floats a device: three ring slices */
    td_mesh_destroy(mesh);
    return mt_finish(&run, ctx);
}
