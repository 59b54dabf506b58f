/* The trainer's batch split: see td_balance.h. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "td_balance.h"

enum { DEFAULT_GRANULARITY = 8, DEFAULT_WARMUP = 3, DEFAULT_INTERVAL = 200 };

uint64_t td_balance_common_batch(const td_graph *g)
{
    uint64_t batch = 0;
    for (uint32_t id = 0; id < g->count; id++) {
        const td_node_def *nd = &g->nodes[id];
        if (nd->op != TD_OP_INPUT || nd->placement != TD_SHARDED || nd->attr.dims.rank == 0)
            continue;
        const uint64_t rows = (uint64_t)nd->attr.dims.dims[0];
        if (batch && rows != batch)
            return 0;
        batch = rows;
    }
    return batch;
}

/* The slowest device's time for `rows` at `speed` (examples per unit time). */
static double makespan(const td_balancer *b, const uint32_t *rows)
{
    double worst = 0.0;
    for (uint32_t d = 0; d < b->n; d++)
        worst = fmax(worst, (double)rows[d] / b->speed[d]);
    return worst;
}

/* Whole units first, one at a time, each to the device that would finish
 * it first (ties: the lower position, so the split is deterministic); then
 * what is left past the last whole unit, likewise. Every device gets one
 * unit, or one example when the batch has fewer units than devices. */
static void split_by_speed(const td_balancer *b, uint32_t *rows)
{
    uint32_t unit = b->granularity;
    if (b->batch / unit < b->n)
        unit = 1;
    uint64_t left = b->batch; /* at most UINT32_MAX (td_balancer_init) */
    for (uint32_t d = 0; d < b->n; d++) {
        rows[d] = unit;
        left -= unit;
    }
    while (left) {
        const uint32_t give = left < unit ? (uint32_t)left : unit;
        uint32_t best = 0;
        double best_time = INFINITY;
        for (uint32_t d = 0; d < b->n; d++) {
            const double t = (double)(rows[d] + give) / b->speed[d];
            if (t < best_time) {
                best_time = t;
                best = d;
            }
        }
        rows[best] += give;
        left -= give;
    }
}

void td_balance_even(uint64_t batch, uint32_t n, uint32_t *rows)
{
    for (uint32_t d = 0; d < n; d++)
        rows[d] = (uint32_t)(batch / n + (d < batch % n));
}

static void resplit(td_balancer *b)
{
    if (!b->batch)
        return;
    if (b->mode == TD_BALANCE_EVEN || (b->mode == TD_BALANCE_AUTO && !b->measured_once))
        td_balance_even(b->batch, b->n, b->rows);
    else
        split_by_speed(b, b->rows);
}

td_status td_balancer_init(td_balancer *b, td_context *ctx, const td_trainer_options *o, const td_graph *g, uint32_t n)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->mode = o->balance;
    b->n = n;
    b->granularity = o->balance_granularity;
    b->warmup = o->balance_warmup ? o->balance_warmup : DEFAULT_WARMUP;
    b->interval = o->balance_interval ? o->balance_interval : DEFAULT_INTERVAL;
    if (b->warmup > 1000)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: balance_warmup is %u, expected 1 to 1000 steps", b->warmup);
    b->batch = td_balance_common_batch(g);
    /* By default units of 8 examples, halved until the batch holds four
     * units per device, so a small batch still splits finely. */
    if (!b->granularity)
        for (b->granularity = DEFAULT_GRANULARITY; b->granularity > 1 && b->batch < 4ull * n * b->granularity;)
            b->granularity /= 2;
    if (b->mode != TD_BALANCE_EVEN && b->mode != TD_BALANCE_AUTO && b->mode != TD_BALANCE_EXPLICIT)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: balance is %d, expected TD_BALANCE_EVEN, _AUTO or _EXPLICIT", (int)b->mode);
    if (b->mode == TD_BALANCE_EXPLICIT && !o->balance_weights)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: balance is TD_BALANCE_EXPLICIT but balance_weights is NULL (expected %u "
                            "positive weights, one per mesh device)", n);
    if (b->mode == TD_BALANCE_EXPLICIT && o->n_balance_weights != n)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: balance_weights has %u weights, expected %u (one per mesh device)",
                            o->n_balance_weights, n);
    if (b->mode != TD_BALANCE_EVEN && !b->batch)
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: an uneven balance needs every sharded input to hold the same global "
                            "batch on axis 0, and the graph's do not (or it has none)");
    if (b->batch && b->batch < n)
        return td_error_set(ctx, TD_ERR_NOT_DIVISIBLE,
                            "td_trainer_create: a global batch of %llu examples cannot give each of %u devices one",
                            (unsigned long long)b->batch, n);
    if (b->batch > UINT32_MAX) /* shares are uint32 */
        return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                            "td_trainer_create: a global batch of %llu examples, expected at most %u",
                            (unsigned long long)b->batch, UINT32_MAX);
    b->speed = td_alloc(ctx, sizeof *b->speed * n);
    b->rows = td_alloc_zeroed(ctx, sizeof *b->rows * n);
    b->candidate = td_alloc_zeroed(ctx, sizeof *b->candidate * n);
    b->rates = td_alloc_zeroed(ctx, sizeof *b->rates * n * b->warmup);
    b->scratch = td_alloc_zeroed(ctx, sizeof *b->scratch * b->warmup);
    if (!b->speed || !b->rows || !b->candidate || !b->rates || !b->scratch)
        return TD_OOM(ctx, "the batch split", 5 * sizeof *b->speed * n);
    for (uint32_t d = 0; d < n; d++) {
        const float w = b->mode == TD_BALANCE_EXPLICIT ? o->balance_weights[d] : 1.0f;
        if (!(w > 0.0f) || !isnormal(w))
            return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                "td_trainer_create: balance_weights[%u] is %g, expected a positive normal float (finite, "
                                "at least %g)",
                                d, (double)w, (double)FLT_MIN);
        b->speed[d] = w;
    }
    b->next_window = 1; /* the first step pays for first-run work: not a measure */
    resplit(b);
    return TD_OK;
}

void td_balancer_free(td_balancer *b)
{
    td_free(b->ctx, b->speed);
    td_free(b->ctx, b->rows);
    td_free(b->ctx, b->candidate);
    td_free(b->ctx, b->rates);
    td_free(b->ctx, b->scratch);
    memset(b, 0, sizeof *b);
}

const uint32_t *td_balancer_rows(const td_balancer *b)
{
    return b->batch ? b->rows : NULL;
}

bool td_balancer_measures(const td_balancer *b, uint64_t step)
{
    return b->mode == TD_BALANCE_AUTO && step >= b->next_window;
}

void td_balancer_request(td_balancer *b, uint64_t step)
{
    b->next_window = step;
    b->measured = 0;
}

static double median_rate(td_balancer *b, uint32_t d)
{
    const uint32_t k = b->warmup;
    for (uint32_t i = 0; i < k; i++) { /* insertion sort: a window is a few steps */
        double v = b->rates[(size_t)i * b->n + d];
        uint32_t j = i;
        for (; j > 0 && b->scratch[j - 1] > v; j--)
            b->scratch[j] = b->scratch[j - 1];
        b->scratch[j] = v;
    }
    return k % 2 ? b->scratch[k / 2] : 0.5 * (b->scratch[k / 2 - 1] + b->scratch[k / 2]);
}

bool td_balancer_record(td_balancer *b, uint64_t step, const double *busy_seconds)
{
    if (!td_balancer_measures(b, step))
        return false;
    for (uint32_t d = 0; d < b->n; d++)
        b->rates[(size_t)b->measured * b->n + d] = busy_seconds[d] > 0.0 ? (double)b->rows[d] / busy_seconds[d] : 0.0;
    if (++b->measured < b->warmup)
        return false;
    b->measured = 0;
    b->next_window = step + 1 + (b->interval > b->warmup ? b->interval - b->warmup : 0);
    /* Each device's median over the window: a step that a busy machine
     * stretched for one device does not move the split. */
    for (uint32_t d = 0; d < b->n; d++)
        if (!(median_rate(b, d) > 0.0))
            return false; /* a clock too coarse to tell: keep the split */
    for (uint32_t d = 0; d < b->n; d++)
        b->speed[d] = median_rate(b, d);
    b->measured_once = true;
    /* The split in force against the new one, both at the new speeds. */
    split_by_speed(b, b->candidate);
    /* Not worth a re-plan unless 3% faster: the split stays, the speeds are kept. */
    return makespan(b, b->candidate) < 0.97 * makespan(b, b->rows);
}

void td_balancer_apply(td_balancer *b)
{
    memcpy(b->rows, b->candidate, sizeof *b->rows * b->n);
}

void td_balancer_shrink(td_balancer *b, const bool *keep)
{
    uint32_t m = 0;
    for (uint32_t d = 0; d < b->n; d++)
        if (keep[d])
            b->speed[m++] = b->speed[d];
    b->n = m;
    b->measured = 0;
    resplit(b);
}

td_status td_balance_parse(td_context *ctx, const char *text, td_balance *balance, uint32_t capacity, float *weights,
                           uint32_t *n_weights)
{
    if (!text || !balance || !n_weights || (capacity && !weights))
        return ctx ? td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                  "td_balance_parse: text, balance, n_weights or weights is NULL")
                   : TD_ERR_INVALID_ARGUMENT;
    *n_weights = 0;
    if (strcmp(text, "even") == 0 || strcmp(text, "auto") == 0) {
        *balance = text[0] == 'e' ? TD_BALANCE_EVEN : TD_BALANCE_AUTO;
        return TD_OK;
    }
    /* Explicit weights: numbers separated by commas, nothing else. */
    const char *p = text;
    uint32_t n = 0;
    for (;;) {
        char *end;
        errno = 0;
        const double w = strtod(p, &end);
        if (end == p || errno || !(w > 0.0) || !isfinite(w) || w > 1e30 || (*end && *end != ','))
            return ctx ? td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                      "balance '%s': expected even, auto, or weights like 3,3,1 (numbers > 0 "
                                      "separated by commas)", text)
                       : TD_ERR_INVALID_ARGUMENT;
        /* Held as floats: one that rounds to 0 or a subnormal would give
         * its device nothing, or a share lost in the sums' rounding. */
        if (!isnormal((float)w))
            return ctx ? td_error_set(ctx, TD_ERR_INVALID_ARGUMENT,
                                      "balance '%s': weight %u '%.*s' is %g as a float, expected a positive normal float "
                                      "(at least %g)",
                                      text, n + 1, (int)(end - p), p, (double)(float)w, (double)FLT_MIN)
                       : TD_ERR_INVALID_ARGUMENT;
        if (n == capacity)
            return ctx ? td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "balance '%s': more than %u weights", text, capacity)
                       : TD_ERR_INVALID_ARGUMENT;
        weights[n++] = (float)w;
        if (!*end)
            break;
        p = end + 1;
    }
    *balance = TD_BALANCE_EXPLICIT;
    *n_weights = n;
    return TD_OK;
}

td_status td_rows_of_process(td_context *ctx, const char *fn, uint64_t batch, const uint32_t *rows,
                             uint32_t device_first, uint32_t devices, uint32_t processes, uint64_t *first,
                             uint64_t *count)
{
    *first = *count = 0;
    if (!batch)
        return processes > 1 ? td_error_set(ctx, TD_ERR_UNSUPPORTED,
                                            "%s: the graph's sharded inputs share no batch size, so a process's rows "
                                            "are not one range (give every sharded input the same axis 0)",
                                            fn)
                             : TD_OK;
    for (uint32_t d = 0; d < device_first; d++)
        *first += rows[d];
    for (uint32_t d = 0; d < devices; d++)
        *count += rows[device_first + d];
    return TD_OK;
}
