/* A run's model and data, built the same way by `tandem train` and
 * `tandem eval`: the mesh, the training and test sets (Fashion-MNIST IDX
 * files or generated), and the library's training loop over them
 * (td_fit: the graph with a masked loss and accuracy, the trainer, the
 * evaluator, the batches). Same config, same graph: that is what lets
 * eval restore a training checkpoint. */
#ifndef TD_CLI_SESSION_H
#define TD_CLI_SESSION_H

#include "td_cli.h"
#include "td_demo_processes.h"

typedef struct td_cli_split {
    td_tensor *x, *y; /* examples and targets, rows along axis 0 */
    size_t count;
} td_cli_split;

typedef struct td_cli_session {
    const char *command;
    td_cli_config config;
    td_context *ctx;
    td_mesh *mesh;
    uint32_t n_devices;          /* of the whole job: every process's (tandem/processes.h) */
    uint32_t process, processes; /* this process's rank and the job's count (0 and 1 alone) */
    td_cli_split train, test;
    bool classifier;
    float balance_weights[64]; /* --balance W,W,... */
    td_cli_metadata metadata;  /* the config as checkpoint metadata strings */
    td_checkpoint_entry metadata_entries[TD_CLI_METADATA_KEYS];
    td_fit *fit;             /* the library's loop over all of it (tandem/fit.h) */
    td_trainer *trainer;     /* the fit's */
    td_fit_summary summary;  /* its plan */
    size_t per_epoch;        /* training examples per epoch (the limit) */
    size_t steps_per_epoch;  /* global batches per epoch, the last one padded */
} td_cli_session;

/* Builds everything above for `config` (context, mesh, data, and the
 * td_fit of the run, whose progress goes to on_progress, may be NULL).
 * Returns an exit code; on failure the message is printed and
 * td_cli_session_close still has to run. */
int td_cli_session_open(td_cli_session *s, const char *command, const td_cli_config *config, td_fit_progress_fn on_progress,
                        void *on_progress_user);
void td_cli_session_close(td_cli_session *s);

/* Loss and accuracy (0 for linreg) of the trainer's current parameters on
 * the first `count` test examples (0: all). */
td_status td_cli_session_evaluate(td_cli_session *s, size_t count, double *loss, double *accuracy);

/* The test examples an evaluation of this run covers: --eval-limit, at
 * most the test set. */
size_t td_cli_session_eval_count(const td_cli_session *s);

/* The optimizer names the CLI accepts, NULL-terminated, and the others'. */
extern const char *const td_cli_models[];
extern const char *const td_cli_optimizers[];
extern const char *const td_cli_schedules[];
extern const char *const td_cli_device_loss[];
extern const char *const td_cli_inputs[];
extern const char *const td_cli_precisions[];
/* --wire's values: fp32, bf16 (td_wire). */
extern const char *const td_cli_wires[];
/* td_precision of a --precision value (NULL: fp32). */
td_precision td_cli_precision(const char *name);

/* The config's checkpoint metadata pairs into entries (at least
 * TD_CLI_METADATA_KEYS of them), the numbers' strings in *m; returns the
 * count (cli_checkpoint.c). */
uint32_t td_cli_checkpoint_metadata(const td_cli_config *c, td_cli_metadata *m, td_checkpoint_entry *entries);

/* Fills the defaults that depend on the model (optimizer, learning rate,
 * schedule, inputs: td_fit_recipe's) where the user gave none. */
void td_cli_config_defaults(td_cli_config *c, unsigned set);

#endif
