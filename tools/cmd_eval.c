/* `tandem eval --checkpoint DIR`: the loss and accuracy of a training
 * checkpoint on the test set, on any mesh. The checkpoint's metadata names
 * the model and its options, so the same run is rebuilt (td_fit, as
 * `tandem train` builds it); its trainer, of the checkpoint's optimizer,
 * takes the restore, and td_fit_evaluate reads its parameters. */
#include <string.h>

#include "td_cli_checkpoint.h"
#include "td_cli_flags.h"
#include "td_cli_session.h"

static const char usage_text[] =
    "usage: tandem eval --checkpoint DIR|FILE [--devices SPEC] [--data PATH] [--batch N]\n"
    "       tandem eval --checkpoint DIR|FILE | --init FILE  [--data PATH] [--context T] [--eval-batches N]  (gpt)\n"
    "Evaluates a checkpoint FILE, or the newest valid one in DIR, on the test set (Fashion-MNIST t10k, or the generated\n"
    "test set the run used); a gpt checkpoint (DIR, or one file), or GPT-2 weights (--init), on the\n"
    "validation windows of its text (or --data), with bits per byte for byte text. Prints a line and a\n"
    "final JSON line. Exit codes: 0, 1 failed, 2 bad command line.";

int td_cli_eval(int argc, char **argv)
{
    td_cli_config c = {.devices = "cpu:4", .data = NULL, .batch = 0};
    int64_t eval_batches = -1, sequence = 0;
    const char *init = NULL;
    const td_cli_flag flags[] = {
        {"--checkpoint", TD_CLI_STRING, &c.checkpoint, 0, 0, 0, NULL, 0, "PATH",
         "a checkpoint file, or the run's directory (its newest valid file)"},
        {"--devices", TD_CLI_STRING, &c.devices, 0, 0, 0, NULL, 0, "SPEC", "the mesh to evaluate on (default cpu:4)"},
        {"--timeout", TD_CLI_FLOAT, &c.timeout, TD_CLI_MIN_TIMEOUT, TD_CLI_MAX_TIMEOUT, 0, NULL, 0, "SECONDS",
         "bound on every wait for a device (td_context_options.timeout_ms; default 60)"},
        {"--cpu-threads", TD_CLI_INT, &c.cpu_threads, 1, TD_CLI_MAX_CPU_THREADS, 0, NULL, 0, "N",
         "threads the simulated CPU devices share, their own included (default: the machine's cores)"},
        {"--deterministic", TD_CLI_SWITCH, &c.deterministic, 0, 0, 0, NULL, 0, "",
         "the same bits on any CPU: cpu devices use tandem's own fixed-order GEMM (td_context_options.deterministic)"},
        {"--precision", TD_CLI_CHOICE, &c.precision, 0, 0, 0, td_cli_precisions, 0, "P",
         "fp32 (default) or bf16: the matrix products and convolutions with bfloat16 inputs and float sums"},
        {"--data", TD_CLI_STRING, &c.data, 0, 0, 0, NULL, TD_CLI_SET_DATA, "DIR",
         "Fashion-MNIST IDX folder (default: the run's)"},
        {"--batch", TD_CLI_INT, &c.batch, 1, 1 << 20, 0, NULL, TD_CLI_SET_BATCH, "N",
         "global batch, at least one example per device (default: the run's)"},
        {"--eval-batches", TD_CLI_INT, &eval_batches, 0, 1e12, 0, NULL, 0, "N",
         "gpt: validation batches to evaluate; 0: every window (default 0)"},
        {"--context", TD_CLI_INT, &sequence, 1, 1 << 20, 0, NULL, 0, "T",
         "gpt: the validation windows' length, at most the model's positions (default: the run's)"},
        {"--init", TD_CLI_STRING, &init, 0, 0, 0, NULL, 0, "FILE",
         "gpt: GPT-2 weights instead of a checkpoint (llm.c's .bin, a Hugging Face model.safetensors or its "
         "folder); --data defaults to the fortunes, --batch to 12"},
    };
    const size_t n_flags = sizeof flags / sizeof flags[0];
    unsigned set = 0;
    int rc = td_cli_parse("eval", argc, argv, flags, n_flags, &set, NULL, 0, NULL);
    if (rc == TD_CLI_HELP) {
        td_cli_print_help(stdout, usage_text, flags, n_flags);
        return TD_CLI_EXIT_OK;
    }
    if (rc != TD_CLI_PARSED)
        return TD_CLI_EXIT_USAGE;
    if (!c.checkpoint == !init) {
        fprintf(stderr, "tandem eval: give --checkpoint DIR or --init FILE%s (see tandem eval --help)\n",
                init ? ", not both" : "");
        return TD_CLI_EXIT_USAGE;
    }
    /* A gpt checkpoint has a config of its own (cmd_eval_text.c). */
    const td_cli_eval_args text = {.checkpoint = c.checkpoint, .init = init, .devices = c.devices, .timeout = c.timeout,
                                   .cpu_threads = c.cpu_threads, .deterministic = c.deterministic,
                                   .precision = c.precision,
                                   .data = (set & TD_CLI_SET_DATA) ? c.data : NULL,
                                   .batch = (set & TD_CLI_SET_BATCH) ? c.batch : 0, .sequence = sequence,
                                   .eval_batches = eval_batches > 0 ? eval_batches : 0};
    char model[16];
    if (init || (td_cli_checkpoint_model(c.checkpoint, model, sizeof model) && strcmp(model, "gpt") == 0))
        return td_cli_eval_text(&text);
    if (eval_batches >= 0 || sequence) {
        fprintf(stderr, "tandem eval: %s is for gpt checkpoints; '%s' holds a %s model\n",
                eval_batches >= 0 ? "--eval-batches" : "--context", c.checkpoint,
                td_cli_checkpoint_model(c.checkpoint, model, sizeof model) ? model : "non-gpt");
        return TD_CLI_EXIT_USAGE;
    }
    td_cli_saved_config saved;
    td_cli_position at;
    if ((rc = td_cli_checkpoint_read_config("eval", c.checkpoint, &c, set, 0, &saved, &at)) != TD_CLI_EXIT_OK)
        return rc;
    c.metrics = NULL;
    td_cli_session s;
    char path[4096] = "";
    rc = td_cli_session_open(&s, "eval", &c, NULL, NULL);
    if (rc == TD_CLI_EXIT_OK)
        rc = td_cli_restore_trainer("eval", s.ctx, s.trainer, c.checkpoint, path, sizeof path);
    /* The place of the file restored, which may be older than the one the
     * config came from when newer ones did not restore. */
    if (rc == TD_CLI_EXIT_OK &&
        (!td_cli_checkpoint_read_u64("eval", s.ctx, path, "epoch", TD_CLI_MAX_EPOCHS, &at.epoch) ||
         !td_cli_checkpoint_read_u64("eval", s.ctx, path, "position", TD_CLI_MAX_EXAMPLES, &at.position)))
        rc = TD_CLI_EXIT_FAILURE;
    double loss = 0.0, accuracy = 0.0, seconds = 0.0;
    if (rc == TD_CLI_EXIT_OK) {
        const double t0 = td_cli_now();
        td_status st = td_cli_session_evaluate(&s, s.test.count, &loss, &accuracy);
        seconds = td_cli_now() - t0;
        if (st != TD_OK)
            rc = td_cli_fail("eval", s.ctx, st, "evaluating");
    }
    if (rc == TD_CLI_EXIT_OK) {
        td_train_progress p = {.struct_size = sizeof(td_train_progress)};
        td_trainer_progress(s.trainer, &p);
        printf("tandem eval: %s (%s, epoch %llu + %llu steps, %llu updates) on %u device(s) [%s]: %zu test "
               "examples, loss %.4f",
               path, c.model, (unsigned long long)at.epoch, (unsigned long long)at.position,
               (unsigned long long)p.updates, s.n_devices, c.devices, s.test.count, loss);
        if (s.classifier)
            printf(", accuracy %.4f", accuracy);
        printf(", %.2f s\n", seconds);
        printf("{\"command\":\"eval\",\"checkpoint\":\"%s\",\"model\":\"%s\",\"devices\":\"%s\",\"device_count\":%u,"
               "\"updates\":%llu,\"examples\":%zu,\"test_loss\":",
               path, c.model, c.devices, s.n_devices, (unsigned long long)p.updates, s.test.count);
        td_cli_json_number(stdout, "%.6g", loss);
        if (s.classifier) {
            printf(",\"test_accuracy\":");
            td_cli_json_number(stdout, "%.4f", accuracy);
        }
        printf(",\"seconds\":%.3f}\n", seconds);
    }
    td_cli_session_close(&s);
    return rc;
}
