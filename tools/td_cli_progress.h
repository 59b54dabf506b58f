/* What `tandem train` shows while it runs: on a terminal one line redrawn
 * in place (epoch, step, samples/s, loss, ETA; while evaluating, the
 * evaluation's batch); elsewhere (a pipe, a log file) only the per-epoch
 * lines, so logs stay readable. The ETA counts the evaluations still to
 * run as well as the steps. */
#ifndef TD_CLI_PROGRESS_H
#define TD_CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct td_cli_progress {
    bool live;           /* stdout is a terminal */
    bool drawn;          /* a bar is on the current line */
    int64_t epochs;
    size_t steps;        /* per epoch */
    uint64_t remaining;  /* steps this run will take, for the ETA */
    uint64_t done;       /* steps taken by this run */
    double started, last_draw;
    /* Evaluations: batches in each, how many this run will make, batches
     * run so far and their time (which the training rate leaves out). */
    size_t eval_batches;
    uint64_t evaluations, eval_done;
    double eval_seconds;
} td_cli_progress;

void td_cli_progress_init(td_cli_progress *p, int64_t epochs, size_t steps_per_epoch, uint64_t remaining_steps);

/* The evaluations the run will make, of `batches` batches each, so that
 * the ETA counts them. */
void td_cli_progress_evaluations(td_cli_progress *p, uint64_t evaluations, size_t batches);

/* After batch `batch` (from 1) of epoch `epoch`'s evaluation, which took
 * `seconds`. */
void td_cli_progress_eval_batch(td_cli_progress *p, int64_t epoch, size_t batch, double seconds);

/* After a step (epoch and step counted from 1). Redraws at most ten times a
 * second, and at the epoch's last step. */
void td_cli_progress_step(td_cli_progress *p, int64_t epoch, size_t step, double samples_per_second, float loss);

/* A run counted in steps (the GPT's; init with epochs 0 and the run's
 * total steps as steps_per_epoch): after step `step` (from 1), the rate in
 * tokens per second. On a terminal the redrawn line (step, loss, tokens/s,
 * ETA); elsewhere that line at every tenth of the run, so a log shows the
 * run go without one line per step. */
void td_cli_progress_steps(td_cli_progress *p, uint64_t step, double tokens_per_second, float loss);

/* Clears the bar so that a whole line can be printed. */
void td_cli_progress_clear(td_cli_progress *p);

#endif
