/* A run's model and data, built the same way by `tandem train` and
 * `tandem eval`: the mesh, the training and test sets (Fashion-MNIST IDX
 * files or generated), the graph (inputs, the built-in model, a masked
 * loss and, for the classifiers, a masked accuracy), the trainer and an
 * evaluator, and one global batch's host tensors. Same config, same graph:
 * that is what lets eval restore a training checkpoint. */
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
    td_graph *g;
    td_node x, y, mask, loss, accuracy; /* accuracy 0 for linreg */
    bool classifier;
    td_node *params;
    uint32_t n_params;
    td_trainer_options trainer_options;
    float balance_weights[64]; /* --balance W,W,... */
    td_trainer *trainer;
    td_evaluator *evaluator;
    td_demo_batch batch;     /* this process's rows of one global batch (all of it in one process) */
    uint32_t *index;         /* batch rows */
    uint32_t *order;         /* an epoch's order over the training set */
    size_t per_epoch;        /* training examples per epoch (the limit) */
    size_t steps_per_epoch;  /* global batches per epoch, the last one padded */
    uint64_t total_updates;  /* what the schedules decay over */
} td_cli_session;

/* Builds everything above for `config` (context, mesh, data, graph,
 * trainer, evaluator). Returns an exit code; on failure the message is
 * printed and td_cli_session_close still has to run. */
int td_cli_session_open(td_cli_session *s, const char *command, const td_cli_config *config);
void td_cli_session_close(td_cli_session *s);

/* Rows order[first .. first+count) of the training set into the batch
 * (padded and masked), then one training step. */
td_status td_cli_session_step(td_cli_session *s, const uint32_t *rows, size_t count, float *loss, float *accuracy);

/* Across processes every process must stop at the same step: whether
 * any process asks to (`mine`), agreed between steps. Alone: `mine`. */
bool td_cli_session_agree(td_cli_session *s, bool mine);

/* Called after each batch of an evaluation: `done` of `batches` batches,
 * the last one taking `seconds`. */
typedef void (*td_cli_eval_progress_fn)(void *user, size_t done, size_t batches, double seconds);

/* Loss and accuracy (0 for linreg) of the trainer's current parameters on
 * the first `count` examples of `split`, through the evaluator; on_batch
 * (may be NULL) after each batch. */
td_status td_cli_session_evaluate(td_cli_session *s, const td_cli_split *split, size_t count, double *loss,
                                  double *accuracy, td_cli_eval_progress_fn on_batch, void *user);

/* The test examples an evaluation of this run covers: --eval-limit, at
 * most the test set. */
size_t td_cli_session_eval_count(const td_cli_session *s);

/* The optimizer names the CLI accepts, NULL-terminated, and the others'. */
extern const char *const td_cli_models[];
extern const char *const td_cli_optimizers[];
extern const char *const td_cli_schedules[];
extern const char *const td_cli_device_loss[];
extern const char *const td_cli_inputs[];

/* Fills the defaults that depend on the model (optimizer, learning rate)
 * where the user gave none. */
void td_cli_config_defaults(td_cli_config *c, unsigned set);

#endif
