/* `tandem eval` of a gpt checkpoint: the loss on the validation windows of
 * the run's text (or --data), on any mesh, with bits per byte for byte
 * text. The metadata rebuilds the run's graph; a trainer of its optimizer
 * takes the restore and the evaluator reads its parameters, the same
 * evaluation `tandem train --model gpt` runs at its end. With --init, the
 * GPT-2 weights' own sizes build the graph and the trainer starts from
 * them, as `tandem train --init` would. */
#include <math.h>

#include "td_cli_checkpoint.h"
#include "td_cli_text.h"

int td_cli_eval_text(const td_cli_eval_args *a)
{
    td_cli_text_config c;
    td_cli_text_config_defaults(&c);
    c.devices = a->devices;
    c.timeout = a->timeout;
    c.cpu_threads = a->cpu_threads;
    c.deterministic = a->deterministic;
    c.precision = a->precision;
    c.eval_batches = a->eval_batches;
    const unsigned keep = (a->data ? TD_CLI_TEXT_SET_DATA : 0u) | (a->batch ? TD_CLI_TEXT_SET_BATCH : 0u) |
                          (a->sequence ? TD_CLI_TEXT_SET_CONTEXT : 0u);
    if (a->data)
        c.data = a->data;
    if (a->batch)
        c.batch = a->batch;
    if (a->sequence)
        c.sequence = a->sequence;
    c.given = keep;
    c.init = a->init;
    td_cli_text_saved saved;
    uint64_t step = 0;
    int rc = TD_CLI_EXIT_OK;
    if (a->checkpoint && (rc = td_cli_text_read_config("eval", a->checkpoint, &c, keep, 0, &saved, &step)) !=
                             TD_CLI_EXIT_OK)
        return rc;
    td_cli_text_session s;
    char path[4096] = "";
    rc = td_cli_text_open(&s, "eval", &c);
    if (rc == TD_CLI_EXIT_OK && a->checkpoint) {
        rc = td_cli_restore_trainer("eval", s.ctx, s.trainer, a->checkpoint, path, sizeof path);
        /* The step of the file restored (an older one when newer ones did
         * not restore). */
        if (rc == TD_CLI_EXIT_OK && !td_cli_checkpoint_read_u64("eval", s.ctx, path, "step", UINT32_MAX, &step))
            rc = TD_CLI_EXIT_FAILURE;
    } else if (rc == TD_CLI_EXIT_OK) {
        snprintf(path, sizeof path, "%s", a->init);
    }
    c = s.config; /* with the sizes of --init */
    double loss = 0.0, seconds = 0.0;
    size_t windows = 0;
    if (rc == TD_CLI_EXIT_OK) {
        const double t0 = td_cli_now();
        td_status st = td_cli_text_evaluate(&s, c.eval_batches, &loss, &windows);
        seconds = td_cli_now() - t0;
        if (st != TD_OK)
            rc = td_cli_fail("eval", s.ctx, st, "validating");
        else if (windows == 0) {
            fprintf(stderr, "tandem eval: --data '%s' has %zu validation tokens: no window of context %lld + 1\n",
                    c.data, s.summary.val_tokens, (long long)c.sequence);
            rc = TD_CLI_EXIT_FAILURE;
        }
    }
    if (rc == TD_CLI_EXIT_OK) {
        td_train_progress p = {.struct_size = sizeof(td_train_progress)};
        td_trainer_progress(s.trainer, &p);
        const double bits = loss / log(2.0);
        printf("tandem eval: %s (gpt, %lld layers, width %lld, step %llu, %llu updates) on %u device(s) [%s]: %zu "
               "validation windows of %lld + 1 tokens of %s, val loss %.4f",
               path, (long long)c.layers, (long long)c.width, (unsigned long long)step, (unsigned long long)p.updates,
               s.n_devices, c.devices, windows, (long long)c.sequence, c.data, loss);
        if (s.summary.bytes)
            printf(" (%.3f bits/byte)", bits);
        printf(", %.2f s\n", seconds);
        printf("{\"command\":\"eval\",\"%s\":", a->checkpoint ? "checkpoint" : "init");
        td_cli_json_string(stdout, path);
        printf(",\"model\":\"gpt\",\"devices\":");
        td_cli_json_string(stdout, c.devices);
        printf(",\"device_count\":%u,\"step\":%llu,\"updates\":%llu,\"windows\":%zu,\"val_loss\":", s.n_devices,
               (unsigned long long)step, (unsigned long long)p.updates, windows);
        td_cli_json_number(stdout, "%.6g", loss);
        if (s.summary.bytes) {
            printf(",\"val_bits_per_byte\":");
            td_cli_json_number(stdout, "%.6g", bits);
        }
        printf(",\"seconds\":%.3f}\n", seconds);
    }
    td_demo_end_job_if_failed(s.ctx, s.processes, rc);
    td_cli_text_close(&s);
    return rc;
}
