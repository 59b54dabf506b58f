/* The all-reduce on a bf16 wire (td_ring_wire): each partial sum rounded to
 * bfloat16 where it passes to the next rank, float additions, the complete
 * sum rounded before the finalize, and every rank ending with the owner's
 * bits. Checked against a naive host reference that runs the documented
 * rule element by element,
 *     s = r(x[c]); s = r(x[c+j] + s) for j = 1 .. N-1   (r = td_bf16_round),
 * on both paths (the direct all-reduce and the ring proper), at awkward
 * sizes, device counts and host-pool thread counts, with a total and in
 * windows (the trainer's buckets), and on the test devices (the backend
 * suite runs ring_wire_devices on OpenCL, Vulkan and mixed meshes). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_kernel.h"
#include "td_mesh_internal.h"
#include "td_ring.h"
#include "td_ring_state.h"

#define MAX_RANKS 8
#define IN_OFFSET 3

typedef enum { WHOLE, WITH_TOTAL, IN_WINDOWS, IN_WINDOWS_PREFETCHED } wire_kind;

typedef struct wire_job {
    td_mesh *mesh;
    td_ring *ring;
    uint32_t n;
    size_t count;
    uint64_t salt;
    wire_kind kind;
    td_ring_wire wire;
    size_t windows[4]; /* IN_WINDOWS: bounds of three windows tiling [0, count) */
    float factor;      /* the finalize scales by it */
    bool odd_ranks_send_floats; /* ring proper: odd ranks without 2-byte wire memory */
    bool sent_wire[MAX_RANKS];  /* what each rank's op sent through: 2-byte values or floats */
    double totals[MAX_RANKS];
    float *results[MAX_RANKS];
    td_status status[MAX_RANKS];
} wire_job;

/* With specials, every 101st element of one rank (a different rank from
 * one such element to the next, never two at one element, so no NaN meets
 * another and which payload wins never matters) is a signalling NaN, a
 * NaN with a payload, an infinity or FLT_MAX (which rounds to infinity). */
static bool with_specials;
static uint32_t specials_ranks = 1;

/* Rank r's input element i: a pure function of (salt, r, i), values of
 * mixed magnitudes so that rounding a sum to bfloat16 matters. */
static float input_value(uint64_t salt, uint32_t rank, size_t i)
{
    if (with_specials && i % 101 == 37 && (i / 101) % specials_ranks == rank) {
        static const uint32_t special_bits[] = {0x7f800001u, 0xffc12345u, 0x7f800000u, 0xff800000u, 0x7f7fffffu};
        const uint32_t bits = special_bits[(i / 101 / specials_ranks) % 5];
        float v;
        memcpy(&v, &bits, sizeof v);
        return v;
    }
    test_rng rng = {salt ^ ((uint64_t)rank << 40) ^ (uint64_t)i * 0x9E3779B97F4A7C15ull};
    float v = test_rng_uniform(&rng, -1.0f, 1.0f);
    return (i % 3 == 0) ? v * 1e-3f : v;
}

/* The documented rule for element i (before the finalize). */
static float reference_sum(const wire_job *job, size_t i)
{
    const uint32_t n = job->n;
    if (n == 1 || job->wire == TD_RING_WIRE_FP32) {
        /* fp32: the ring's association, nothing rounded. */
        uint32_t c = 0;
        while (c + 1 < n && (size_t)(((unsigned __int128)job->count * (c + 1)) / n) <= i)
            c++;
        float s = input_value(job->salt, c, i);
        for (uint32_t j = 1; j < n; j++)
            s = input_value(job->salt, (c + j) % n, i) + s;
        return s;
    }
    uint32_t c = 0; /* the chunk of element i: [count*c/n, count*(c+1)/n) */
    while (c + 1 < n && (size_t)(((unsigned __int128)job->count * (c + 1)) / n) <= i)
        c++;
    float s = td_bf16_round(input_value(job->salt, c, i));
    for (uint32_t j = 1; j < n; j++)
        s = td_bf16_round(input_value(job->salt, (c + j) % n, i) + s);
    return s;
}

static void scale(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    const wire_job *job = user;
    (void)rank, (void)offset;
    for (size_t i = 0; i < count; i++)
        data[i] *= job->factor;
}

static double squares(void *user, uint32_t rank, float *data, size_t offset, size_t count)
{
    (void)user, (void)rank, (void)offset;
    double sum = 0.0;
    for (size_t i = 0; i < count; i++)
        sum += (double)data[i] * data[i];
    return sum;
}

static void keep_total(void *user, uint32_t rank, double total)
{
    wire_job *job = user;
    job->totals[rank] = total;
}

static td_status finish(td_mesh_device *md)
{
    uint64_t ticket;
    td_status s = md->ops->submit(md->dev, &ticket);
    return s == TD_OK ? md->ops->wait(md->dev, ticket, 20000) : s;
}

static td_status rank_job(void *arg, uint32_t r)
{
    wire_job *job = arg;
    td_mesh_device *md = &job->mesh->devices[r];
    const td_backend_ops *ops = md->ops;
    td_buffer *buf = NULL;
    float *host = malloc((job->count + 1) * sizeof(float));
    td_status s = host ? td_ring_reserve(job->ring, r, job->count * sizeof(float)) : TD_ERR_OUT_OF_MEMORY;
    if (s == TD_OK && job->odd_ranks_send_floats && r % 2 == 1)
        job->ring->ranks[r].wire_elems = 0; /* as a rank that reserved none: it sends floats */
    if (s == TD_OK)
        s = ops->buffer_create(md->dev, (IN_OFFSET + job->count + 1) * sizeof(float), &buf);
    for (size_t i = 0; s == TD_OK && i < job->count; i++)
        host[i] = input_value(job->salt, r, i);
    if (s == TD_OK && job->count)
        s = ops->write(md->dev, buf, IN_OFFSET * sizeof(float), host, job->count * sizeof(float));
    if (s == TD_OK)
        s = finish(md);
    if (s == TD_OK) {
        switch (job->kind) {
        case WHOLE:
            s = td_ring_allreduce_consume(job->ring, r, buf, IN_OFFSET, buf, IN_OFFSET, job->count, scale, job,
                                          job->wire);
            break;
        case WITH_TOTAL:
            s = td_ring_allreduce_consume_total(job->ring, r, buf, IN_OFFSET, buf, IN_OFFSET, job->count, squares,
                                                keep_total, scale, job, job->wire);
            break;
        case IN_WINDOWS:
            for (int w = 0; w < 3 && s == TD_OK; w++)
                s = td_ring_allreduce_consume_window(job->ring, r, buf, IN_OFFSET, buf, IN_OFFSET, job->count,
                                                     job->windows[w], job->windows[w + 1], 0, scale, job, job->wire);
            break;
        case IN_WINDOWS_PREFETCHED:
            /* As the trainer's buckets on a GPU: each window's copy to the
             * host enqueued first, the window run on its ticket. */
            for (int w = 0; w < 3 && s == TD_OK; w++) {
                uint64_t ticket = 0;
                s = td_ring_window_prefetch(job->ring, r, buf, IN_OFFSET, job->count, job->windows[w],
                                            job->windows[w + 1], &ticket);
                if (s == TD_OK && ops->buffer_host_pointer(md->dev, buf) && ticket != 0)
                    s = TD_ERR_STATE; /* host memory needs no copy: a ticket fails the job (TEST_OK) */
                if (s == TD_OK)
                    s = td_ring_allreduce_consume_window(job->ring, r, buf, IN_OFFSET, buf, IN_OFFSET, job->count,
                                                         job->windows[w], job->windows[w + 1], ticket, scale, job,
                                                         job->wire);
            }
            break;
        }
    } else {
        td_ring_abort(job->ring, s);
    }
    job->sent_wire[r] = job->ring->ranks[r].sends_wire;
    if (s == TD_OK && job->count)
        s = ops->read(md->dev, buf, IN_OFFSET * sizeof(float), job->results[r], job->count * sizeof(float));
    if (s == TD_OK)
        s = finish(md);
    job->status[r] = s;
    if (buf)
        ops->buffer_destroy(md->dev, buf);
    free(host);
    return s;
}

/* Runs one all-reduce and checks: every rank bitwise rank 0, and rank 0
 * bitwise the reference (the finalize's scaling applied to it). */
static wire_job last_job; /* the last check_wire's, for checks of how it ran */
static bool next_odd_ranks_send_floats;

static void check_wire(td_context *ctx, td_mesh *mesh, size_t count, wire_kind kind, td_ring_wire wire, bool direct,
                       const char *label)
{
    wire_job job;
    memset(&job, 0, sizeof job);
    job.odd_ranks_send_floats = next_odd_ranks_send_floats;
    job.mesh = mesh;
    cr_assert_eq(td_mesh_ring(mesh, &job.ring), TD_OK);
    job.n = test_mesh_size(mesh);
    cr_assert_leq(job.n, MAX_RANKS);
    job.count = count;
    job.salt = 0xB16 + count * 7 + job.n;
    job.kind = kind;
    job.wire = wire;
    job.factor = 0.25f; /* exact: the finalized values are the sums' bits shifted */
    job.windows[0] = 0;
    job.windows[1] = count / 3;
    job.windows[2] = count - count / 5;
    job.windows[3] = count;
    for (uint32_t r = 0; r < job.n; r++) {
        job.results[r] = malloc((count + 1) * sizeof(float));
        job.totals[r] = NAN;
    }
    td_ring_set_direct(job.ring, direct);
    char what[160];
    snprintf(what, sizeof what, "%s: N=%u count=%zu %s wire %s, %s", label, job.n, count,
             kind == WHOLE ? "whole" : kind == WITH_TOTAL ? "with a total" : kind == IN_WINDOWS ? "in windows" : "in prefetched windows",
             wire == TD_RING_WIRE_BF16 ? "bf16" : "fp32", td_ring_direct(job.ring) ? "direct" : "ring proper");
    TEST_OK(ctx, td_mesh_run(mesh, rank_job, &job));
    for (uint32_t r = 1; r < job.n; r++)
        cr_assert(memcmp(job.results[r], job.results[0], count * sizeof(float)) == 0,
                  "%s: rank %u's result is not bitwise rank 0's", what, r);
    double want_total = 0.0;
    for (size_t i = 0; i < count; i++) {
        const float sum = reference_sum(&job, i);
        const float want = sum * job.factor;
        want_total += (double)sum * sum;
        uint32_t got_bits, want_bits;
        memcpy(&got_bits, &job.results[0][i], sizeof got_bits);
        memcpy(&want_bits, &want, sizeof want_bits);
        cr_assert_eq(got_bits, want_bits, "%s: element %zu is %.9g (0x%08x), the rule gives %.9g (0x%08x)", what, i,
                     (double)job.results[0][i], got_bits, (double)want, want_bits);
    }
    if (kind == WITH_TOTAL) {
        for (uint32_t r = 1; r < job.n; r++)
            cr_assert(memcmp(&job.totals[r], &job.totals[0], sizeof(double)) == 0, "%s: rank %u's total differs",
                      what, r);
        cr_assert(fabs(job.totals[0] - want_total) <= 1e-9 * want_total + 1e-30,
                  "%s: total %.17g, the rounded sums' squares give %.17g", what, job.totals[0], want_total);
    }
    for (uint32_t r = 0; r < job.n; r++)
        free(job.results[r]);
    td_ring_set_direct(job.ring, true);
    last_job = job;
}

/* One slice is 64 Ki floats: sizes below, at and across slice and chunk
 * edges. */
static const size_t sizes[] = {1, 7, 1000, 65536 * 2 + 3, 65536 * 5 + 17};

static void check_cpu(uint32_t n)
{
    const uint32_t threads[] = {1, 3};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        td_context *ctx = test_context_threads(20000, threads[t]);
        char spec[16];
        snprintf(spec, sizeof spec, "cpu:%u", n);
        td_mesh *mesh = test_mesh(ctx, spec);
        char label[32];
        snprintf(label, sizeof label, "%u thread(s)", threads[t]);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (int direct = 0; direct < 2; direct++) {
                check_wire(ctx, mesh, sizes[k], WHOLE, TD_RING_WIRE_BF16, direct, label);
                check_wire(ctx, mesh, sizes[k], WITH_TOTAL, TD_RING_WIRE_BF16, direct, label);
            }
        check_wire(ctx, mesh, sizes[4], IN_WINDOWS, TD_RING_WIRE_BF16, true, label);
        check_wire(ctx, mesh, sizes[4], IN_WINDOWS, TD_RING_WIRE_BF16, false, label); /* the ring proper's */
        check_wire(ctx, mesh, sizes[3], IN_WINDOWS_PREFETCHED, TD_RING_WIRE_FP32, false, label);
        td_mesh_destroy(mesh);
        td_context_destroy(ctx);
    }
}

Test(ring_wire, bf16_follows_the_rule_n1) { check_cpu(1); }
Test(ring_wire, bf16_follows_the_rule_n2) { check_cpu(2); }
Test(ring_wire, bf16_follows_the_rule_n3) { check_cpu(3); }
Test(ring_wire, bf16_follows_the_rule_n5) { check_cpu(5); }
Test(ring_wire, bf16_follows_the_rule_n8) { check_cpu(8); }

/* NaNs stay NaNs (quieted, their payload's high bits kept: td_bf16_round)
 * and infinities infinities on both paths, and the largest float rounds to
 * infinity, as the rule says. */
Test(ring_wire, bf16_keeps_nans_and_infinities)
{
    with_specials = true;
    const uint32_t counts[] = {1, 3, 4};
    for (size_t m = 0; m < sizeof counts / sizeof counts[0]; m++) {
        td_context *ctx = test_context_threads(20000, 2);
        char spec[16];
        snprintf(spec, sizeof spec, "cpu:%u", counts[m]);
        td_mesh *mesh = test_mesh(ctx, spec);
        specials_ranks = counts[m];
        const size_t special_sizes[] = {40, 1000, 65536 * 2 + 3};
        for (size_t k = 0; k < sizeof special_sizes / sizeof special_sizes[0]; k++)
            for (int direct = 0; direct < 2; direct++)
                check_wire(ctx, mesh, special_sizes[k], WHOLE, TD_RING_WIRE_BF16, direct, "specials");
        td_mesh_destroy(mesh);
        td_context_destroy(ctx);
    }
    with_specials = false;
}

/* The rule is not the fp32 sum: at N = 3 most sums change, and each one
 * is a bfloat16 value (its low 16 bits zero); fp32 on the same mesh still
 * gives the plain sums. A ring that forgot to round fails here and above. */
Test(ring_wire, bf16_rounds_and_fp32_does_not)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = test_mesh(ctx, "cpu:3");
    check_wire(ctx, mesh, 4099, WHOLE, TD_RING_WIRE_FP32, true, "fp32");
    check_wire(ctx, mesh, 4099, WHOLE, TD_RING_WIRE_FP32, false, "fp32");
    wire_job job;
    memset(&job, 0, sizeof job);
    job.mesh = mesh;
    cr_assert_eq(td_mesh_ring(mesh, &job.ring), TD_OK);
    job.n = 3;
    job.count = 4099;
    job.salt = 77;
    job.kind = WHOLE;
    job.wire = TD_RING_WIRE_BF16;
    job.factor = 1.0f;
    for (uint32_t r = 0; r < job.n; r++)
        job.results[r] = malloc((job.count + 1) * sizeof(float));
    TEST_OK(ctx, td_mesh_run(mesh, rank_job, &job));
    size_t changed = 0;
    for (size_t i = 0; i < job.count; i++) {
        uint32_t bits;
        memcpy(&bits, &job.results[0][i], sizeof bits);
        cr_assert_eq(bits & 0xffffu, 0u, "element %zu = %.9g is not a bfloat16 value", i, (double)job.results[0][i]);
        float plain = input_value(job.salt, 0, i) + input_value(job.salt, 1, i) + input_value(job.salt, 2, i);
        changed += job.results[0][i] != plain;
    }
    cr_assert_gt(changed, job.count / 2, "only %zu of %zu sums differ from fp32's", changed, job.count);
    for (uint32_t r = 0; r < job.n; r++)
        free(job.results[r]);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

/* A window's copy to the host: a bad window or rank is refused with its
 * values, a missing ticket too; where nothing needs copying (the direct
 * ring's host memory) the ticket is 0. */
Test(ring_wire, a_window_prefetch_checks_its_arguments)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_ring *ring = NULL;
    cr_assert_eq(td_mesh_ring(mesh, &ring), TD_OK);
    uint64_t ticket = 99;
    cr_assert_eq(td_ring_window_prefetch(ring, 0, NULL, 0, 10, 0, 4, NULL), TD_ERR_INVALID_ARGUMENT);
    cr_assert(test_message_mentions(ctx, "ticket is NULL"), "message: %s", td_last_error(ctx));
    cr_assert_eq(td_ring_window_prefetch(ring, 0, NULL, 0, 10, 6, 4, &ticket), TD_ERR_INVALID_ARGUMENT);
    cr_assert(test_message_mentions(ctx, "window [6, 4) of a 10-element"), "message: %s", td_last_error(ctx));
    cr_assert_eq(ticket, 0u);
    cr_assert_eq(td_ring_window_prefetch(ring, 0, NULL, 0, 10, 0, 11, &ticket), TD_ERR_INVALID_ARGUMENT);
    cr_assert(test_message_mentions(ctx, "window [0, 11)"), "message: %s", td_last_error(ctx));
    cr_assert_eq(td_ring_window_prefetch(ring, 2, NULL, 0, 10, 0, 4, &ticket), TD_ERR_INVALID_ARGUMENT);
    cr_assert(test_message_mentions(ctx, "rank 2 out of range (2 ranks)"), "message: %s", td_last_error(ctx));
    ticket = 99;
    cr_assert_eq(td_ring_window_prefetch(ring, 1, NULL, 0, 10, 0, 4, &ticket), TD_OK);
    cr_assert_eq(ticket, 0u, "a direct ring copies nothing, ticket %llu", (unsigned long long)ticket);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

Test(ring_wire, an_unknown_wire_is_refused_with_its_value)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    td_ring *ring = NULL;
    cr_assert_eq(td_mesh_ring(mesh, &ring), TD_OK);
    cr_assert_eq(td_ring_allreduce_consume(ring, 0, NULL, 0, NULL, 0, 1, NULL, NULL, (td_ring_wire)7),
                 TD_ERR_INVALID_ARGUMENT);
    cr_assert(test_message_mentions(ctx, "wire 7"), "message: %s", td_last_error(ctx));
    cr_assert_eq(td_ring_allreduce_consume_window(ring, 0, NULL, 0, NULL, 0, 4, 0, 2, 0, NULL, NULL, (td_ring_wire)-1),
                 TD_ERR_INVALID_ARGUMENT);
    cr_assert(test_message_mentions(ctx, "TD_RING_WIRE_BF16"), "message: %s", td_last_error(ctx));
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

/* GPUs and mixed meshes take the ring proper through staging: the same
 * rule, the same bits on every device (the backend suite sets the
 * devices; here a cpu:3 stand-in). */
Test(ring_wire_devices, bf16_on_test_devices, .timeout = 300)
{
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh_or_skip(ctx, test_devices_spec("cpu:3"));
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        check_wire(ctx, mesh, sizes[k], WHOLE, TD_RING_WIRE_BF16, true, "test devices");
        check_wire(ctx, mesh, sizes[k], WITH_TOTAL, TD_RING_WIRE_BF16, true, "test devices");
        check_wire(ctx, mesh, sizes[k], IN_WINDOWS_PREFETCHED, TD_RING_WIRE_BF16, true, "test devices");
        check_wire(ctx, mesh, sizes[k], IN_WINDOWS_PREFETCHED, TD_RING_WIRE_FP32, true, "test devices");
    }
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

/* A mesh of OpenCL (PoCL), Vulkan (lavapipe) and a CPU device, when this
 * machine has them. */
Test(ring_wire, bf16_on_a_mixed_mesh, .timeout = 300)
{
    td_context *ctx = test_context(30000);
    td_mesh *mesh = test_mesh_or_skip(ctx, "opencl:0,vulkan:0,cpu:1");
    check_wire(ctx, mesh, sizes[3], WHOLE, TD_RING_WIRE_BF16, true, "mixed");
    check_wire(ctx, mesh, 1000, WITH_TOTAL, TD_RING_WIRE_BF16, true, "mixed");
    check_wire(ctx, mesh, sizes[3], IN_WINDOWS_PREFETCHED, TD_RING_WIRE_BF16, true, "mixed");
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}

/* The ring's branch-free rounding is td_bf16_round, bit for bit: every
 * 4099th float pattern (both signs, every exponent) plus the edges (ties,
 * NaNs, the largest finite, subnormals, both zeros). */
static void check_rounding(uint32_t bits)
{
    float x, a, b;
    memcpy(&x, &bits, sizeof x);
    a = td_ring_bf16(x);
    b = td_bf16_round(x);
    uint32_t ab, bb;
    memcpy(&ab, &a, sizeof ab);
    memcpy(&bb, &b, sizeof bb);
    cr_assert_eq(ab, bb, "0x%08x: the ring rounds to 0x%08x, td_bf16_round to 0x%08x", bits, ab, bb);
}

Test(ring_wire, the_rings_rounding_is_td_bf16_round)
{
    const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00008000u, 0x00018000u, 0x00007fffu, 0x3f808000u,
                              0x3f818000u, 0x7f7fffffu, 0x7f7f8000u, 0xff7f8000u, 0x7f800000u, 0xff800000u,
                              0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu, 0x00000001u, 0x807fffffu};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_rounding(edges[i]);
    for (uint64_t k = 0; k < (1ull << 32); k += 4099)
        check_rounding((uint32_t)k);
}

/* The ring proper sends its partial sums as 2-byte values where a rank
 * holds the memory, floats where not (each rank says which with its
 * pointers): the same bits either way, and a mix of the two. */
Test(ring_wire, the_ring_proper_sends_two_bytes_and_mixes_with_floats)
{
    td_context *ctx = test_context(20000);
    td_mesh *mesh = test_mesh(ctx, "cpu:4");
    td_ring *ring = NULL;
    cr_assert_eq(td_mesh_ring(mesh, &ring), TD_OK);
    check_wire(ctx, mesh, sizes[3], WHOLE, TD_RING_WIRE_BF16, false, "all 2-byte");
    for (uint32_t r = 0; r < 4; r++)
        cr_assert(last_job.sent_wire[r], "rank %u sent floats, expected 2-byte values", r);
    next_odd_ranks_send_floats = true;
    check_wire(ctx, mesh, sizes[3], WHOLE, TD_RING_WIRE_BF16, false, "odd ranks floats");
    check_wire(ctx, mesh, sizes[4], WITH_TOTAL, TD_RING_WIRE_BF16, false, "odd ranks floats");
    next_odd_ranks_send_floats = false;
    for (uint32_t r = 0; r < 4; r++)
        cr_assert_eq(last_job.sent_wire[r], r % 2 == 0, "rank %u: sent %s", r,
                     last_job.sent_wire[r] ? "2-byte values" : "floats");
    check_wire(ctx, mesh, sizes[3], WHOLE, TD_RING_WIRE_FP32, false, "fp32");
    for (uint32_t r = 0; r < 4; r++)
        cr_assert(!last_job.sent_wire[r], "fp32: rank %u sent 2-byte values", r);
    td_mesh_destroy(mesh);
    td_context_destroy(ctx);
}
