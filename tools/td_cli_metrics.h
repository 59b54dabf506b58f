/* `--metrics FILE`: one JSON object per line, {"kind":"step",...} after
 * every step and {"kind":"epoch",...} after every epoch -- or, for a run
 * counted in steps (the GPT's), {"kind":"eval",...} after each validation
 * -- so a run can be plotted (`tandem plot`) or read by any JSON-lines
 * tool while it goes. */
#ifndef TD_CLI_METRICS_H
#define TD_CLI_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem/train.h"

typedef struct td_cli_metrics {
    FILE *file; /* NULL: no metrics wanted */
    int error;  /* errno of the first failed write, for the message at close; 0: none */
} td_cli_metrics;

typedef struct td_cli_step_record {
    int64_t epoch;    /* from 1 */
    uint64_t step;    /* in the epoch, from 1 */
    uint64_t steps;   /* per epoch */
    uint64_t global;  /* micro-steps since the run began, resumed runs included */
    float loss, accuracy, lr;
    double samples_per_second, seconds;
    bool has_accuracy;
    uint32_t n_devices;
    const td_step_timing *timing; /* per device */
    const uint32_t *split;        /* per device: its examples of the batch */
    /* A run counted in steps: no "epoch" key; `progress` is written as
     * given (the GPT's: passes over the training tokens so far), and
     * tokens_per_second beside samples_per_second. */
    bool by_steps;
    double progress, tokens_per_second;
} td_cli_step_record;

typedef struct td_cli_epoch_record {
    int64_t epoch;
    double train_loss, train_accuracy, test_loss, test_accuracy; /* test: NaN (null) when not evaluated */
    double seconds;      /* the epoch's, its evaluation included */
    double eval_seconds; /* the evaluation's (0: none) */
    double samples_per_second; /* the training's */
    bool has_accuracy;
} td_cli_epoch_record;

/* A validation during a run counted in steps, after `step` steps:
 * the mean training loss since the previous one and the validation loss
 * (with bits per byte when the tokens are bytes). */
typedef struct td_cli_eval_record {
    uint64_t step;
    double progress; /* as the step lines' */
    double train_loss, val_loss, val_bits_per_byte, seconds, tokens_per_second;
    bool has_train_loss, has_bits_per_byte;
    size_t windows; /* validation sequences evaluated */
} td_cli_eval_record;

/* Opens `path` for writing (append: a resumed run continues the file). */
bool td_cli_metrics_open(td_cli_metrics *m, const char *path, bool append);
void td_cli_metrics_step(td_cli_metrics *m, const td_cli_step_record *r);
void td_cli_metrics_epoch(td_cli_metrics *m, const td_cli_epoch_record *r);
void td_cli_metrics_eval(td_cli_metrics *m, const td_cli_eval_record *r);
/* false when a write failed (a full disk), after saying so. */
bool td_cli_metrics_close(td_cli_metrics *m, const char *path);

#endif
