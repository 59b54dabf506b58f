/* What the files of the `tandem` command line share: the exit codes, the
 * run configuration that train, eval and the checkpoint metadata carry,
 * and the entry points of the subcommands. The CLI only uses the public
 * headers: it is a user of the library like any other. */
#ifndef TD_CLI_H
#define TD_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem/tandem.h"

/* Exit codes, documented in `tandem --help`. An interrupted run exits with
 * 128 + the signal's number, as a shell reports a process the signal
 * killed, but only after finishing its step and writing its checkpoint. */
enum {
    TD_CLI_EXIT_OK = 0,
    TD_CLI_EXIT_FAILURE = 1,   /* the library or the system refused something */
    TD_CLI_EXIT_USAGE = 2,     /* an unknown flag or a bad value */
    TD_CLI_EXIT_SIGNAL = 128,  /* + SIGINT (130) or SIGTERM (143) */
};

/* Everything that decides a run: what `tandem train` parses, what a
 * checkpoint's metadata records and `tandem eval` and `--resume` read
 * back. Strings point into argv, string literals or an open checkpoint. */
typedef struct td_cli_config {
    const char *model;     /* "linreg", "mlp" or "cnn" ("gpt" runs have a config of their own: td_cli_text.h) */
    const char *devices;   /* mesh spec */
    const char *data;      /* IDX folder, or "generated" */
    const char *optimizer; /* sgd, momentum, adam, adamw, rmsprop */
    const char *schedule;  /* constant, cosine, warmup-cosine */
    int64_t epochs;
    int64_t steps;      /* global batches of the whole run, instead of whole epochs; 0 = by epochs */
    int64_t batch;      /* global */
    int64_t limit;      /* training examples per epoch; 0 = all */
    int64_t eval_limit; /* test examples per evaluation; 0 = all */
    int64_t eval_every; /* epochs between evaluations (the last epoch's always runs); 0 = the last only */
    int64_t accumulate; /* micro-batches per update */
    uint64_t seed;
    float lr;
    float dropout;
    bool batch_norm;
    const char *inputs; /* "raw": pixels / 255; "standardized": then by the training set's mean and std */
    const char *checkpoint; /* directory, or NULL */
    bool resume;
    const char *metrics; /* JSONL path, or NULL */
    const char *trace;   /* Chrome trace-event JSON path, or NULL */
    const char *on_device_loss; /* "fail" (NULL) or "continue" */
    const char *balance;        /* "even" (NULL), "auto" or weights "W,W,..." (td_balance_parse) */
    float timeout;              /* --timeout: seconds every wait may take; 0 = the library's default */
    int64_t cpu_threads;        /* --cpu-threads: the host pool's threads; 0 = the machine's cores */
    bool deterministic;         /* --deterministic: td_context_options.deterministic */
    const char *precision;      /* --precision: "fp32" (NULL) or "bf16" (td_fit_options.precision) */
    float bucket_mib;           /* --bucket-mib: td_fit_options.overlap_bucket_bytes in MiB; 0 = off */
    const char *wire;           /* --wire: "fp32" (NULL) or "bf16" (td_fit_options.wire) */
} td_cli_config;

/* The config as checkpoint metadata (what rebuilds the same graph and
 * run): the strings of its numbers, and the count of pairs. The run's
 * place (epoch, position) is td_fit's own. */
#define TD_CLI_METADATA_KEYS 14
typedef struct td_cli_metadata {
    char epochs[24], steps[24], batch[24], limit[24], accumulate[24], seed[24], lr[32], dropout[32];
} td_cli_metadata;

/* The ranges of the run's sizes, one place for the flags that set them
 * and for the checkpoint metadata that records them: a hand-edited or
 * hostile file gets no more than a command line (a batch of 2^40 would
 * ask for terabytes). */
#define TD_CLI_MAX_EPOCHS 1000000
#define TD_CLI_MAX_BATCH (1 << 20)
#define TD_CLI_MAX_ACCUMULATE 1024
#define TD_CLI_MAX_EXAMPLES 1000000000000LL /* --limit and --steps */
/* --timeout: a millisecond, up to the most td_context_options.timeout_ms
 * holds (UINT32_MAX ms). */
#define TD_CLI_MIN_TIMEOUT 0.001
#define TD_CLI_MAX_TIMEOUT 4294967.0
/* --cpu-threads: the host pool's size (td_context_options.cpu_threads). */
#define TD_CLI_MAX_CPU_THREADS 4096

/* The flags a config can come from, one bit each, so that --resume can
 * tell what the user asked for from what the defaults say. */
enum {
    TD_CLI_SET_MODEL = 1u << 0,
    TD_CLI_SET_DATA = 1u << 1,
    TD_CLI_SET_OPTIMIZER = 1u << 2,
    TD_CLI_SET_SCHEDULE = 1u << 3,
    TD_CLI_SET_EPOCHS = 1u << 4,
    TD_CLI_SET_BATCH = 1u << 5,
    TD_CLI_SET_LIMIT = 1u << 6,
    TD_CLI_SET_ACCUMULATE = 1u << 7,
    TD_CLI_SET_SEED = 1u << 8,
    TD_CLI_SET_LR = 1u << 9,
    TD_CLI_SET_DROPOUT = 1u << 10,
    TD_CLI_SET_BATCH_NORM = 1u << 11,
    TD_CLI_SET_INPUTS = 1u << 12,
    TD_CLI_SET_STEPS = 1u << 13,
};

/* `tandem <name> ...`: each returns the process exit code. argv[0] is the
 * subcommand's name. */
int td_cli_train(int argc, char **argv);
int td_cli_eval(int argc, char **argv);
int td_cli_plot(int argc, char **argv);
int td_cli_sample(int argc, char **argv);
/* `tandem train --model gpt ...` (cmd_train_text.c), dispatched by
 * td_cli_train. */
int td_cli_train_text(int argc, char **argv);

/* What `tandem eval` parsed, for a gpt checkpoint or GPT-2 weights. */
typedef struct td_cli_eval_args {
    const char *checkpoint; /* a gpt checkpoint (directory or file), or NULL with init */
    const char *init;       /* GPT-2 weights (td_gpt_weights_read), or NULL */
    const char *devices;
    float timeout;          /* --timeout seconds; 0: the library's default */
    int64_t cpu_threads;    /* --cpu-threads; 0: the machine's cores */
    bool deterministic;     /* --deterministic */
    const char *precision;  /* --precision: "fp32" (NULL) or "bf16" */
    const char *data;       /* NULL: the run's (with init: the default corpus) */
    int64_t batch;          /* 0: the run's (with init: 12) */
    int64_t sequence;       /* --context: the windows' length; 0: the run's (with init: the file's positions) */
    int64_t eval_batches;   /* 0: every window */
} td_cli_eval_args;

/* `tandem eval` of a gpt checkpoint or of --init weights (cmd_eval_text.c),
 * dispatched by td_cli_eval. */
int td_cli_eval_text(const td_cli_eval_args *a);

/* A training step's loss came back NaN or infinite (its metrics line,
 * with null, is already written): says so with the step and the value,
 * and that nothing of this state is saved. Returns TD_CLI_EXIT_FAILURE. */
int td_cli_diverged(const char *command, double loss, uint64_t step);

/* A context whose library warnings (a corrupt checkpoint skipped, a
 * device dropped, trace events dropped) go to stderr ("tandem <command>:
 * warning: ...": a silent context hid them from the user), with
 * --timeout's seconds as its wait bound, --cpu-threads as its host
 * pool's size (0: the library's defaults) and --deterministic. */
td_status td_cli_context_create(const char *command, float timeout_seconds, uint32_t cpu_threads, bool deterministic,
                                td_context **ctx);

/* Prints "tandem <command>: <what>: <status name>: <the context's message>"
 * to stderr and returns TD_CLI_EXIT_FAILURE. */
int td_cli_fail(const char *command, td_context *ctx, td_status s, const char *what);
/* Merges the traces of a job's processes (PATH.1 ... into PATH, process
 * 0's); an exit code. */
int td_cli_trace_merge(const char *path, uint32_t processes);

/* A td_mesh_create that failed: a spec naming no known device, selecting
 * none or malformed is a bad command line (TD_CLI_EXIT_USAGE), a backend
 * or driver that refuses is a failure (TD_CLI_EXIT_FAILURE). Prints the
 * message and returns the exit code. */
int td_cli_fail_devices(const char *command, td_context *ctx, td_status s);

/* Across processes, messages name the process that printed them. */
void td_cli_set_process(uint32_t process, uint32_t processes);

/* Across processes every process must stop at the same step: whether
 * any process asks to (`mine`), agreed between steps (a collective: every
 * process calls it as often). Alone: `mine`. */
bool td_cli_agree(td_context *ctx, uint32_t processes, bool mine);

/* Monotonic seconds. */
double td_cli_now(void);

/* `s` as a JSON string, quotes included. */
void td_cli_json_string(FILE *f, const char *s);

/* `v` printed with `format` (one double conversion, such as "%.6g"), or
 * null when it is NaN or infinite: JSON has no such numbers, and a
 * diverged run's line must still parse. */
void td_cli_json_number(FILE *f, const char *format, double v);

#endif
