/* The ring collectives (engine/parallel/td_ring.h), driven directly through
 * td_mesh_run jobs: each rank allocates its buffers with its backend, uploads
 * its input, runs the collective and reads its result back. Results are
 * compared with a double-precision naive sum on the host, every rank's
 * result must be bitwise that of every other rank, and a second run must
 * give bitwise the same result as the first. Failures (an aborting rank, a
 * rank that never arrives) must end every rank promptly with a status. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_test_util.h"
#include "td_mesh_internal.h"
#include "td_platform.h"
#include "td_ring.h"
#include "td_ring_state.h"

#define MAX_RANKS 16
#define IN_OFFSET 3  /* elements: collectives must honour offsets */
#define OUT_OFFSET 5

typedef enum { KIND_ALLREDUCE, KIND_ALLREDUCE_TOTAL, KIND_ALL_GATHER, KIND_BROADCAST } collective_kind;
typedef enum { RANK_NORMAL, RANK_ABORTS, RANK_NEVER_ARRIVES, RANK_LATE } rank_behaviour;

typedef struct scale_finalize {
    td_ring *ring;
    float factor;
    size_t count;
    _Atomic unsigned *covered; /* times each element was finalized */
    atomic_int wrong_rank;     /* finalize was given a rank that does not own the range */
    /* KIND_ALLREDUCE_TOTAL: the sum of squares of the reduced values. */
    double totals[MAX_RANKS];  /* per rank; NaN until `total` gave it */
    atomic_int total_calls;
    bool want_total;
    atomic_int early;          /* a finalize ran before its rank had the total */
} scale_finalize;

typedef struct ring_job {
    td_mesh *mesh;
    td_ring *ring;
    uint32_t n;
    collective_kind kind;
    size_t count;   /* allreduce/broadcast: elements; all_gather: per rank */
    uint32_t root;  /* broadcast */
    bool in_place;
    uint64_t salt;  /* input values */
    scale_finalize *finalize;
    uint32_t odd_rank; /* behaves as `behaviour`; others are normal */
    rank_behaviour behaviour;
    /* RANK_LATE: ranks about to enter the collective. The late rank's
     * 20 ms count from when every other rank is there: on a loaded
     * machine a thread can start more than 20 ms late and would then
     * not wait at all. */
    atomic_uint entering;
    float *results[MAX_RANKS]; /* output elements, read back per rank */
    td_status status[MAX_RANKS];
    double seconds[MAX_RANKS]; /* time inside the collective */
    /* Every rank passes this before freeing its buffers: after a failure a
     * rank returns at once while its successor may still be reading its
     * memory (the ring promises "free right away" only on success). */
    test_meeting release;
} ring_job;

/* Input element i of rank r: uniform in [-1, 1), a pure function so the host
 * can recompute any rank's input without storing it. */
static float input_value(uint64_t salt, uint32_t rank, size_t i)
{
    test_rng rng = {salt ^ ((uint64_t)rank << 40) ^ (uint64_t)i * 0x9E3779B97F4A7C15ull};
    return test_rng_uniform(&rng, -1.0f, 1.0f);
}

static size_t in_count(const ring_job *job)
{
    return job->count;
}

static size_t out_count(const ring_job *job)
{
    return job->kind == KIND_ALL_GATHER ? job->count * job->n : job->count;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The finalize and the partial get the owner of their range: the rank
 * whose chunk td_ring_owned_range says it is (the trainer keeps that
 * rank's optimizer state for it), whichever thread runs them. */
static void check_owner(scale_finalize *f, uint32_t rank, size_t offset, size_t count)
{
    size_t lo, hi;
    td_ring_owned_range(f->ring, rank, f->count, &lo, &hi);
    if (offset < lo || offset + count > hi)
        atomic_store(&f->wrong_rank, 1);
}

static double square_partial(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    scale_finalize *f = user;
    check_owner(f, rank, offset, count);
    double sum = 0.0;
    for (size_t i = 0; i < count; i++)
        sum += (double)data[i] * data[i];
    return sum;
}

static void record_total(void *user, uint32_t rank, double total)
{
    scale_finalize *f = user;
    f->totals[rank] = total;
    atomic_fetch_add(&f->total_calls, 1);
}

static void scale_chunk(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    scale_finalize *f = user;
    check_owner(f, rank, offset, count);
    if (f->want_total && isnan(f->totals[rank]))
        atomic_store(&f->early, 1);
    for (size_t i = 0; i < count; i++) {
        data[i] *= f->factor;
        if (offset + i < f->count)
            atomic_fetch_add(&f->covered[offset + i], 1u);
    }
}

static td_status finish(td_mesh_device *md)
{
    uint64_t ticket;
    td_status s = md->ops->submit(md->dev, &ticket);
    return s == TD_OK ? md->ops->wait(md->dev, ticket, 10000) : s;
}

static td_status rank_job(void *arg, uint32_t r)
{
    ring_job *job = arg;
    td_mesh_device *md = &job->mesh->devices[r];
    const td_backend_ops *ops = md->ops;
    td_ring *ring = job->ring;
    size_t nin = in_count(job), nout = out_count(job);
    size_t in_elems = IN_OFFSET + (job->in_place ? (nin > nout ? nin : nout) : nin);
    td_buffer *in = NULL, *out = NULL;
    td_status s = td_ring_reserve(ring, r, (nout > nin ? nout : nin) * sizeof(float));
    if (s == TD_OK)
        s = ops->buffer_create(md->dev, in_elems * sizeof(float), &in);
    if (s == TD_OK && !job->in_place)
        s = ops->buffer_create(md->dev, (OUT_OFFSET + nout) * sizeof(float), &out);
    if (s != TD_OK) {
        /* Tell the peers, which would otherwise wait for this rank until the timeout. */
        td_ring_abort(ring, s);
        job->status[r] = s;
        test_meeting_wait(&job->release);
        if (out)
            ops->buffer_destroy(md->dev, out);
        if (in)
            ops->buffer_destroy(md->dev, in);
        return s;
    }
    if (job->in_place)
        out = in;
    uint64_t out_offset = job->in_place ? IN_OFFSET : OUT_OFFSET;

    float *host = malloc((nin > nout ? nin : nout) * sizeof(float) + 1);
    for (size_t i = 0; i < nin; i++)
        host[i] = input_value(job->salt, r, i);
    if (nin)
        s = ops->write(md->dev, in, IN_OFFSET * sizeof(float), host, nin * sizeof(float));
    if (s == TD_OK)
        s = finish(md);

    if (s == TD_OK && r == job->odd_rank && job->behaviour == RANK_ABORTS) {
        td_ring_abort(ring, TD_ERR_BACKEND);
        s = TD_ERR_BACKEND;
    } else if (s == TD_OK && !(r == job->odd_rank && job->behaviour == RANK_NEVER_ARRIVES)) {
        if (job->behaviour == RANK_LATE && r != job->odd_rank)
            atomic_fetch_add(&job->entering, 1);
        if (r == job->odd_rank && job->behaviour == RANK_LATE) {
            const double give_up = now_seconds() + 10.0;
            while (atomic_load(&job->entering) + 1 < job->n && now_seconds() < give_up)
                test_device_pause_ns(100000);
            test_device_pause_ns(20000000); /* 20 ms: far past any spin */
        }
        double start = now_seconds();
        switch (job->kind) {
        case KIND_ALLREDUCE:
            s = td_ring_allreduce(ring, r, in, IN_OFFSET, out, out_offset, job->count,
                                  job->finalize ? scale_chunk : NULL, job->finalize);
            break;
        case KIND_ALLREDUCE_TOTAL:
            s = td_ring_allreduce_consume_total(ring, r, in, IN_OFFSET, out, out_offset, job->count, square_partial,
                                                record_total, scale_chunk, job->finalize, TD_RING_WIRE_FP32);
            break;
        case KIND_ALL_GATHER:
            s = td_ring_all_gather(ring, r, in, IN_OFFSET, out, out_offset, job->count);
            break;
        case KIND_BROADCAST:
            s = td_ring_broadcast(ring, r, job->root, in, IN_OFFSET, out, out_offset, job->count);
            break;
        }
        job->seconds[r] = now_seconds() - start;
        if (s == TD_OK && nout)
            s = ops->read(md->dev, out, out_offset * sizeof(float), job->results[r], nout * sizeof(float));
        if (s == TD_OK)
            s = finish(md);
    }
    job->status[r] = s;
    test_meeting_wait(&job->release);
    free(host);
    if (!job->in_place)
        ops->buffer_destroy(md->dev, out);
    ops->buffer_destroy(md->dev, in);
    return s;
}

/* The mesh's ring, made on first use as a program's compile would. */
static td_ring *mesh_ring(td_mesh *mesh)
{
    td_ring *ring = NULL;
    cr_assert_eq(td_mesh_ring(mesh, &ring), TD_OK);
    return ring;
}

static void job_init(ring_job *job, td_mesh *mesh, collective_kind kind, size_t count, uint64_t salt)
{
    memset(job, 0, sizeof *job);
    job->mesh = mesh;
    job->ring = mesh_ring(mesh);
    job->n = test_mesh_size(mesh);
    cr_assert_leq(job->n, MAX_RANKS);
    job->kind = kind;
    job->count = count;
    job->salt = salt;
    job->odd_rank = UINT32_MAX;
    test_meeting_init(&job->release, mesh, job->n);
    for (uint32_t r = 0; r < job->n; r++) {
        job->results[r] = malloc(out_count(job) * sizeof(float) + 1);
        cr_assert_not_null(job->results[r]);
    }
}

static void job_free(ring_job *job)
{
    for (uint32_t r = 0; r < job->n; r++)
        free(job->results[r]);
}

static void run_ok(td_context *ctx, ring_job *job)
{
    TEST_OK(ctx, td_mesh_run(job->mesh, rank_job, job));
    for (uint32_t r = 0; r < job->n; r++)
        cr_assert_eq(job->status[r], TD_OK, "rank %u: %s", r, td_status_name(job->status[r]));
}

/* Every rank bitwise equal to rank 0. */
static void check_ranks_identical(const ring_job *job, const char *what)
{
    size_t bytes = out_count(job) * sizeof(float);
    for (uint32_t r = 1; r < job->n; r++)
        cr_assert(memcmp(job->results[r], job->results[0], bytes) == 0,
                  "%s: rank %u's result is not bitwise rank 0's", what, r);
}

/* Allreduce of `count` on `mesh`, twice, optionally with a scaling finalize. */
static void check_allreduce(td_context *ctx, td_mesh *mesh, size_t count, bool in_place, float factor)
{
    ring_job job;
    job_init(&job, mesh, KIND_ALLREDUCE, count, 0xA11 + count);
    job.in_place = in_place;
    scale_finalize fin = {.ring = job.ring, .factor = factor, .count = count};
    if (factor != 1.0f) {
        fin.covered = calloc(count + 1, sizeof *fin.covered);
        job.finalize = &fin;
    }
    char what[128];
    snprintf(what, sizeof what, "allreduce N=%u count=%zu%s%s", job.n, count, in_place ? " in place" : "",
             factor != 1.0f ? " scaled" : "");
    run_ok(ctx, &job);
    check_ranks_identical(&job, what);
    for (size_t i = 0; i < count; i++) {
        double sum = 0.0, magnitude = 0.0;
        for (uint32_t r = 0; r < job.n; r++) {
            double v = input_value(job.salt, r, i);
            sum += v;
            magnitude += fabs(v);
        }
        /* n roundings of the sum (2^-24 each, doubled) plus the scaling. */
        double want = sum * factor, tol = 2.0 * job.n * 5.96e-8 * magnitude * fabs(factor) + 6e-8 * fabs(want);
        if (!(fabs(job.results[0][i] - want) <= tol))
            cr_assert_fail("%s: element %zu = %.9g, naive sum %.9g (tolerance %.3g)", what, i,
                           (double)job.results[0][i], want, tol);
        if (job.finalize && fin.covered[i] != 1)
            cr_assert_fail("%s: element %zu was finalized %u times", what, i, fin.covered[i]);
    }
    if (job.finalize)
        cr_assert_eq(atomic_load(&fin.wrong_rank), 0, "%s: finalize was given a rank that does not own its range",
                     what);

    /* The same inputs again: bitwise the same result (the order of every sum is fixed). */
    float *first = malloc(count * sizeof(float) + 1);
    memcpy(first, job.results[0], count * sizeof(float));
    if (job.finalize)
        memset(fin.covered, 0, (count + 1) * sizeof *fin.covered);
    run_ok(ctx, &job);
    for (uint32_t r = 0; r < job.n; r++)
        cr_assert(memcmp(job.results[r], first, count * sizeof(float)) == 0,
                  "%s: rank %u's second run differs from the first", what, r);
    free(first);
    free(fin.covered);
    job_free(&job);
}

static void check_all_gather(td_context *ctx, td_mesh *mesh, size_t count, bool in_place)
{
    ring_job job;
    job_init(&job, mesh, KIND_ALL_GATHER, count, 0x6A7 + count);
    job.in_place = in_place;
    run_ok(ctx, &job);
    check_ranks_identical(&job, "all_gather");
    for (uint32_t r = 0; r < job.n; r++)
        for (size_t i = 0; i < count; i++)
            if (job.results[0][(size_t)r * count + i] != input_value(job.salt, r, i))
                cr_assert_fail("all_gather N=%u count=%zu: element %zu of rank %u's part is %g, expected %g", job.n,
                               count, i, r, (double)job.results[0][(size_t)r * count + i],
                               (double)input_value(job.salt, r, i));
    job_free(&job);
}

static void check_broadcast(td_context *ctx, td_mesh *mesh, size_t count, uint32_t root, bool in_place)
{
    ring_job job;
    job_init(&job, mesh, KIND_BROADCAST, count, 0xB0 + count + root);
    job.root = root;
    job.in_place = in_place;
    run_ok(ctx, &job);
    check_ranks_identical(&job, "broadcast");
    for (size_t i = 0; i < count; i++)
        if (job.results[0][i] != input_value(job.salt, root, i))
            cr_assert_fail("broadcast N=%u count=%zu root=%u: element %zu is %g, expected %g", job.n, count, root, i,
                           (double)job.results[0][i], (double)input_value(job.salt, root, i));
    job_free(&job);
}

static td_mesh *cpu_mesh(td_context *ctx, uint32_t n)
{
    char spec[32];
    snprintf(spec, sizeof spec, "cpu:%u", n);
    return test_mesh(ctx, spec);
}

/* ---- allreduce sizes over N = 1..8 ---- */

static void check_allreduce_sizes(uint32_t n)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = cpu_mesh(ctx, n);
    const size_t slice = td_ring_slice_elements();
    const size_t counts[] = {0, 1, n > 1 ? n - 1 : 1, 7, 1009, slice + 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        check_allreduce(ctx, mesh, counts[i], false, 1.0f);
        check_allreduce(ctx, mesh, counts[i], true, 1.0f);
    }
    td_context_destroy(ctx);
}

Test(ring, allreduce_n1) { check_allreduce_sizes(1); }
Test(ring, allreduce_n2) { check_allreduce_sizes(2); }
Test(ring, allreduce_n3) { check_allreduce_sizes(3); }
Test(ring, allreduce_n4) { check_allreduce_sizes(4); }
Test(ring, allreduce_n5) { check_allreduce_sizes(5); }
Test(ring, allreduce_n6) { check_allreduce_sizes(6); }
Test(ring, allreduce_n7) { check_allreduce_sizes(7); }
Test(ring, allreduce_n8) { check_allreduce_sizes(8); }

Test(ring, slice_size_is_what_the_tests_assume)
{
    cr_assert_eq(td_ring_slice_elements(), 65536, "update the counts of these tests to the new slice size");
}

Test(ring, allreduce_several_slices_per_chunk)
{
    /* 3 slices per chunk on 2 ranks, a ragged last slice, finalize scaling. */
    td_context *ctx = test_context(20000);
    td_mesh *mesh = cpu_mesh(ctx, 2);
    check_allreduce(ctx, mesh, 2 * (2 * td_ring_slice_elements() + 12345), false, 0.5f);
    td_context_destroy(ctx);
}

Test(ring, allreduce_finalize_scales_each_element_once)
{
    td_context *ctx = test_context(20000);
    for (uint32_t n = 1; n <= 5; n += 2) {
        td_mesh *mesh = cpu_mesh(ctx, n);
        const size_t counts[] = {1, 2, 7, 1009};
        for (size_t i = 0; i < 4; i++) {
            check_allreduce(ctx, mesh, counts[i], false, 0.25f);
            check_allreduce(ctx, mesh, counts[i], true, -3.0f);
        }
        td_mesh_destroy(mesh);
    }
    td_context_destroy(ctx);
}

/* ---- the direct all-reduce against the ring proper ---- */

/* One all-reduce (with a scaling finalize; for KIND_ALLREDUCE_TOTAL also
 * the sum of squares as a total first) on the direct path or the ring
 * proper. Checks what does not depend on the path -- every rank bitwise
 * alike, every element finalized once by its owner, after the total --
 * and returns rank 0's result (malloc'd) and the total. */
static float *reduced_bits(td_context *ctx, td_mesh *mesh, collective_kind kind, size_t count, bool in_place,
                           bool direct, bool check_naive, double *total, const char *what)
{
    ring_job job;
    job_init(&job, mesh, kind, count, 0xD1 + count);
    job.in_place = in_place;
    td_ring_set_direct(job.ring, direct);
    cr_assert_eq(td_ring_direct(job.ring) != 0, direct, "%s: a ring of CPU devices can take either path", what);
    scale_finalize fin = {.ring = job.ring, .factor = 0.375f, .count = count, .want_total = kind == KIND_ALLREDUCE_TOTAL};
    fin.covered = calloc(count + 1, sizeof *fin.covered);
    for (uint32_t r = 0; r < MAX_RANKS; r++)
        fin.totals[r] = NAN;
    job.finalize = &fin;
    run_ok(ctx, &job);
    check_ranks_identical(&job, what);
    for (size_t i = 0; i < count; i++)
        if (fin.covered[i] != 1)
            cr_assert_fail("%s: element %zu was finalized %u times", what, i, fin.covered[i]);
    cr_assert_eq(atomic_load(&fin.wrong_rank), 0, "%s: a finalize or partial was given a rank that does not own its range",
                 what);
    cr_assert_eq(atomic_load(&fin.early), 0, "%s: a finalize ran before its rank had the total", what);
    *total = 0.0;
    if (kind == KIND_ALLREDUCE_TOTAL) {
        cr_assert_eq(atomic_load(&fin.total_calls), (int)job.n, "%s: %d totals for %u ranks", what,
                     atomic_load(&fin.total_calls), job.n);
        for (uint32_t r = 1; r < job.n; r++)
            cr_assert(memcmp(&fin.totals[r], &fin.totals[0], sizeof(double)) == 0,
                      "%s: rank %u's total %.17g is not bitwise rank 0's %.17g", what, r, fin.totals[r], fin.totals[0]);
        /* The total is the squares of the sums (before the finalize's scaling). */
        double want = 0.0;
        for (size_t i = 0; check_naive && i < count; i++) {
            double sum = 0.0;
            for (uint32_t r = 0; r < job.n; r++)
                sum += input_value(job.salt, r, i);
            want += sum * sum;
        }
        cr_assert(!check_naive || fabs(fin.totals[0] - want) <= 1e-5 * want + 1e-12, "%s: total %.17g, naive %.17g",
                  what, fin.totals[0], want);
        *total = fin.totals[0];
    }
    float *bits = malloc(count * sizeof(float) + 1);
    memcpy(bits, job.results[0], count * sizeof(float));
    free(fin.covered);
    job_free(&job);
    td_ring_set_direct(mesh_ring(mesh), true);
    return bits;
}

/* The direct path's bits are the ring's at 1, 2, 3 and 5 host-pool
 * threads: an all-reduce's result depends on the device count only.
 * Sizes not multiples of anything, one slice and several per chunk, in
 * place and not, with and without a total. */
static void check_direct_matches_ring(uint32_t n)
{
    /* 5 threads: cpu:2's streams get a team of two (pool helpers run them). */
    const uint32_t threads[] = {1, 2, 3, 5};
    td_context *ctx[4];
    td_mesh *mesh[4];
    for (int t = 0; t < 4; t++) {
        ctx[t] = test_context_threads(20000, threads[t]);
        mesh[t] = cpu_mesh(ctx[t], n);
        cr_assert(td_ring_direct(mesh_ring(mesh[t])), "cpu:%u: the ring of CPU devices of one process is direct", n);
    }
    const size_t slice = td_ring_slice_elements();
    const size_t counts[] = {1, (size_t)n + 1, 1009, slice + 3, (size_t)n * 2 * slice + 12345};
    const size_t n_counts = sizeof counts / sizeof counts[0];
    for (size_t ci = 0; ci < n_counts; ci++)
        for (int variant = 0; variant < 4; variant++) {
            const collective_kind kind = variant < 2 ? KIND_ALLREDUCE : KIND_ALLREDUCE_TOTAL;
            const bool in_place = variant % 2 == 1;
            /* Several slices per chunk: two of the variants suffice, and
             * under ThreadSanitizer (slowed down 20 times) up to cpu:3. */
            if (ci + 1 == n_counts && (variant == 1 || variant == 2 || (test_slowdown() > 1 && n > 3)))
                continue;
            char what[160];
            snprintf(what, sizeof what, "cpu:%u count=%zu%s%s, ring proper at 1 thread", n, counts[ci],
                     in_place ? " in place" : "", kind == KIND_ALLREDUCE_TOTAL ? " with a total" : "");
            double want_total;
            float *want = reduced_bits(ctx[0], mesh[0], kind, counts[ci], in_place, false, true, &want_total, what);
            for (int t = 0; t < 4; t++)
                for (int direct = 1; direct >= (t == 0 ? 0 : 1); direct--) {
                    snprintf(what, sizeof what, "cpu:%u count=%zu%s%s, %s at %u threads", n, counts[ci],
                             in_place ? " in place" : "", kind == KIND_ALLREDUCE_TOTAL ? " with a total" : "",
                             direct ? "direct" : "ring proper", threads[t]);
                    double total;
                    float *got =
                        reduced_bits(ctx[t], mesh[t], kind, counts[ci], in_place, direct, false, &total, what);
                    for (size_t i = 0; i < counts[ci]; i++)
                        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
                            cr_assert_fail("%s: element %zu is %.9g, the ring proper at 1 thread gave %.9g", what, i,
                                           (double)got[i], (double)want[i]);
                    cr_assert(memcmp(&total, &want_total, sizeof total) == 0,
                              "%s: total %.17g, the ring proper at 1 thread gave %.17g", what, total, want_total);
                    free(got);
                }
            free(want);
        }
    for (int t = 0; t < 4; t++)
        td_context_destroy(ctx[t]);
}

Test(ring_direct, matches_ring_bitwise_n1) { check_direct_matches_ring(1); }
Test(ring_direct, matches_ring_bitwise_n2) { check_direct_matches_ring(2); }
Test(ring_direct, matches_ring_bitwise_n3) { check_direct_matches_ring(3); }
Test(ring_direct, matches_ring_bitwise_n4) { check_direct_matches_ring(4); }
Test(ring_direct, matches_ring_bitwise_n5) { check_direct_matches_ring(5); }
Test(ring_direct, matches_ring_bitwise_n8) { check_direct_matches_ring(8); }

/* 16 MiB of floats: the size of a real gradient bucket. */
static void check_allreduce_16mib(uint32_t n)
{
    td_context *ctx = test_context(60000);
    td_mesh *mesh = cpu_mesh(ctx, n);
    check_allreduce(ctx, mesh, (size_t)4 << 20, true, 1.0f);
    td_context_destroy(ctx);
}

Test(ring_large, allreduce_16mib_n2, .timeout = 120) { check_allreduce_16mib(2); }
Test(ring_large, allreduce_16mib_n4, .timeout = 120) { check_allreduce_16mib(4); }

/* ---- all_gather and broadcast ---- */

Test(ring, all_gather_awkward_sizes)
{
    td_context *ctx = test_context(20000);
    for (uint32_t n = 1; n <= 8; n++) {
        td_mesh *mesh = cpu_mesh(ctx, n);
        const size_t counts[] = {0, 1, 7, 1009, td_ring_slice_elements() / 4 + 1};
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
            check_all_gather(ctx, mesh, counts[i], n % 2 == 0);
        td_mesh_destroy(mesh);
    }
    td_context_destroy(ctx);
}

Test(ring, broadcast_awkward_sizes_every_root)
{
    td_context *ctx = test_context(20000);
    for (uint32_t n = 1; n <= 8; n++) {
        td_mesh *mesh = cpu_mesh(ctx, n);
        const size_t counts[] = {0, 1, 7, 1009, td_ring_slice_elements() + 1};
        for (uint32_t root = 0; root < n; root++)
            for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
                check_broadcast(ctx, mesh, counts[i], root, (root + i) % 2 == 0);
        td_mesh_destroy(mesh);
    }
    td_context_destroy(ctx);
}

Test(ring, collectives_back_to_back_in_one_job_sequence)
{
    /* Alternating kinds on one mesh: per-rank op counters stay in step. */
    td_context *ctx = test_context(20000);
    td_mesh *mesh = cpu_mesh(ctx, 3);
    for (int i = 0; i < 5; i++) {
        check_allreduce(ctx, mesh, 10 + (size_t)i, i % 2, 1.0f);
        check_all_gather(ctx, mesh, 3 + (size_t)i, false);
        check_broadcast(ctx, mesh, 5, (uint32_t)i % 3, false);
    }
    td_context_destroy(ctx);
}

/* ---- argument checks ---- */

Test(ring, rank_and_root_out_of_range_are_invalid_arguments)
{
    td_context *ctx = test_context(0);
    td_mesh *mesh = cpu_mesh(ctx, 2);
    td_ring *ring = mesh_ring(mesh);
    cr_assert_eq(td_ring_allreduce(ring, 2, NULL, 0, NULL, 0, 1, NULL, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_ring_all_gather(ring, 7, NULL, 0, NULL, 0, 1), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_ring_broadcast(ring, 5, 0, NULL, 0, NULL, 0, 1), TD_ERR_INVALID_ARGUMENT);
    cr_assert_eq(td_ring_broadcast(ring, 0, 2, NULL, 0, NULL, 0, 1), TD_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(td_last_error(ctx), "root") != NULL, "%s", td_last_error(ctx));
    cr_assert_eq(td_ring_failed(ring), 0, "argument errors do not fail the ring");
    td_context_destroy(ctx);
}

/* ---- failures ---- */

static void check_aborting_rank(bool direct)
{
    const uint32_t timeout_ms = 2000;
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = cpu_mesh(ctx, 4);
    td_ring_set_direct(mesh_ring(mesh), direct);
    ring_job job;
    job_init(&job, mesh, KIND_ALLREDUCE, 100000, 1);
    job.odd_rank = 1;
    job.behaviour = RANK_ABORTS;
    double start = now_seconds();
    td_status s = td_mesh_run(mesh, rank_job, &job);
    double elapsed = now_seconds() - start;
    cr_assert_eq(s, TD_ERR_BACKEND, "the job reports the cause, got %s", td_status_name(s));
    cr_assert_eq(job.status[1], TD_ERR_BACKEND);
    for (uint32_t r = 0; r < 4; r++)
        if (r != 1)
            cr_assert_eq(job.status[r], TD_ERR_ABORTED, "rank %u: %s", r, td_status_name(job.status[r]));
    cr_assert_lt(elapsed, 0.25 * timeout_ms / 1000.0, "peers took %.3f s to notice the abort", elapsed);
    cr_assert_neq(td_ring_failed(mesh_ring(mesh)), 0);

    /* Until reset, every collective refuses at once. */
    ring_job again;
    job_init(&again, mesh, KIND_ALLREDUCE, 10, 2);
    cr_assert_eq(td_mesh_run(mesh, rank_job, &again), TD_ERR_ABORTED);
    job_free(&again);

    td_ring_reset(mesh_ring(mesh));
    cr_assert_eq(td_ring_failed(mesh_ring(mesh)), 0);
    check_allreduce(ctx, mesh, 1009, false, 1.0f);
    check_broadcast(ctx, mesh, 33, 3, false);
    job_free(&job);
    td_context_destroy(ctx);
}

Test(ring, an_aborting_rank_stops_every_peer_quickly) { check_aborting_rank(true); }
Test(ring, an_aborting_rank_stops_every_peer_quickly_ring_proper) { check_aborting_rank(false); }

static void check_never_arrives(uint32_t n, uint32_t missing, collective_kind kind, bool check_message, bool direct)
{
    const uint32_t timeout_ms = 300;
    td_context *ctx = test_context(timeout_ms);
    td_mesh *mesh = cpu_mesh(ctx, n);
    td_ring_set_direct(mesh_ring(mesh), direct);
    ring_job job;
    job_init(&job, mesh, kind, 5000, 3);
    job.odd_rank = missing;
    job.behaviour = RANK_NEVER_ARRIVES;
    scale_finalize fin = {.ring = job.ring, .factor = 1.0f}; /* count 0: no coverage kept */
    if (kind == KIND_ALLREDUCE_TOTAL)
        job.finalize = &fin;
    double start = now_seconds();
    td_status s = td_mesh_run(mesh, rank_job, &job);
    double elapsed = now_seconds() - start;
    cr_assert_eq(s, TD_ERR_TIMEOUT, "N=%u missing %u: the job returned %s (%s)", n, missing, td_status_name(s),
                 td_last_error(ctx));
    int timeouts = 0;
    for (uint32_t r = 0; r < n; r++) {
        if (r == missing)
            continue;
        /* In a broadcast the ranks from the root up to the missing one's
         * predecessor get their data and are released by their successors:
         * they may succeed, with the right values. Every other rank, and
         * every rank of an allreduce or all_gather, depends on the missing
         * one and must fail. */
        bool upstream = kind == KIND_BROADCAST && (r + n - job.root) % n < (missing + n - job.root) % n;
        if (upstream && job.status[r] == TD_OK) {
            for (size_t i = 0; i < job.count; i++)
                cr_assert_eq(job.results[r][i], input_value(job.salt, job.root, i), "rank %u element %zu", r, i);
            continue;
        }
        cr_assert(job.status[r] == TD_ERR_TIMEOUT || job.status[r] == TD_ERR_ABORTED, "rank %u: %s", r,
                  td_status_name(job.status[r]));
        timeouts += job.status[r] == TD_ERR_TIMEOUT;
        cr_assert_lt(job.seconds[r], 2.5 * timeout_ms / 1000.0, "rank %u waited %.3f s", r, job.seconds[r]);
    }
    cr_assert_geq(timeouts, 1, "someone must report the timeout itself");
    cr_assert_geq(elapsed, 0.9 * timeout_ms / 1000.0, "gave up after %.3f s, before the timeout", elapsed);
    cr_assert_lt(elapsed, 3.0 * timeout_ms / 1000.0, "took %.3f s", elapsed);
    char message[2048];
    snprintf(message, sizeof message, "%s", td_last_error(ctx));

    /* The raw layer does not reset itself: the caller does, between jobs. */
    td_ring_reset(mesh_ring(mesh));
    check_allreduce(ctx, mesh, 777, false, 1.0f);
    check_all_gather(ctx, mesh, 5, false);
    check_broadcast(ctx, mesh, 9, n - 1, false);
    job_free(&job);
    td_context_destroy(ctx);
    if (check_message) {
        /* The message must be the ring's own ("ring rank R waited T ms for
         * rank P (needed op ..., rank P is at ...)"), which says who waited
         * for whom. Which peer's deadline fires first is a race, so only the
         * form is checked. */
        cr_assert(strstr(message, "ring rank") != NULL && strstr(message, "waited") != NULL,
                  "the timeout message is not the ring's account of who waited for whom: %s", message);
    }
}

Test(ring, a_rank_that_never_arrives_times_out_allreduce) { check_never_arrives(4, 1, KIND_ALLREDUCE, false, true); }
Test(ring, a_rank_that_never_arrives_times_out_allreduce_total)
{
    check_never_arrives(5, 3, KIND_ALLREDUCE_TOTAL, false, true);
}
Test(ring, a_rank_that_never_arrives_times_out_ring_proper)
{
    check_never_arrives(4, 1, KIND_ALLREDUCE, true, false);
}
Test(ring, a_rank_that_never_arrives_times_out_two_ranks) { check_never_arrives(2, 0, KIND_ALLREDUCE, false, true); }
Test(ring, a_rank_that_never_arrives_times_out_all_gather) { check_never_arrives(3, 2, KIND_ALL_GATHER, false, true); }
Test(ring, a_rank_that_never_arrives_times_out_broadcast) { check_never_arrives(4, 2, KIND_BROADCAST, false, true); }

/* td_mesh_run must pass on the ring's message, not replace it with its own
 * "0 of N workers did not finish" (which is also false: all finished). */
Test(ring, timeout_message_is_the_rings_own) { check_never_arrives(4, 1, KIND_ALLREDUCE, true, true); }

/* ---- on the devices of TD_TEST_DEVICES ---- */

Test(ring_devices, collectives_on_test_devices, .timeout = 300)
{
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh_or_skip(ctx, test_devices_spec("cpu:3"));
    uint32_t n = test_mesh_size(mesh);
    const size_t counts[] = {1, n > 1 ? n - 1 : 1, 7, 1009, td_ring_slice_elements() + 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        check_allreduce(ctx, mesh, counts[i], false, 1.0f);
        check_allreduce(ctx, mesh, counts[i], true, 0.5f);
        check_all_gather(ctx, mesh, counts[i], i % 2 == 0);
        check_broadcast(ctx, mesh, counts[i], (uint32_t)i % n, i % 2 == 1);
    }
    td_context_destroy(ctx);
}

Test(ring_devices, zero_elements_on_test_devices)
{
    /* An empty collective is a no-op on every backend (an empty tensor is
     * valid), also where the ring stages through host memory. */
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh_or_skip(ctx, test_devices_spec("cpu:3"));
    check_allreduce(ctx, mesh, 0, false, 1.0f);
    check_allreduce(ctx, mesh, 0, true, 0.5f);
    check_all_gather(ctx, mesh, 0, false);
    check_broadcast(ctx, mesh, 0, 0, false);
    td_context_destroy(ctx);
}

Test(ring_devices, abort_on_test_devices)
{
    td_context *ctx = test_context(2000);
    td_mesh *mesh = test_mesh_or_skip(ctx, test_devices_spec("cpu:3"));
    uint32_t n = test_mesh_size(mesh);
    if (n < 2) {
        td_context_destroy(ctx);
        cr_skip_test("a failure needs two ranks");
    }
    ring_job job;
    job_init(&job, mesh, KIND_ALLREDUCE, 50000, 1);
    job.odd_rank = n - 1;
    job.behaviour = RANK_ABORTS;
    double start = now_seconds();
    cr_assert_eq(td_mesh_run(mesh, rank_job, &job), TD_ERR_BACKEND);
    cr_assert_lt(now_seconds() - start, 1.0);
    for (uint32_t r = 0; r + 1 < n; r++)
        cr_assert_eq(job.status[r], TD_ERR_ABORTED, "rank %u: %s", r, td_status_name(job.status[r]));
    td_ring_reset(mesh_ring(mesh));
    check_allreduce(ctx, mesh, 1009, false, 1.0f);
    job_free(&job);
    td_context_destroy(ctx);
}

/* A rank that waited long for a late peer (a big step's compute) sleeps at
 * once in its next wait when ranks outnumber the cores (spinning would
 * take turns from the ranks still computing); with a core per rank the
 * spin stays, the peer being on a core of its own. */
static void check_spins_after_a_late_rank(uint32_t n, bool outnumbered)
{
    td_context *ctx = test_context_threads(20000, 0);
    char spec[16];
    snprintf(spec, sizeof spec, "cpu:%u", n);
    td_mesh *mesh = test_mesh(ctx, spec);
    td_ring *ring = mesh_ring(mesh);
    /* What is checked is the rank's own record of its waits: a yield that
     * lost a time slice to another process (a busy machine) stops every
     * spin for a while, which is not what this test is about. */
    ring->spin_quiet_until = 0;
    for (uint32_t r = 0; r < n; r++)
        cr_assert_gt(td_ring_spins(ring, r), 0, "rank %u spins before any wait", r);
    ring_job job;
    job_init(&job, mesh, KIND_ALLREDUCE, 1, 7);
    job.odd_rank = n - 1;
    job.behaviour = RANK_LATE;
    run_ok(ctx, &job);
    ring->spin_quiet_until = 0;
    for (uint32_t r = 0; r + 1 < n; r++)
        cr_assert_eq(td_ring_spins(ring, r) == 0, outnumbered, "cpu:%u on %u cores, rank %u after a 20 ms wait: %u spins",
                     n, td_platform_cpu_count(), r, td_ring_spins(ring, r));
    job_free(&job);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

Test(ring, an_outnumbered_rank_that_waited_long_sleeps_at_once_next_time)
{
    const uint32_t n = td_platform_cpu_count() + 1;
    if (n > MAX_RANKS)
        cr_skip_test("%u cores: a mesh outnumbering them exceeds the test's %u ranks", n - 1, MAX_RANKS);
    check_spins_after_a_late_rank(n, true);
}

Test(ring, a_rank_with_a_core_of_its_own_keeps_spinning_after_a_long_wait)
{
    if (td_platform_cpu_count() < 2)
        cr_skip_test("one core: two ranks outnumber it");
    check_spins_after_a_late_rank(2, false);
}

/* A yield that lost a time slice (another process busy on the core)
 * stops every rank's spinning for a while: yielding again would lose a
 * slice each time (4-15 ms linreg steps with two busy loops running). */
Test(ring, a_slow_yield_stops_the_spinning_for_a_while)
{
    td_context *ctx = test_context_threads(20000, 0);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_ring *ring = mesh_ring(mesh);
    ring->spin_quiet_until = 0;
    cr_assert_gt(td_ring_spins(ring, 0), 0);
    ring->spin_quiet_until = td_platform_now_ns() + 60000000000ull; /* what a slow yield sets, longer */
    cr_assert_eq(td_ring_spins(ring, 0), 0);
    cr_assert_eq(td_ring_spins(ring, 1), 0);
    ring->spin_quiet_until = td_platform_now_ns() - 1;
    cr_assert_gt(td_ring_spins(ring, 1), 0, "the quiet time is over");
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}
