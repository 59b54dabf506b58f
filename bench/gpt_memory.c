/* Per-device memory of GPT training (seed 002's argument: activations grow
 * with the per-device batch and with T^2 through the attention weights, so
 * the batch, not the model, is what the devices split).
 *
 * For each mesh cpu:N and each per-device batch b and sequence length T it
 * builds td_model_gpt_loss for a global batch N*b, creates an AdamW trainer
 * and prints device 0's td_trainer_memory_report: what tandem's planner
 * actually reserves (the arena is placed by liveness, so `activations` is
 * the peak). Then, for a per-device budget (--budget-mib), the largest
 * per-device batch that fits at each N -- from the report's own linear
 * growth in b, confirmed by building that batch and the next -- and the
 * global batch it allows.
 *
 * The reference is the seed's estimate of the attention weights alone:
 * layers x b x heads x T^2 floats, printed beside each row (the softmax
 * output every block keeps for its backward pass).
 *
 * usage: gpt_memory [--layers L] [--heads H] [--width D] [--vocab V]
 *        [--context C] [--seq T[,T...]] [--batches b[,b...]]
 *        [--devices N[,N...]] [--budget-mib M] [--recompute] [--json] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/tandem.h"

typedef struct options {
    td_gpt_options gpt;
    int64_t seqs[8], batches[8], devices[8];
    int n_seqs, n_batches, n_devices;
    double budget_mib;
    int json;
} options;

static int parse_list(const char *text, int64_t *out, int max)
{
    int n = 0;
    char *end;
    while (*text && n < max) {
        long long v = strtoll(text, &end, 10);
        if (end == text || v < 1)
            return -1;
        out[n++] = v;
        text = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

/* Device 0's report for a global batch of `devices` x `per_device`
 * sequences of length T; false (with the message printed) on failure. */
static bool measure(const options *o, int64_t devices, int64_t per_device, int64_t T, td_memory_report *r)
{
    td_context *ctx = NULL;
    td_mesh *mesh = NULL;
    td_graph *g = NULL;
    td_trainer *t = NULL;
    char spec[32];
    snprintf(spec, sizeof spec, "cpu:%lld", (long long)devices);
    const int64_t B = devices * per_device, dims[2] = {B, T};
    td_node tokens, targets, mask, loss, params[4096];
    uint32_t n = 0;
    td_trainer_options to;
    td_trainer_options_init(&to);
    to.optimizer = TD_OPTIMIZER_ADAMW;
    td_status s = td_context_create(NULL, &ctx);
    if (s == TD_OK)
        s = td_mesh_create(ctx, spec, &mesh);
    if (s == TD_OK)
        s = td_graph_create(ctx, &g);
    if (s == TD_OK)
        s = td_graph_input(g, "tokens", TD_I32, 2, dims, TD_SHARDED, &tokens);
    if (s == TD_OK)
        s = td_graph_input(g, "targets", TD_I32, 2, dims, TD_SHARDED, &targets);
    if (s == TD_OK)
        s = td_graph_input(g, "mask", TD_F32, 1, &B, TD_SHARDED, &mask);
    if (s == TD_OK)
        s = td_model_gpt_loss(g, tokens, targets, mask, &o->gpt, &loss);
    if (s == TD_OK)
        s = td_graph_params(g, 4096, params, &n);
    if (s == TD_OK)
        s = td_trainer_create(g, mesh, loss, n, params, &to, &t);
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    if (s == TD_OK)
        s = td_trainer_memory_report(t, 0, r);
    if (s != TD_OK)
        fprintf(stderr, "gpt_memory: %s b %lld T %lld: %s: %s\n", spec, (long long)per_device, (long long)T,
                td_status_name(s), ctx ? td_last_error(ctx) : "no context");
    td_trainer_destroy(t);
    td_context_destroy(ctx);
    return s == TD_OK;
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static double device_total(const td_memory_report *r)
{
    return mib(r->parameters + r->gradients + r->activations + r->step_words);
}

int main(int argc, char **argv)
{
    options o;
    memset(&o, 0, sizeof o);
    td_gpt_options_init(&o.gpt);
    o.seqs[0] = 64;
    o.n_seqs = 1;
    o.batches[0] = 1, o.batches[1] = 2, o.batches[2] = 4;
    o.n_batches = 3;
    o.devices[0] = 1, o.devices[1] = 2, o.devices[2] = 4;
    o.n_devices = 3;
    o.budget_mib = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--json")) {
            o.json = 1;
            used = 0;
        } else if (!strcmp(a, "--recompute")) {
            o.gpt.recompute = true;
            used = 0;
        } else if (!v) {
            used = -1;
        } else if (!strcmp(a, "--layers")) {
            o.gpt.layers = atoll(v);
        } else if (!strcmp(a, "--heads")) {
            o.gpt.heads = atoll(v);
        } else if (!strcmp(a, "--width")) {
            o.gpt.width = atoll(v);
        } else if (!strcmp(a, "--vocab")) {
            o.gpt.vocab = atoll(v);
        } else if (!strcmp(a, "--context")) {
            o.gpt.context = atoll(v);
        } else if (!strcmp(a, "--seq")) {
            used = (o.n_seqs = parse_list(v, o.seqs, 8)) > 0 ? 1 : -1;
        } else if (!strcmp(a, "--batches")) {
            used = (o.n_batches = parse_list(v, o.batches, 8)) > 0 ? 1 : -1;
        } else if (!strcmp(a, "--devices")) {
            used = (o.n_devices = parse_list(v, o.devices, 8)) > 0 ? 1 : -1;
        } else if (!strcmp(a, "--budget-mib")) {
            o.budget_mib = atof(v);
        } else {
            used = -1;
        }
        if (used < 0) {
            fprintf(stderr, "gpt_memory: bad argument %s (see the usage at the top of bench/gpt_memory.c)\n", a);
            return 2;
        }
        i += used;
    }
    for (int s = 0; s < o.n_seqs; s++)
        if (o.seqs[s] > o.gpt.context) {
            fprintf(stderr, "gpt_memory: --seq %lld exceeds --context %lld\n", (long long)o.seqs[s],
                    (long long)o.gpt.context);
            return 2;
        }
    if (!o.json)
        printf("%-4s %-6s %-5s %12s %12s %12s %12s %14s %10s\n", "N", "b", "T", "params_MiB", "grads_MiB",
               "activ_MiB", "optim_MiB", "attn_est_MiB", "activ/est");
    for (int d = 0; d < o.n_devices; d++)
        for (int s = 0; s < o.n_seqs; s++)
            for (int b = 0; b < o.n_batches; b++) {
                td_memory_report r;
                int64_t T = o.seqs[s];
                if (!measure(&o, o.devices[d], o.batches[b], T, &r))
                    return 1;
                double est = mib((uint64_t)(o.gpt.layers * o.batches[b] * o.gpt.heads * T * T) * 4);
                if (o.json)
                    printf("{\"bench\":\"gpt_memory\",\"layers\":%lld,\"heads\":%lld,\"width\":%lld,\"vocab\":%lld,"
                           "\"devices\":%lld,\"per_device_batch\":%lld,\"seq\":%lld,\"parameters\":%llu,"
                           "\"gradients\":%llu,\"activations\":%llu,\"optimizer_state\":%llu,\"attention_estimate\":%llu}\n",
                           (long long)o.gpt.layers, (long long)o.gpt.heads, (long long)o.gpt.width,
                           (long long)o.gpt.vocab, (long long)o.devices[d], (long long)o.batches[b], (long long)T,
                           (unsigned long long)r.parameters, (unsigned long long)r.gradients,
                           (unsigned long long)r.activations, (unsigned long long)r.optimizer_state,
                           (unsigned long long)(o.gpt.layers * o.batches[b] * o.gpt.heads * T * T * 4));
                else
                    printf("%-4lld %-6lld %-5lld %12.2f %12.2f %12.2f %12.2f %14.2f %10.2f\n", (long long)o.devices[d],
                           (long long)o.batches[b], (long long)T, mib(r.parameters), mib(r.gradients),
                           mib(r.activations), mib(r.optimizer_state), est, mib(r.activations) / est);
                fflush(stdout);
            }
    /* The largest per-device batch within the budget at the longest T:
     * the device holds parameters, gradients and activations; activations
     * grow by a fixed step per sequence. */
    int64_t T = o.seqs[o.n_seqs - 1];
    for (int d = 0; d < o.n_devices; d++) {
        td_memory_report r1, r2;
        if (!measure(&o, o.devices[d], 1, T, &r1) || !measure(&o, o.devices[d], 2, T, &r2))
            return 1;
        double step = device_total(&r2) - device_total(&r1), fixed = device_total(&r1) - step;
        int64_t fit = step > 0 ? (int64_t)((o.budget_mib - fixed) / step) : 0;
        td_memory_report at, over;
        while (fit > 0 && measure(&o, o.devices[d], fit, T, &at) && device_total(&at) > o.budget_mib)
            fit--; /* the fit's rounding, checked against the real plan */
        bool next_over = fit < 1 || (measure(&o, o.devices[d], fit + 1, T, &over) && device_total(&over) > o.budget_mib);
        if (o.json)
            printf("{\"bench\":\"gpt_memory_fit\",\"devices\":%lld,\"seq\":%lld,\"budget_mib\":%g,"
                   "\"per_device_batch\":%lld,\"global_batch\":%lld,\"next_exceeds\":%s}\n",
                   (long long)o.devices[d], (long long)T, o.budget_mib, (long long)fit,
                   (long long)(fit * o.devices[d]), next_over ? "true" : "false");
        else
            printf("budget %.0f MiB per device, T %lld, N %lld: per-device batch %lld (global %lld; %lld would not "
                   "fit: %s)\n",
                   o.budget_mib, (long long)T, (long long)o.devices[d], (long long)fit, (long long)(fit * o.devices[d]),
                   (long long)fit + 1, next_over ? "yes" : "NO");
    }
    return 0;
}
