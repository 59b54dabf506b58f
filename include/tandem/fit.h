/* tandem — the training loop: a built-in model trained on a dataset for a
 * number of epochs, evaluated, checkpointed and resumed, in one call.
 *
 * td_fit is what `tandem train`'s classifiers and the Fashion-MNIST demos
 * run, and what an application that only wants a trained model calls:
 *
 *     td_fit_options o;
 *     td_fit_options_init(&o);
 *     td_fit_recipe("mlp", &o);         // the model's measured defaults
 *     o.epochs = 5;
 *     td_fit *fit;
 *     td_fit_create(mesh, train_x, train_y, test_x, test_y, &o, &fit);
 *     td_fit_run(fit, &result);         // result.test_accuracy
 *
 * Each epoch visits the first `limit` examples of the training set in
 * td_data_order(seed, epoch), the same on every mesh, in global batches
 * of `batch`; the last, short batch is padded and masked, so it trains on
 * its real rows only (the loss and the accuracy are masked means). The
 * test set is evaluated every `eval_every` epochs and after the last,
 * each test example counted once. With a checkpoint directory the run
 * saves every N epochs or steps, keeping the newest few, and `resume`
 * continues from the newest valid checkpoint there exactly where the run
 * left it: bitwise the uninterrupted run on the same mesh. A progress
 * callback sees every step and epoch and may stop the run; so may
 * td_fit_request_stop, from a signal handler. Under an MPI launcher
 * (tandem/processes.h) every process calls the same functions with the
 * same options and data; each binds only its rows of every batch.
 *
 * Since 0.1. */
#ifndef TANDEM_FIT_H
#define TANDEM_FIT_H

#include "tandem/checkpoint.h"
#include "tandem/eval.h"
#include "tandem/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A training run: its graph, trainer, evaluator and batch buffers. Owned
 * by the mesh's context; td_fit_destroy releases it.
 * Since 0.1. */
typedef struct td_fit td_fit;

/* What a progress report is about.
 * Since 0.1. */
typedef enum td_fit_event {
    TD_FIT_STEP = 0,       /* a global batch was trained */
    TD_FIT_EPOCH = 1,      /* an epoch ended (evaluated or not) */
    TD_FIT_EVAL_BATCH = 2, /* an evaluation batch was run */
} td_fit_event;

/* One report to td_fit_options.on_progress. Counts are from 1 and
 * absolute: a resumed run goes on counting where the saved run stopped.
 * Since 0.1. */
typedef struct td_fit_progress {
    size_t struct_size; /* sizeof(td_fit_progress): growth-safe, see tandem/export.h */
    td_fit_event event;
    uint64_t epoch, epochs;           /* the epoch running, of the run's */
    uint64_t step, steps_per_epoch;   /* the step of the epoch just done (EPOCH: its last) */
    uint64_t global_step;             /* steps done in the run */
    uint64_t examples;                /* STEP: the batch's real rows; EPOCH: the epoch's, this call's */
    float loss, accuracy;             /* STEP: the batch's; EPOCH: the means over its examples; 0 accuracy for linreg */
    double seconds;                   /* STEP: the step's; EPOCH: the epoch's training (no evaluation) */
    bool evaluated;                   /* EPOCH: the test set was evaluated after it */
    float test_loss, test_accuracy;   /* EPOCH when evaluated, else NAN */
    double eval_seconds;              /* EPOCH: the evaluation's, 0 when none */
    uint64_t eval_batch, eval_batches; /* EVAL_BATCH: the batch done, of the evaluation's */
    const char *checkpoint;           /* the file saved at this step or epoch end, else NULL */
} td_fit_progress;

/* Called after each step, epoch and evaluation batch, on the calling
 * thread; returning nonzero stops the run at the next step boundary (with
 * a checkpoint, when the run has a directory). It may call td_fit_trainer
 * and td_fit_evaluate (EPOCH only), not td_fit_run.
 * Since 0.1. */
typedef int (*td_fit_progress_fn)(const td_fit_progress *progress, void *user);

/* What td_fit_create reads; its strings and arrays (model, schedule,
 * checkpoint_dir, balance_weights, metadata) must outlive the fit.
 * Since 0.1. */
typedef struct td_fit_options {
    size_t struct_size; /* sizeof(td_fit_options): growth-safe, see tandem/export.h */
    /* The built-in model: "mlp" or "cnn" (tandem/models.h: labels i32,
     * images u8 or f32 of any shape the model takes), or "linreg" (x f32
     * [N, F], y f32 [N, 1], squared error). Default "mlp". */
    const char *model;
    uint64_t seed;       /* initial parameters, dropout masks, data order. Default 0 */
    uint32_t epochs;     /* passes over the training set. Default 5 */
    uint64_t max_steps;  /* nonzero: the run's length in global batches instead (the last epoch may end early) */
    uint32_t batch;      /* global batch, at least one example per device of the job. Default 128 */
    uint64_t limit;      /* train on the first `limit` examples of each epoch's order; 0 = all */
    td_optimizer_kind optimizer; /* default TD_OPTIMIZER_ADAM */
    float learning_rate; /* the peak of the schedule; 0 = the optimizer's own */
    float momentum;      /* SGD and RMSPROP: 0 = none */
    const char *schedule; /* "constant" (default), "cosine" or "warmup-cosine" (td_schedule_for_run) */
    uint32_t accumulate; /* batches per update (td_trainer_options.accumulate_steps). Default 1 */
    bool batch_norm;     /* td_model_options.batch_norm */
    float dropout;       /* td_model_options.dropout, in [0, 1) */
    /* Classifiers: scale the inputs by the whole training set's mean and
     * standard deviation (td_data_pixel_stats) after / 255. */
    bool standardize_inputs;
    td_on_device_loss on_device_loss;
    td_balance balance; /* td_trainer_options' three balance fields */
    const float *balance_weights;
    uint32_t n_balance_weights;
    bool timing_waits; /* td_trainer_options.timing_waits */
    /* Evaluate on the test set every `eval_every` epochs and after the
     * last (0: after the last only), on its first `eval_limit` examples
     * (0: all). Default 1, 0. */
    uint32_t eval_every;
    uint64_t eval_limit;
    /* Checkpoints into this directory (made when missing), NULL: none.
     * Saved every `checkpoint_every_epochs` epochs (0: never by epoch) and
     * every `checkpoint_every_steps` global steps (0: never by step), at
     * the run's end and when it stops early, keeping the newest
     * `checkpoint_keep` (0: all). A save that falls inside an accumulation
     * round waits for the round to close. Defaults 1, 0, 3. */
    const char *checkpoint_dir;
    uint32_t checkpoint_every_epochs;
    uint64_t checkpoint_every_steps;
    uint32_t checkpoint_keep;
    /* Continue from the newest valid checkpoint in checkpoint_dir; when it
     * holds none yet, start anew (td_fit_summary.resumed says which). */
    bool resume;
    /* The caller's own pairs for every checkpoint's metadata (the keys
     * "epoch" and "position" are the run's). */
    uint32_t n_metadata;
    const td_checkpoint_entry *metadata;
    td_fit_progress_fn on_progress; /* NULL: none */
    void *user;
    /* Since 0.2. The matrix products and convolutions of training and
     * evaluation in FP32 (the default) or BF16 (td_precision,
     * td_trainer_options.precision). */
    td_precision precision;
    /* Since 0.2. td_trainer_options.overlap_bucket_bytes: the gradient
     * all-reduce in buckets during backward; 0 (the default) = after it. */
    uint64_t overlap_bucket_bytes;
    /* Since 0.2. td_trainer_options.wire: the gradients between devices
     * as floats (TD_WIRE_FP32, the default) or bfloat16 (TD_WIRE_BF16). */
    td_wire wire;
} td_fit_options;

/* The defaults above.
 * Since 0.1. */
TD_API td_status td_fit_options_init(td_fit_options *options);

/* The measured recipe of a built-in model: sets options->model and the
 * optimizer, learning rate, schedule and input scaling that go with it
 * and with options->batch_norm (set that first), leaving the rest alone.
 * mlp: Adam 2e-3 with a cosine decay, raw inputs; cnn: Adam 2e-3 cosine
 * (5e-3 warmup-cosine with batch norm), standardized inputs; linreg: SGD
 * 0.05 constant (bench/RESULTS.md has the measurements). An unknown model
 * is TD_ERR_INVALID_ARGUMENT naming it.
 * Since 0.1. */
TD_API td_status td_fit_recipe(const char *model, td_fit_options *options);

/* Since 0.1. */
typedef struct td_fit_summary {
    size_t struct_size; /* sizeof(td_fit_summary): growth-safe, see tandem/export.h */
    uint64_t examples_per_epoch, steps_per_epoch;
    uint64_t epochs, total_steps; /* the run's length (max_steps: the epochs they reach into) */
    uint64_t test_examples;       /* what an evaluation covers */
    uint32_t devices;             /* of the job: every process's */
    float learning_rate;          /* the peak in force (the optimizer's own when 0 was given) */
    float input_mean, input_std;  /* the model's input scaling (0 and 1 when raw) */
    bool resumed;                 /* td_fit_run restored a checkpoint */
    uint64_t start_epoch, start_position; /* where td_fit_run starts (from 0): epoch, steps done in it */
    const char *checkpoint;       /* the file restored or last saved, else NULL (valid until the next td_fit call) */
} td_fit_summary;

/* Since 0.1. */
typedef struct td_fit_result {
    size_t struct_size; /* sizeof(td_fit_result): growth-safe, see tandem/export.h */
    uint64_t epochs_done;  /* whole epochs done, a resumed run's earlier ones counted */
    uint64_t steps_done;   /* global steps done, likewise */
    uint64_t steps_run;    /* this call's */
    float train_loss, train_accuracy; /* the last epoch's running means (its steps this call) */
    bool evaluated;        /* the test set was evaluated; else the two below are NAN */
    float test_loss, test_accuracy;
    bool stopped;          /* stopped early by the callback or td_fit_request_stop */
} td_fit_result;

/* Since 0.1. */
TD_API td_status td_fit_result_init(td_fit_result *result);

/* Builds the run on `mesh`: the graph of options->model over inputs
 * shaped like train_x's rows, a trainer and an evaluator. The tensors are
 * host tensors of N rows (train_y: labels i32 [N] for the classifiers)
 * that must outlive the fit; test_x and test_y may both be NULL (no
 * evaluation). Every option is checked here, before anything is built:
 * TD_ERR_INVALID_ARGUMENT naming the field, its value and what was
 * expected. A resumed run's options must be the saved run's (the trainer
 * refuses another model or optimizer when td_fit_run restores).
 * Since 0.1. */
TD_API td_status td_fit_create(td_mesh *mesh, const td_tensor *train_x, const td_tensor *train_y,
                               const td_tensor *test_x, const td_tensor *test_y, const td_fit_options *options,
                               td_fit **out);

/* Releases the fit and what it built. NULL is ignored.
 * Since 0.1. */
TD_API void td_fit_destroy(td_fit *fit);

/* Restores the newest checkpoint when options->resume asked for it (once,
 * before the first step; called by td_fit_run when not before), so a
 * caller can print where the run starts first. TD_OK also when there is
 * nothing to resume.
 * Since 0.1. */
TD_API td_status td_fit_prepare(td_fit *fit);

/* The run's plan (and, after td_fit_prepare, where it starts).
 * Since 0.1. */
TD_API td_status td_fit_summarize(const td_fit *fit, td_fit_summary *summary);

/* Trains to the end of the run, or until stopped; result may be NULL.
 * Once per fit: a second call is TD_ERR_STATE. A failed step, save or
 * evaluation ends the run with its status (the checkpoints written so far
 * stay); a non-finite loss is TD_ERR_INVALID_ARGUMENT naming the step
 * (the run diverged: lower the learning rate). When the checkpoint is at
 * the run's end already, nothing trains and the test set is evaluated.
 * Since 0.1. */
TD_API td_status td_fit_run(td_fit *fit, td_fit_result *result);

/* Asks a running td_fit_run to stop after its current step (finishing an
 * open accumulation round first when it saves). Async-signal-safe: it
 * only sets an atomic flag, so a SIGINT handler may call it. NULL is
 * ignored.
 * Since 0.1. */
TD_API void td_fit_request_stop(td_fit *fit);

/* Which examples td_fit_evaluate reads.
 * Since 0.1. */
typedef enum td_fit_split {
    TD_FIT_TEST = 0,
    TD_FIT_TRAIN = 1,
} td_fit_split;

/* The masked mean loss and accuracy (0 for linreg) of the trainer's
 * current parameters on the first `count` examples of a split (0: the
 * whole split), in file order: batch norm in inference mode, no dropout.
 * Since 0.1. */
TD_API td_status td_fit_evaluate(td_fit *fit, td_fit_split split, uint64_t count, float *loss, float *accuracy);

/* The fit's trainer (for td_trainer_progress, td_checkpoint_load_params,
 * ...); it lives as long as the fit.
 * Since 0.1. */
TD_API td_status td_fit_trainer(const td_fit *fit, td_trainer **trainer);

#ifdef __cplusplus
}
#endif
#endif
