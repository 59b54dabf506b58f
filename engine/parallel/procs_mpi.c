/* The job's processes over Open MPI (td_procs.h, tandem/processes.h).
 *
 * Only non-blocking MPI calls are made, and each exchange polls its
 * requests against a deadline: MPI's blocking calls cannot be bounded, and
 * tandem promises that every wait is. The deadline is twice the context
 * timeout, as for a ring peer: a process whose own device stalls reports
 * that itself (and ends the job) before its peers give up on it. The
 * communicator is a duplicate of MPI_COMM_WORLD, so the caller's own
 * messages never match tandem's.
 *
 * An exchange that does not complete (a timeout, a local abort, an MPI
 * error) breaks the group for good: its peers' messages stay unmatched,
 * so a later exchange could take them for its own, and MPI_Finalize would
 * wait for the process that did not answer. What such a process can
 * still do is end the job (td_processes_abort, or exit non-zero: mpirun
 * ends the job either way); nothing on the way there may wait. */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/processes.h"
#include "td_platform.h"
#include "td_procs.h"
#include "td_ring.h"

/* MPI counts are ints: messages go in pieces of at most this many bytes. */
#define PIECE_BYTES ((size_t)1 << 30)
#define TAG_DATA 7100
#define SPIN_SECONDS 500e-6 /* how long a wait polls before it sleeps */
#define TAG_JOIN 7101  /* the join's first message, on MPI_COMM_WORLD */
#define TAG_ABORT 7102 /* "this process failed its step": [rank, status, exchanges finished] */
/* The step's agreement has a tag of its own, so nothing of an interrupted
 * exchange can ever be taken for it. */
#define TAG_AGREE 7103

struct td_procs {
    td_owned owned; /* first: the context owns the group like any object */
    td_context *ctx;
    MPI_Comm comm;
    uint32_t rank, count;
    bool finalize_mpi; /* tandem initialized MPI, so it finalizes it */
    MPI_Request *requests;
    uint32_t *request_peer; /* UINT32_MAX: a collective (the duplicate) */
    size_t request_capacity;
    int tag;          /* of the messages posted now: TAG_DATA, or TAG_AGREE */
    /* The abort channel: a receive from any process, always posted, which
     * a process that failed its step fills (td_procs_signal_abort). Every
     * exchange watches it, so a peer's failure stops the waits at once
     * instead of at the timeout. */
    int32_t abort_in[3];
    MPI_Request abort_recv;
    int32_t abort_out[3];
    MPI_Request *abort_sends; /* count */
    bool abort_sent;          /* this step's failure was told */
    int32_t peer_failed;      /* -1, or the process whose abort arrived */
    double *sum_scratch;      /* td_processes_sum's every-process values */
    size_t sum_capacity;
    td_status peer_status;
    /* Exchanges begun and finished since the group was last (re)made.
     * Every process begins the same exchanges in the same order, so the
     * counts name an exchange across processes. A peer's abort carries how
     * many it finished: one that finished the exchange a process still
     * waits in had sent its part, and failed later (its next step): that
     * wait goes on, and the abort stops the next exchange instead. Without
     * this, an abort that overtook the last message of, say, a
     * td_processes_sum ended that sum, outside any step's agreement, and
     * the job failed where it should have gone on without the lost
     * device. */
    uint32_t begun, finished;
    uint32_t peer_finished;
    char broken[512]; /* the failed exchange's message; "" while healthy */
    /* An exchange stopped for a failure of this step (a local device, a
     * peer's abort): nothing but the step's agreement and the renewal may
     * use the group until td_procs_renew. */
    bool tainted;
};

/* Contexts that joined, so MPI is finalized after the last one goes (MPI
 * itself is per process; only the first join can initialize it). */
static int joined_contexts;
static bool tandem_initialized_mpi;
/* Some group of this process broke: MPI is left unfinalized. */
static bool mpi_broken;

bool td_processes_available(void)
{
    return true;
}

bool td_processes_launched(void)
{
    /* Open MPI's launcher sets these; PMI_SIZE / PMIX_RANK cover Slurm's. */
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

td_procs *td_procs_of(td_context *ctx)
{
    return td_context_processes(ctx);
}

uint32_t td_procs_rank(const td_procs *procs)
{
    return procs ? procs->rank : 0;
}

uint32_t td_procs_count(const td_procs *procs)
{
    return procs ? procs->count : 1;
}

static double now_seconds(void)
{
    return (double)td_platform_now_ns() * 1e-9;
}

static td_status reserve_requests(td_procs *p, size_t n)
{
    if (n <= p->request_capacity)
        return TD_OK;
    MPI_Request *r = td_alloc(p->ctx, sizeof *r * n);
    uint32_t *peer = td_alloc(p->ctx, sizeof *peer * n);
    if (!r || !peer) {
        td_free(p->ctx, r);
        td_free(p->ctx, peer);
        return TD_OOM(p->ctx, "MPI requests", n * (sizeof *r + sizeof *peer));
    }
    td_free(p->ctx, p->requests);
    td_free(p->ctx, p->request_peer);
    p->requests = r;
    p->request_peer = peer;
    p->request_capacity = n;
    return TD_OK;
}

/* Every exchange starts here: none after a failed one (see the top). */
static td_status begin(td_procs *p, size_t n)
{
    if (p->tainted && p->tag != TAG_AGREE)
        return td_error_set(p->ctx, TD_ERR_STATE,
                            "process %u: an exchange between the processes stopped for a failure of this step; only "
                            "the step's agreement may follow (td_trainer_step does it), or end the job",
                            p->rank);
    if (p->broken[0])
        return td_error_set(p->ctx, TD_ERR_STATE,
                            "process %u: nothing more is exchanged between the job's processes after a failed "
                            "exchange (%s); end the job (td_processes_abort)",
                            p->rank, p->broken);
    td_status s = reserve_requests(p, n);
    if (s == TD_OK)
        p->begun++;
    return s;
}

/* An empty message is one piece too (post_on). */
static size_t pieces_of(size_t bytes)
{
    return bytes == 0 ? 1 : (bytes + PIECE_BYTES - 1) / PIECE_BYTES;
}

/* Ends an exchange that cannot complete. Its receives still pending are
 * cancelled and every pending request is freed, so no message that
 * arrives later lands in memory the caller has reused (sends that already
 * started may still complete: a buffer they read is read, never written).
 * The duplicate's request is left alone: a collective's request cannot be
 * cancelled or freed. */
static td_status give_up(td_procs *p, size_t n, td_status status, const char *why, bool breaks)
{
    for (size_t i = 0; i < n; i++) {
        int done = 0;
        MPI_Test(&p->requests[i], &done, MPI_STATUS_IGNORE);
        if (!done && p->request_peer[i] != UINT32_MAX) {
            MPI_Cancel(&p->requests[i]);
            MPI_Request_free(&p->requests[i]);
        }
    }
    if (breaks) {
        snprintf(p->broken, sizeof p->broken, "%s", why);
        mpi_broken = true;
    } else {
        p->tainted = true;
    }
    return td_error_set(p->ctx, status, "%s", why);
}

/* Posts `bytes` at data to (send) or from (receive) process `peer` as
 * pieces on comm with tag; appends the requests at *n. A post that fails
 * gives up the whole exchange, the requests before it included. */
static td_status post_on(td_procs *p, MPI_Comm comm, int tag, bool send, void *data, size_t bytes, uint32_t peer,
                         size_t *n)
{
    /* An empty block still goes as an empty message: a bucket's window
     * may miss a process's block, and without a message the exchange
     * would not wait for that process -- the others would then time out
     * on each other, naming a healthy peer instead of the silent one. */
    for (size_t at = 0; at < bytes || (at == 0 && bytes == 0); at += PIECE_BYTES) {
        const int len = (int)(bytes - at < PIECE_BYTES ? bytes - at : PIECE_BYTES);
        char *ptr = (char *)data + at;
        const int rc = send ? MPI_Isend(ptr, len, MPI_BYTE, (int)peer, tag, comm, &p->requests[*n])
                            : MPI_Irecv(ptr, len, MPI_BYTE, (int)peer, tag, comm, &p->requests[*n]);
        if (rc != MPI_SUCCESS) {
            char why[160];
            snprintf(why, sizeof why, "process %u: MPI %s of %d bytes with process %u failed (%d)", p->rank,
                     send ? "send" : "receive", len, peer, rc);
            return give_up(p, *n, TD_ERR_BACKEND, why, true);
        }
        p->request_peer[(*n)++] = peer;
    }
    return TD_OK;
}

/* An exchange's message: on the group's communicator. */
static td_status post(td_procs *p, bool send, void *data, size_t bytes, uint32_t peer, size_t *n)
{
    return post_on(p, p->comm, p->tag, send, data, bytes, peer, n);
}

/* Whether a peer's abort arrived (then remembered until td_procs_renew). */
static bool peer_aborted(td_procs *p)
{
    if (p->peer_failed >= 0)
        return true;
    int flag = 0;
    if (p->abort_recv == MPI_REQUEST_NULL || MPI_Test(&p->abort_recv, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
        !flag)
        return false;
    p->peer_failed = p->abort_in[0];
    p->peer_status = (td_status)p->abort_in[1];
    p->peer_finished = (uint32_t)p->abort_in[2];
    return true;
}

/* Polls the first n requests until all completed, the deadline (`factor`
 * x the context timeout) passed, should_stop says so or -- when `watch` --
 * a peer's abort arrived. Short sleeps, growing to 200 us: an exchange that
 * waits for a slower process should not burn the core its devices use.
 * An interrupted wait gives its exchange up (give_up): a timeout or an MPI
 * error breaks the group, a failure of this step only taints it until the
 * step's agreement renews it. */
static td_status wait_requests_for(td_procs *p, size_t n, const char *what, td_procs_stop_fn should_stop, void *user,
                                   bool watch, double factor)
{
    const double timeout = factor * (double)td_context_timeout_ms(p->ctx) / 1000.0;
    const double deadline = now_seconds() + timeout;
    long sleep_ns = 20000;
    const double spin_until = now_seconds() + SPIN_SECONDS;
    char why[sizeof p->broken];
    for (;;) {
        int done = 0;
        if (MPI_Testall((int)n, p->requests, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            snprintf(why, sizeof why, "process %u: MPI failed during %s", p->rank, what);
            return give_up(p, n, TD_ERR_BACKEND, why, true);
        }
        if (done) {
            p->finished = p->begun;
            return TD_OK;
        }
        if (should_stop && should_stop(user)) {
            snprintf(why, sizeof why, "process %u: %s stopped: a local device failed", p->rank, what);
            return give_up(p, n, TD_ERR_ABORTED, why, false);
        }
        if (watch && peer_aborted(p) && p->peer_finished < p->begun) {
            snprintf(why, sizeof why, "process %u: %s stopped: process %d failed its step (%s)", p->rank, what,
                     p->peer_failed, td_status_name(p->peer_status));
            return give_up(p, n, TD_ERR_ABORTED, why, false);
        }
        if (now_seconds() > deadline) {
            char missing[128] = "";
            size_t len = 0;
            uint32_t last = UINT32_MAX;
            for (size_t i = 0; i < n && len + 16 < sizeof missing; i++) {
                int flag = 0;
                MPI_Test(&p->requests[i], &flag, MPI_STATUS_IGNORE);
                if (!flag && p->request_peer[i] != last && p->request_peer[i] != UINT32_MAX) {
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%u", len ? ", " : "",
                                            p->request_peer[i]);
                    last = p->request_peer[i];
                }
            }
            snprintf(why, sizeof why, "process %u of %u: %s waited %.0f ms for process(es) %s, which did not answer",
                     p->rank, p->count, what, timeout * 1000.0, len ? missing : "of the job");
            return give_up(p, n, TD_ERR_TIMEOUT, why, true);
        }
        /* A peer a few microseconds behind is cheaper to poll for than to
         * sleep on: a sleep lasts tens of microseconds whatever it asks
         * (69 us measured for 1 us here), which was the exchange's whole
         * floor for small messages (docs/SCALING.md). So poll, yielding the
         * core (a peer process may need it), for the first SPIN_SECONDS;
         * after that sleep, longer and longer, so a wait for a slow process
         * costs its core nothing. */
        if (now_seconds() < spin_until) {
            td_platform_yield();
            continue;
        }
        td_platform_sleep_ns((uint64_t)sleep_ns);
        if (sleep_ns < 200000)
            sleep_ns *= 2;
    }
}

static td_status wait_requests(td_procs *p, size_t n, const char *what, td_procs_stop_fn should_stop, void *user)
{
    return wait_requests_for(p, n, what, should_stop, user, true, 2.0);
}

td_status td_procs_allgather(td_procs *p, const void *mine, void *all, size_t bytes, td_procs_stop_fn should_stop,
                             void *user)
{
    td_status s = begin(p, 2 * (size_t)p->count * pieces_of(bytes) + 1);
    size_t n = 0;
    if (bytes && (char *)all + (size_t)p->rank * bytes != mine)
        memcpy((char *)all + (size_t)p->rank * bytes, mine, bytes);
    for (uint32_t q = 0; q < p->count && s == TD_OK; q++) {
        if (q == p->rank)
            continue;
        if ((s = post(p, false, (char *)all + (size_t)q * bytes, bytes, q, &n)) == TD_OK)
            s = post(p, true, (void *)(uintptr_t)mine, bytes, q, &n);
    }
    return s == TD_OK ? wait_requests(p, n, "an all-gather between processes", should_stop, user) : s;
}

/* The largest of the processes' blocks [offsets[q], offsets[q+1]). */
static size_t largest_block(const td_procs *p, const size_t *offsets)
{
    size_t most = 0;
    for (uint32_t q = 0; q < p->count; q++)
        most = offsets[q + 1] - offsets[q] > most ? offsets[q + 1] - offsets[q] : most;
    return most;
}

/* Posts the all-gather of blocks of `unit`-byte elements. */
static td_status post_gather(td_procs *p, void *x, size_t unit, const size_t *offsets, size_t *n)
{
    td_status s = begin(p, 2 * (size_t)p->count * pieces_of(largest_block(p, offsets) * unit) + 1);
    char *base = x, *own = base + offsets[p->rank] * unit;
    const size_t own_bytes = (offsets[p->rank + 1] - offsets[p->rank]) * unit;
    for (uint32_t q = 0; q < p->count && s == TD_OK; q++) {
        if (q == p->rank)
            continue;
        if ((s = post(p, false, base + offsets[q] * unit, (offsets[q + 1] - offsets[q]) * unit, q, n)) == TD_OK)
            s = post(p, true, own, own_bytes, q, n);
    }
    return s;
}

static td_status post_allgather_blocks(td_procs *p, float *x, const size_t *offsets, size_t *n)
{
    return post_gather(p, x, sizeof(float), offsets, n);
}

td_status td_procs_allgather_bytes(td_procs *p, void *x, const size_t *offsets)
{
    size_t n = 0;
    td_status s = post_gather(p, x, 1, offsets, &n);
    return s == TD_OK ? wait_requests(p, n, "gathering a batch between processes", NULL, NULL) : s;
}

td_status td_procs_agree_blocks(td_procs *p, float *x, const size_t *offsets)
{
    size_t n = 0;
    p->tag = TAG_AGREE;
    td_status s = post_allgather_blocks(p, x, offsets, &n);
    p->tag = TAG_DATA;
    /* Not watching the abort channel: this is where failures are told. A
     * peer whose device hung returns from its step up to 4 x the timeout
     * late (then fenced), so the wait is longer than an exchange's. */
    return s == TD_OK ? wait_requests_for(p, n, "agreeing on the step's outcome", NULL, NULL, false, 6.0) : s;
}

bool td_procs_broken(const td_procs *p)
{
    return p->broken[0] != 0;
}

td_status td_procs_signal_abort(td_procs *p, td_status status)
{
    if (peer_aborted(p) || p->abort_sent)
        return TD_OK; /* a peer's failure caused ours, or we told them already */
    p->abort_sent = true;
    p->abort_out[0] = (int32_t)p->rank;
    p->abort_out[1] = (int32_t)status;
    p->abort_out[2] = (int32_t)p->finished;
    for (uint32_t q = 0; q < p->count; q++)
        if (q != p->rank &&
            MPI_Isend(p->abort_out, 3, MPI_INT32_T, (int)q, TAG_ABORT, p->comm, &p->abort_sends[q]) != MPI_SUCCESS)
            return td_error_set(p->ctx, TD_ERR_BACKEND, "process %u: telling process %u of a failure failed", p->rank,
                                q);
    return TD_OK;
}

/* The abort channel's receive cancelled and its sends let go of (they
 * complete in the background, or die with the old communicator). */
static void drop_abort_channel(td_procs *p)
{
    if (p->abort_recv != MPI_REQUEST_NULL) {
        MPI_Cancel(&p->abort_recv);
        MPI_Request_free(&p->abort_recv);
    }
    for (uint32_t q = 0; p->abort_sends && q < p->count; q++)
        if (p->abort_sends[q] != MPI_REQUEST_NULL)
            MPI_Request_free(&p->abort_sends[q]);
    p->abort_sent = false;
}

static void post_abort_recv(td_procs *p)
{
    p->peer_failed = -1;
    p->abort_recv = MPI_REQUEST_NULL;
    MPI_Irecv(p->abort_in, 3, MPI_INT32_T, MPI_ANY_SOURCE, TAG_ABORT, p->comm, &p->abort_recv);
}

/* Lets go of whatever an interrupted step left posted, on the old
 * communicator, which is then replaced: a message of the failed step can
 * never match an exchange of a later one. */
td_status td_procs_renew(td_procs *p)
{
    if (p->broken[0])
        return td_error_set(p->ctx, TD_ERR_STATE, "process %u: the group broke (%s); end the job", p->rank,
                            p->broken);
    drop_abort_channel(p);
    MPI_Comm old = p->comm, renewed = MPI_COMM_NULL;
    MPI_Request dup;
    if (MPI_Comm_idup(old, &renewed, &dup) != MPI_SUCCESS)
        return td_error_set(p->ctx, TD_ERR_BACKEND, "process %u: renewing the communicator failed", p->rank);
    p->requests[0] = dup;
    p->request_peer[0] = UINT32_MAX;
    td_status s = wait_requests_for(p, 1, "renewing the communicator after a failed step", NULL, NULL, false, 2.0);
    if (s != TD_OK)
        return s;
    MPI_Comm_set_errhandler(renewed, MPI_ERRORS_RETURN);
    MPI_Comm_free(&old);
    p->comm = renewed;
    p->tainted = false;
    p->begun = p->finished = 0; /* every process renews at the same point */
    post_abort_recv(p);
    return TD_OK;
}

td_status td_procs_allgather_blocks(td_procs *p, float *x, const size_t *offsets, td_procs_stop_fn should_stop,
                                    void *user)
{
    size_t n = 0;
    td_status s = post_allgather_blocks(p, x, offsets, &n);
    return s == TD_OK ? wait_requests(p, n, "the all-gather between processes", should_stop, user) : s;
}

td_status td_procs_exchange_blocks(td_procs *p, const void *x, const size_t *offsets, size_t element_bytes,
                                   void *recv, td_procs_stop_fn should_stop, void *user)
{
    const size_t e = element_bytes;
    td_status s = begin(p, 2 * (size_t)p->count * pieces_of(largest_block(p, offsets) * e) + 1);
    size_t n = 0;
    const size_t own = offsets[p->rank + 1] - offsets[p->rank];
    const char *xb = x;
    char *rb = recv;
    if (own)
        memcpy(rb + (size_t)p->rank * own * e, xb + offsets[p->rank] * e, own * e);
    for (uint32_t q = 0; q < p->count && s == TD_OK; q++) {
        if (q == p->rank)
            continue;
        if ((s = post(p, false, rb + (size_t)q * own * e, own * e, q, &n)) == TD_OK)
            s = post(p, true, (void *)(uintptr_t)(xb + offsets[q] * e), (offsets[q + 1] - offsets[q]) * e, q, &n);
    }
    return s == TD_OK ? wait_requests(p, n, "the reduce-scatter between processes", should_stop, user) : s;
}

td_status td_procs_broadcast(td_procs *p, uint32_t root, void *data, size_t bytes, td_procs_stop_fn should_stop,
                             void *user)
{
    td_status s = begin(p, (size_t)p->count * pieces_of(bytes) + 1);
    size_t n = 0;
    if (p->rank == root) {
        for (uint32_t q = 0; q < p->count && s == TD_OK; q++)
            if (q != root)
                s = post(p, true, data, bytes, q, &n);
    } else if (s == TD_OK) {
        s = post(p, false, data, bytes, root, &n);
    }
    return s == TD_OK ? wait_requests(p, n, "a broadcast between processes", should_stop, user) : s;
}

/* ---- the public calls ---- */

static void procs_release(td_owned *self)
{
    td_procs *p = (td_procs *)self;
    td_context_set_processes(p->ctx, NULL, NULL);
    drop_abort_channel(p);
    td_free(p->ctx, p->abort_sends);
    td_free(p->ctx, p->sum_scratch);
    /* A broken group's communicator may still carry its sends, or (a join
     * that timed out) not exist yet: it is left as it is. */
    if (p->comm != MPI_COMM_NULL && !p->broken[0])
        MPI_Comm_free(&p->comm);
    td_free(p->ctx, p->requests);
    td_free(p->ctx, p->request_peer);
    if (p->finalize_mpi && --joined_contexts == 0 && tandem_initialized_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (mpi_broken)
            /* MPI_Finalize waits for every process, the one that did not
             * answer too, for ever. Unfinalized, this process's exit ends
             * the job (mpirun treats an exit without MPI_Finalize, or a
             * non-zero status, as the job's failure). */
            td_log(p->ctx, TD_LOG_WARN,
                   "process %u: MPI left unfinalized after a failed exchange between the processes (%s); this "
                   "process's exit ends the job",
                   p->rank, p->broken[0] ? p->broken : "in another context");
        else if (!finalized)
            MPI_Finalize();
        tandem_initialized_mpi = false;
    }
}

/* A mesh made on a joined context spans the processes from the start:
 * its ring learns every process's device count now. */
static td_status mesh_created(td_mesh *mesh)
{
    td_ring *ring;
    return td_mesh_ring(mesh, &ring);
}

td_status td_processes_join(td_context *ctx)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    if (td_context_processes(ctx))
        return td_error_set(ctx, TD_ERR_STATE, "td_processes_join: this context already joined the job's processes");
    int initialized = 0, finalized = 0, provided = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized)
        return td_error_set(ctx, TD_ERR_STATE, "td_processes_join: MPI was already finalized in this process");
    if (!initialized) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return td_error_set(ctx, TD_ERR_BACKEND, "td_processes_join: MPI_Init_thread failed");
        tandem_initialized_mpi = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return td_error_set(ctx, TD_ERR_UNSUPPORTED,
                            "td_processes_join: MPI provides thread level %d, expected MPI_THREAD_SERIALIZED (%d) "
                            "or more (tandem calls MPI from its device threads, one at a time)",
                            provided, MPI_THREAD_SERIALIZED);
    td_procs *p = td_alloc_zeroed(ctx, sizeof *p);
    if (!p)
        return TD_OOM(ctx, "the process group", sizeof *p);
    p->ctx = ctx;
    p->comm = MPI_COMM_NULL;
    p->abort_recv = MPI_REQUEST_NULL;
    p->peer_failed = -1;
    p->tag = TAG_DATA;
    p->finalize_mpi = true;
    joined_contexts++;
    td_context_own(ctx, &p->owned, "processes", NULL, procs_release);
    /* Errors come back as codes: a failed call must become a status, not
     * MPI's default of ending the job from inside the library. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    p->rank = (uint32_t)rank;
    p->count = (uint32_t)size;
    p->abort_sends = td_alloc(ctx, sizeof *p->abort_sends * (size_t)size);
    if (!p->abort_sends) {
        td_owned_destroy(&p->owned);
        return TD_OOM(ctx, "the abort channel", sizeof *p->abort_sends * (size_t)size);
    }
    for (int q = 0; q < size; q++)
        p->abort_sends[q] = MPI_REQUEST_NULL;
    /* First one small message with every process on MPI_COMM_WORLD (its
     * own tag): a process that never joins is then named, which the
     * duplicate's request cannot do. */
    uint32_t *hello = td_alloc(ctx, sizeof *hello * (size_t)size);
    td_status s = hello ? reserve_requests(p, 2 * (size_t)size + 2) : TD_OOM(ctx, "the join", sizeof *hello * size);
    size_t n = 0;
    for (uint32_t q = 0; q < p->count && s == TD_OK; q++) {
        if (q == p->rank)
            continue;
        if ((s = post_on(p, MPI_COMM_WORLD, TAG_JOIN, false, &hello[q], sizeof *hello, q, &n)) == TD_OK)
            s = post_on(p, MPI_COMM_WORLD, TAG_JOIN, true, &p->rank, sizeof p->rank, q, &n);
    }
    if (s == TD_OK)
        s = wait_requests(p, n, "joining the job's processes", NULL, NULL);
    td_free(ctx, hello);
    /* The duplicate is made with the non-blocking call: a process that
     * never joins must not hang the others. */
    MPI_Request dup;
    if (s == TD_OK && MPI_Comm_idup(MPI_COMM_WORLD, &p->comm, &dup) != MPI_SUCCESS)
        s = td_error_set(ctx, TD_ERR_BACKEND, "td_processes_join: MPI_Comm_idup failed");
    if (s == TD_OK) {
        p->requests[0] = dup;
        p->request_peer[0] = UINT32_MAX;
        s = wait_requests(p, 1, "joining the job's processes", NULL, NULL);
    }
    if (s == TD_OK) {
        MPI_Comm_set_errhandler(p->comm, MPI_ERRORS_RETURN);
        post_abort_recv(p);
    }
    if (s != TD_OK) {
        td_owned_destroy(&p->owned);
        return s;
    }
    td_context_set_processes(ctx, p, mesh_created);
    td_context_set_process_rank(ctx, p->rank);
    return TD_OK;
}

td_status td_processes_rank(td_context *ctx, uint32_t *rank, uint32_t *count)
{
    if (!ctx || !rank || !count)
        return TD_ERR_INVALID_ARGUMENT;
    td_procs *p = td_procs_of(ctx);
    *rank = td_procs_rank(p);
    *count = td_procs_count(p);
    return TD_OK;
}

td_status td_processes_abort(td_context *ctx, int code)
{
    if (!ctx)
        return TD_ERR_INVALID_ARGUMENT;
    td_procs *p = td_procs_of(ctx);
    if (!p)
        return td_error_set(ctx, TD_ERR_STATE, "td_processes_abort: the context joined no processes");
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    return TD_ERR_STATE; /* not reached: MPI_Abort ends the process */
}

td_status td_processes_sum(td_context *ctx, double *values, uint32_t n)
{
    if (!ctx || (n && !values))
        return TD_ERR_INVALID_ARGUMENT;
    td_procs *p = td_procs_of(ctx);
    if (!p || p->count == 1 || n == 0)
        return TD_OK;
    /* The group's scratch, grown once: a flag agreed every step (the CLI's
     * stop) costs no allocation, and a late message of a failed exchange
     * can only land in memory the group still owns. */
    const size_t bytes = (size_t)n * sizeof *values, need = (size_t)n * p->count;
    if (need > p->sum_capacity) {
        double *grown = td_alloc(ctx, sizeof *grown * need);
        if (!grown)
            return TD_OOM(ctx, "td_processes_sum", sizeof *grown * need);
        td_free(ctx, p->sum_scratch);
        p->sum_scratch = grown;
        p->sum_capacity = need;
    }
    double *all = p->sum_scratch;
    td_status s = td_procs_allgather(p, values, all, bytes, NULL, NULL);
    for (uint32_t i = 0; i < n && s == TD_OK; i++) {
        double sum = 0.0;
        for (uint32_t q = 0; q < p->count; q++)
            sum += all[(size_t)q * n + i];
        values[i] = sum;
    }
    return s;
}
