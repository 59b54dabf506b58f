/* The trainer's batch split over its devices (td_trainer_options.balance):
 * even, in proportion to the caller's weights, or in proportion to each
 * device's measured throughput on the real step. The split is in units of
 * `granularity` examples; the greedy filling gives each next unit to the
 * device that would finish it first, so the slowest device's time -- the
 * step's -- is as short as whole units allow. */
#ifndef TD_BALANCE_H
#define TD_BALANCE_H

#include "tandem/train.h"
#include "td_graph_internal.h"

typedef struct td_balancer {
    td_context *ctx;
    td_balance mode;
    uint64_t batch;        /* the global batch (every sharded input's axis 0); 0 = none common */
    uint32_t granularity;  /* examples per unit of the split */
    uint32_t warmup;       /* AUTO: steps in a measurement window */
    uint32_t interval;     /* AUTO: steps from one window's start to the next's */
    uint32_t n;            /* devices */
    double *speed;         /* per device: EXPLICIT the weights, AUTO the measured examples/s (1 until measured) */
    uint32_t *rows;        /* the split in force, per device (the batch is at most UINT32_MAX) */
    uint32_t *candidate;   /* AUTO: the split at the measured speeds */
    double *rates;         /* AUTO: the window's examples per busy second, [step][device] */
    double *scratch;       /* warmup doubles, for the medians */
    uint32_t measured;     /* steps recorded in the current window */
    bool measured_once;    /* AUTO: speed holds measurements (before, the split is even) */
    uint64_t next_window;  /* the micro step the next window starts at */
} td_balancer;

/* Axis 0 of every sharded input of g, when they all agree (0 otherwise). */
uint64_t td_balance_common_batch(const td_graph *g);
/* Even shares of `batch` over n devices: batch / n each, one more for the
 * first batch mod n. */
void td_balance_even(uint64_t batch, uint32_t n, uint32_t *rows);

/* The rows of a global batch of `batch` examples that one process binds,
 * split `rows` per global device: those of its `devices` devices from
 * global position `device_first`, as [*first, *first + *count). With no
 * common batch (0): 0 and 0 in one process, TD_ERR_UNSUPPORTED naming `fn`
 * across several (each input would split on its own). */
td_status td_rows_of_process(td_context *ctx, const char *fn, uint64_t batch, const uint32_t *rows,
                             uint32_t device_first, uint32_t devices, uint32_t processes, uint64_t *first,
                             uint64_t *count);

/* Checks the options' balance fields against the graph and an n-device
 * mesh, and sets the first split (even, or by the weights). */
td_status td_balancer_init(td_balancer *b, td_context *ctx, const td_trainer_options *o, const td_graph *g, uint32_t n);
void td_balancer_free(td_balancer *b);

/* The split for the program (NULL when the graph has no common batch: the
 * program then divides each input evenly). */
const uint32_t *td_balancer_rows(const td_balancer *b);

/* Whether micro step `step` (0-based: the step about to run) is in a
 * measurement window: its per-device busy time is recorded. */
bool td_balancer_measures(const td_balancer *b, uint64_t step);

/* Records step `step`'s busy seconds per device. Returns true when that
 * closed a window whose measured speeds give a split that is predicted at
 * least 3% faster than the one in force (td_balancer_apply makes it so). */
bool td_balancer_record(td_balancer *b, uint64_t step, const double *busy_seconds);
void td_balancer_apply(td_balancer *b);

/* Measures again from step `step` on (td_trainer_rebalance). */
void td_balancer_request(td_balancer *b, uint64_t step);

/* The mesh dropped the devices whose keep[d] is false: their speeds go,
 * and the batch is split again over the survivors by the speeds known
 * (AUTO then measures again: td_balancer_request). */
void td_balancer_shrink(td_balancer *b, const bool *keep);

#endif
