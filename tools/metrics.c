/* The JSON-lines metrics file (see td_cli_metrics.h). Numbers only, so
 * fprintf is the whole encoder; NaN and infinities, which JSON cannot
 * hold, are written as null. */
#include "td_cli_metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

bool td_cli_metrics_open(td_cli_metrics *m, const char *path, bool append)
{
    m->file = NULL;
    m->error = 0;
    if (!path)
        return true;
    m->file = fopen(path, append ? "a" : "w");
    if (!m->file) {
        fprintf(stderr, "tandem train: --metrics '%s': %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

/* The stream's error flag keeps no reason: errno is read right after the
 * record whose write failed, while it still says why. */
static void note_error(td_cli_metrics *m)
{
    if (!m->error && ferror(m->file))
        m->error = errno ? errno : EIO;
}

static void number(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ",\"%s\":%.9g", key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

void td_cli_metrics_step(td_cli_metrics *m, const td_cli_step_record *r)
{
    if (!m->file)
        return;
    FILE *f = m->file;
    fprintf(f, "{\"kind\":\"step\"");
    if (!r->by_steps)
        fprintf(f, ",\"epoch\":%lld", (long long)r->epoch);
    fprintf(f, ",\"step\":%llu,\"steps\":%llu,\"global_step\":%llu", (unsigned long long)r->step,
            (unsigned long long)r->steps, (unsigned long long)r->global);
    if (r->by_steps)
        number(f, "progress", r->progress);
    else
        number(f, "progress", (double)(r->epoch - 1) + (double)r->step / (double)(r->steps ? r->steps : 1));
    number(f, "loss", r->loss);
    if (r->has_accuracy)
        number(f, "accuracy", r->accuracy);
    number(f, "lr", r->lr);
    number(f, "samples_per_second", r->samples_per_second);
    if (r->by_steps)
        number(f, "tokens_per_second", r->tokens_per_second);
    number(f, "seconds", r->seconds);
    fprintf(f, ",\"devices\":[");
    for (uint32_t d = 0; d < r->n_devices; d++) {
        const td_step_timing *t = &r->timing[d];
        fprintf(f, "%s{\"device\":%u,\"examples\":%u", d ? "," : "", d, r->split ? r->split[d] : 0);
        number(f, "upload", t->upload);
        number(f, "compute", t->compute);
        number(f, "allreduce", t->allreduce);
        number(f, "update", t->update);
        number(f, "download", t->download);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
    note_error(m);
}

void td_cli_metrics_epoch(td_cli_metrics *m, const td_cli_epoch_record *r)
{
    if (!m->file)
        return;
    FILE *f = m->file;
    fprintf(f, "{\"kind\":\"epoch\",\"epoch\":%lld", (long long)r->epoch);
    number(f, "train_loss", r->train_loss);
    if (r->has_accuracy)
        number(f, "train_accuracy", r->train_accuracy);
    number(f, "test_loss", r->test_loss);
    if (r->has_accuracy)
        number(f, "test_accuracy", r->test_accuracy);
    number(f, "seconds", r->seconds);
    number(f, "eval_seconds", r->eval_seconds);
    number(f, "samples_per_second", r->samples_per_second);
    fprintf(f, "}\n");
    /* An epoch line is worth having on disk if the run dies later. */
    fflush(f);
    note_error(m);
}

void td_cli_metrics_eval(td_cli_metrics *m, const td_cli_eval_record *r)
{
    if (!m->file)
        return;
    FILE *f = m->file;
    fprintf(f, "{\"kind\":\"eval\",\"step\":%llu", (unsigned long long)r->step);
    number(f, "progress", r->progress);
    if (r->has_train_loss)
        number(f, "train_loss", r->train_loss);
    number(f, "val_loss", r->val_loss);
    if (r->has_bits_per_byte)
        number(f, "val_bits_per_byte", r->val_bits_per_byte);
    fprintf(f, ",\"val_windows\":%zu", r->windows);
    number(f, "seconds", r->seconds);
    if (r->has_train_loss)
        number(f, "tokens_per_second", r->tokens_per_second);
    fprintf(f, "}\n");
    fflush(f);
    note_error(m);
}

bool td_cli_metrics_close(td_cli_metrics *m, const char *path)
{
    if (!m->file)
        return true;
    errno = 0;
    fflush(m->file);
    note_error(m);
    if (fclose(m->file) != 0 && !m->error)
        m->error = errno ? errno : EIO;
    m->file = NULL;
    if (m->error)
        fprintf(stderr, "tandem train: writing --metrics '%s': %s\n", path, strerror(m->error));
    return m->error == 0;
}
