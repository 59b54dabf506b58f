/* The GPT's side of the command line: the run configuration of `tandem
 * train --model gpt` (what its checkpoints record and `tandem eval`,
 * `tandem sample` and `--resume` read back), and the session that `train`
 * and `eval` build from it -- the text, the mesh, the graph (tokens,
 * targets and mask [B, T] into td_model_gpt_loss), the trainer, an
 * evaluator over the validation windows, and the host tensors of one
 * global batch, made once and reused by every step. */
#ifndef TD_CLI_TEXT_H
#define TD_CLI_TEXT_H

#include "td_cli.h"
#include "td_demo_processes.h"

typedef struct td_cli_text_config {
    const char *devices;   /* mesh spec */
    const char *data;      /* a text file, a token shard (.bin) or a directory of either */
    const char *optimizer; /* one of td_cli_optimizers */
    const char *schedule;  /* one of td_cli_schedules, over `steps` */
    int64_t layers, heads, width, context; /* the model; context: its positions */
    int64_t sequence;                      /* T: the training and validation windows' length, <= context */
    int64_t vocab;                         /* from the data (or --init): 256 for bytes, 50257 for GPT-2 */
    int64_t batch;                         /* global, in sequences of T tokens */
    int64_t steps;                         /* the run's length in optimizer steps */
    int64_t eval_every;   /* steps between validations; 0 = at the end only */
    int64_t eval_batches; /* validation batches per evaluation; 0 = every window */
    uint64_t seed;        /* parameters, dropout and every training batch */
    float lr, weight_decay, dropout;
    const char *checkpoint; /* directory, or NULL */
    bool resume;
    const char *metrics, *trace, *on_device_loss, *balance;
    float timeout; /* --timeout seconds; 0: the library's default */
    int64_t cpu_threads; /* --cpu-threads; 0: the machine's cores */
    bool deterministic;  /* --deterministic: td_context_options.deterministic */
    const char *precision; /* --precision: "fp32" (NULL) or "bf16" (td_trainer_options.precision) */
    const char *wire;      /* --wire: "fp32" (NULL) or "bf16" (td_trainer_options.wire) */
    /* GPT-2 weights to start from (td_gpt_weights_read: llm.c's .bin, a
     * Hugging Face or tandem safetensors): the model's sizes come from the
     * file, and options in `given` that contradict it are refused. */
    const char *init;
    unsigned given;  /* TD_CLI_TEXT_SET_* of the flags the user gave */
    bool recompute;  /* td_gpt_options.recompute: less activation memory, the same values */
} td_cli_text_config;

/* Bits for the flags given, so that --resume tells what the user asked
 * for from the defaults. */
enum {
    TD_CLI_TEXT_SET_DATA = 1u << 0,
    TD_CLI_TEXT_SET_OPTIMIZER = 1u << 1,
    TD_CLI_TEXT_SET_SCHEDULE = 1u << 2,
    TD_CLI_TEXT_SET_LAYERS = 1u << 3,
    TD_CLI_TEXT_SET_HEADS = 1u << 4,
    TD_CLI_TEXT_SET_WIDTH = 1u << 5,
    TD_CLI_TEXT_SET_CONTEXT = 1u << 6,
    TD_CLI_TEXT_SET_BATCH = 1u << 7,
    TD_CLI_TEXT_SET_STEPS = 1u << 8,
    TD_CLI_TEXT_SET_SEED = 1u << 9,
    TD_CLI_TEXT_SET_LR = 1u << 10,
    TD_CLI_TEXT_SET_WEIGHT_DECAY = 1u << 11,
    TD_CLI_TEXT_SET_DROPOUT = 1u << 12,
};

/* nanoGPT's character model on a CPU: 4 layers, 4 heads, width 128,
 * context 64, batch 12, AdamW at 1e-3, on the default corpus. */
void td_cli_text_config_defaults(td_cli_text_config *c);

typedef struct td_cli_text_session {
    const char *command;
    td_cli_text_config config;
    td_context *ctx;
    td_mesh *mesh;
    uint32_t n_devices;          /* of the whole job */
    uint32_t process, processes; /* 0 and 1 alone */
    td_text *text;
    td_text_summary summary;
    size_t val_windows;          /* of T + 1 tokens at stride T */
    td_gpt_options gpt;
    td_graph *g;
    td_node tokens, targets, mask, loss;
    td_node *params;
    uint32_t n_params;
    uint64_t parameter_count;    /* elements */
    td_trainer_options trainer_options;
    float balance_weights[64]; /* --balance W,W,... */
    td_trainer *trainer;
    td_evaluator *evaluator;
    /* One global batch on the host: every process assembles all of it (a
     * pure function of seed and step) and binds its own rows. */
    td_tensor *inputs, *outputs; /* i32 [B, T]: tokens and the next tokens */
    td_tensor *ones;             /* f32 [B], all 1: training batches have no padding */
    td_tensor *val_mask;         /* f32 [B]: a validation batch's valid rows */
    td_demo_batch rows;          /* across processes: this process's rows */
} td_cli_text_session;

/* Joins the job's processes under an MPI launcher, reads config->init's
 * weights when given (their sizes into the config), opens the text and
 * checks it against the config (its vocabulary must be config->vocab
 * unless that is 0; sequence + 1 training tokens at least), builds the
 * mesh, the graph, the trainer (starting from the weights) and the
 * evaluator. Returns an exit code; on failure the message is printed and
 * td_cli_text_close still has to run. */
int td_cli_text_open(td_cli_text_session *s, const char *command, const td_cli_text_config *config);
void td_cli_text_close(td_cli_text_session *s);

/* Training batch `step` (td_text_batch of the seed), this process's rows
 * bound, one td_trainer_step. Allocates nothing unless the split changed. */
td_status td_cli_text_step(td_cli_text_session *s, uint64_t step, float *loss);

/* The mean loss per token of the trainer's parameters over the first
 * `max_batches` validation batches (0: all of them, every window), and
 * the windows that took; *loss 0 without windows. */
td_status td_cli_text_evaluate(td_cli_text_session *s, int64_t max_batches, double *loss, size_t *windows);

/* The per-device memory (td_trainer_memory_report) of this process's
 * devices as a JSON array, to f. */
void td_cli_text_print_memory(td_cli_text_session *s, FILE *f);

/* The model's sizes from GPT-2 weights into *c (vocab, context, layers,
 * heads, width; sequence too unless the user gave --context, which must
 * then fit the positions): a flag in c->given that contradicts the file is
 * exit 2 naming both values. Returns an exit code. */
int td_cli_text_config_from_weights(const char *command, const td_gpt_weights *w, td_cli_text_config *c);

/* td_gpt_options of the config (dropout and recompute included). */
void td_cli_text_gpt_options(const td_cli_text_config *c, td_gpt_options *o);

/* Sets `o`'s optimizer from a td_cli_optimizers name ("momentum" is SGD
 * with momentum 0.9): what a trainer needs to take a checkpoint of it. */
void td_cli_text_optimizer(const char *name, td_trainer_options *o);

/* ---- checkpoints (cli_text_checkpoint.c) ---- */

/* Where a checkpoint's strings live once the file is closed. */
typedef struct td_cli_text_saved {
    char optimizer[16], schedule[16], data[4096];
} td_cli_text_saved;

/* Saves the trainer into `dir` (the newest 3 kept) with the config and
 * `step` (optimizer steps done) in the metadata; the path goes to path. */
td_status td_cli_text_checkpoint_write(td_cli_text_session *s, const char *dir, uint64_t step, char *path,
                                       size_t capacity);

/* Reads the GPT config and step of the checkpoint `ck` (model "gpt")
 * into *c and *step. Returns an exit code after saying what is wrong. */
int td_cli_text_checkpoint_config(const char *command, const td_checkpoint *ck, td_cli_text_config *c,
                                  td_cli_text_saved *storage, uint64_t *step);

/* For `--resume` and `eval`: opens `path` (a checkpoint directory's newest
 * valid file, or a file), reads its config into *c except the options in
 * `keep` (TD_CLI_TEXT_SET_* bits: the caller's own stay), refuses options
 * in `must_match` that differ from the file's (exit 2 naming the flag and
 * both values). Returns an exit code. */
int td_cli_text_read_config(const char *command, const char *path, td_cli_text_config *c, unsigned keep,
                            unsigned must_match, td_cli_text_saved *storage, uint64_t *step);

#endif
