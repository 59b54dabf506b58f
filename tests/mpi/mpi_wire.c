/* The gradient all-reduce on a bf16 wire across processes (run under
 * mpirun): td_ring_allreduce_consume with TD_RING_WIRE_BF16 over a global
 * mesh of every process's CPU devices must give, on every device of every
 * process, bitwise the documented rule (td_ring.h, td_ring_wire): each
 * process's sum by its local ring's rule,
 *     s_q = r(x[c]); s_q = r(x[c+j] + s_q) over its local ranks from the
 *     local chunk c of the element,
 * then the processes' sums added in process order in float and rounded
 * once more (r = td_bf16_round). Awkward sizes (1, 1000, past two slices),
 * device counts that differ per process. With "fp32" the same run on a
 * fp32 wire must give other bits (the rounding is there).
 *
 * Usage: mpi_wire COUNTS, as mpt_mesh takes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test_util.h"
#include "td_kernel.h"
#include "td_mesh_internal.h"
#include "td_ring.h"

typedef struct job {
    td_mesh *mesh;
    td_ring *ring;
    size_t count;
    uint32_t first; /* this process's first global device */
    td_ring_wire wire;
    float *results[16];
    td_status status[16];
} job;

/* Global device g's element i. */
static float value_at(uint32_t g, size_t i)
{
    uint64_t h = ((uint64_t)g * 1000003u + i * 7919u + 17) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    const float v = (float)((double)(h % 100000) / 77777.0 - 0.6);
    return (i % 4 == 1) ? v * 1e-3f : v;
}

static td_status finish_device(td_mesh_device *md)
{
    uint64_t t;
    td_status s = md->ops->submit(md->dev, &t);
    return s == TD_OK ? md->ops->wait(md->dev, t, 20000) : s;
}

static td_status rank_job(void *arg, uint32_t r)
{
    job *j = arg;
    td_mesh_device *md = &j->mesh->devices[r];
    td_buffer *buf = NULL;
    float *host = malloc(j->count * sizeof(float) + 1);
    td_status s = host ? td_ring_reserve(j->ring, r, j->count * sizeof(float)) : TD_ERR_OUT_OF_MEMORY;
    if (s == TD_OK)
        s = md->ops->buffer_create(md->dev, j->count * sizeof(float), &buf);
    for (size_t i = 0; s == TD_OK && i < j->count; i++)
        host[i] = value_at(j->first + r, i);
    if (s == TD_OK)
        s = md->ops->write(md->dev, buf, 0, host, j->count * sizeof(float));
    if (s == TD_OK)
        s = finish_device(md);
    if (s == TD_OK)
        s = td_ring_allreduce_consume(j->ring, r, buf, 0, buf, 0, j->count, NULL, NULL, j->wire);
    else
        td_ring_abort(j->ring, s);
    if (s == TD_OK)
        s = md->ops->read(md->dev, buf, 0, j->results[r], j->count * sizeof(float));
    if (s == TD_OK)
        s = finish_device(md);
    if (buf)
        md->ops->buffer_destroy(md->dev, buf);
    free(host);
    j->status[r] = s;
    return s;
}

/* The rule for element i of a `count`-element all-reduce. */
static float rule(td_ring *ring, size_t count, size_t i)
{
    const uint32_t P = td_ring_process_count(ring);
    float total = 0.0f;
    for (uint32_t q = 0; q < P; q++) {
        uint32_t first = 0;
        const uint32_t n = td_ring_process_devices(ring, q, &first);
        uint32_t c = 0;
        while (c + 1 < n && (size_t)(((unsigned __int128)count * (c + 1)) / n) <= i)
            c++;
        float s = td_bf16_round(value_at(first + c, i));
        for (uint32_t j = 1; j < n; j++)
            s = td_bf16_round(value_at(first + (c + j) % n, i) + s);
        total = q == 0 ? s : total + s;
    }
    return td_bf16_round(total);
}

static void check_size(mt_run *run, td_context *ctx, td_mesh *mesh, size_t count)
{
    job j;
    memset(&j, 0, sizeof j);
    j.mesh = mesh;
    j.count = count;
    MT_OK(run, ctx, td_mesh_ring(mesh, &j.ring));
    uint32_t global = 0, local = 0;
    MT_OK(run, ctx, td_processes_mesh(mesh, &global, &j.first));
    MT_OK(run, ctx, td_mesh_size(mesh, &local));
    for (uint32_t r = 0; r < local; r++)
        j.results[r] = malloc(count * sizeof(float) + 1);
    j.wire = TD_RING_WIRE_BF16;
    MT_OK(run, ctx, td_mesh_run(mesh, rank_job, &j));
    size_t off_rule = 0, not_bf16 = 0;
    uint64_t hash = mt_hash(1469598103934665603ull, j.results[0], count * sizeof(float));
    int differ = 0;
    for (uint32_t r = 1; r < local; r++)
        differ += memcmp(j.results[r], j.results[0], count * sizeof(float)) != 0;
    for (size_t i = 0; i < count; i++) {
        const float want = rule(j.ring, count, i);
        off_rule += memcmp(&want, &j.results[0][i], sizeof want) != 0;
        uint32_t bits;
        memcpy(&bits, &j.results[0][i], sizeof bits);
        not_bf16 += (bits & 0xffffu) != 0;
    }
    mt_check(run, off_rule == 0, "wire bf16, %zu elements: %zu off the rule (process %u)", count, off_rule, run->rank);
    mt_check(run, not_bf16 == 0, "wire bf16, %zu elements: %zu results are not bfloat16 values", count, not_bf16);
    mt_check(run, differ == 0, "wire bf16, %zu elements: %d local devices differ from device 0", count, differ);
    mt_check(run, mt_same_on_every_process(run, ctx, hash), "wire bf16, %zu elements: processes hold different bits",
             count);
    /* fp32 on the same mesh: another result (for sums that round). */
    j.wire = TD_RING_WIRE_FP32;
    MT_OK(run, ctx, td_mesh_run(mesh, rank_job, &j));
    size_t same = 0;
    for (size_t i = 0; i < count; i++) {
        const float want = rule(j.ring, count, i);
        same += memcmp(&want, &j.results[0][i], sizeof want) == 0;
    }
    mt_check(run, count < 100 || same < count / 2, "wire fp32, %zu elements: %zu follow the bf16 rule", count, same);
    for (uint32_t r = 0; r < local; r++)
        free(j.results[r]);
}

int main(int argc, char **argv)
{
    mt_run run;
    td_context *ctx = mt_start(&run, argc, argv);
    td_mesh *mesh = mt_mesh(&run, ctx, argc > 1 ? argv[1] : "1");
    const size_t sizes[] = {1, 1000, 2 * 65536 + 77};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        check_size(&run, ctx, mesh, sizes[k]);
    if (run.rank == 0)
        printf("wire bf16 across %u processes: the rule holds bitwise\n", run.count);
    return mt_finish(&run, ctx);
}
