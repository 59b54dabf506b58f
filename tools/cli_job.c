/* The job's devices and trace at the end of a run (see td_cli_job.h). */
#include "td_cli_job.h"

#include <stdlib.h>

#include "td_demo_processes.h"

uint32_t td_cli_job_devices(td_mesh *mesh, uint32_t processes, uint32_t trainer_devices)
{
    uint32_t global = 0, first = 0;
    if (processes > 1 && td_processes_mesh(mesh, &global, &first) == TD_OK)
        return global;
    if (trainer_devices == 0)
        td_mesh_size(mesh, &trainer_devices);
    return trainer_devices;
}

/* The split and the measured speeds of every device of the job (process
 * 0's devices first). */
static td_status job_values(td_context *ctx, td_mesh *mesh, td_trainer *trainer, uint32_t n_devices, double *rows,
                            double *speeds, uint32_t *n_rows, uint32_t *n_speeds)
{
    uint32_t n = 0, n_local_speeds = 0;
    double *local = calloc(n_devices + 1, sizeof *local);
    uint32_t *split = calloc(n_devices + 1, sizeof *split);
    td_status st = local && split ? td_trainer_split(trainer, n_devices, split, &n) : TD_ERR_OUT_OF_MEMORY;
    for (uint32_t d = 0; d < n && st == TD_OK; d++)
        local[d] = split[d];
    if (st == TD_OK)
        st = td_demo_job_values(ctx, mesh, local, n, n_devices, rows, n_rows);
    if (st == TD_OK)
        st = td_trainer_device_speeds(trainer, n_devices, local, &n_local_speeds);
    if (st == TD_OK)
        st = td_demo_job_values(ctx, mesh, local, n_local_speeds, n_devices, speeds, n_speeds);
    free(local);
    free(split);
    return st;
}

void td_cli_job_print_split(td_context *ctx, td_mesh *mesh, td_trainer *trainer, uint32_t n_devices, FILE *f)
{
    double *rows = calloc(n_devices + 1, sizeof *rows), *speeds = calloc(n_devices + 1, sizeof *speeds);
    uint32_t n_speeds = 0, n_rows = 0;
    fprintf(f, "\"split\":[");
    if (rows && speeds && job_values(ctx, mesh, trainer, n_devices, rows, speeds, &n_rows, &n_speeds) == TD_OK) {
        for (uint32_t d = 0; d < n_rows; d++)
            fprintf(f, "%s%.0f", d ? "," : "", rows[d]);
    }
    fputc(']', f);
    if (speeds && n_speeds && speeds[0] > 0.0) {
        fprintf(f, ",\"device_speeds\":[");
        for (uint32_t d = 0; d < n_speeds; d++) {
            fputs(d ? "," : "", f);
            td_cli_json_number(f, "%.1f", speeds[d]);
        }
        fputc(']', f);
    }
    free(rows);
    free(speeds);
}

int td_cli_trace_begin(const char *command, td_context *ctx, uint32_t process, const char **trace, char *buf,
                       size_t capacity)
{
    if (!*trace)
        return TD_CLI_EXIT_OK;
    if (process > 0) {
        snprintf(buf, capacity, "%s.%u", *trace, process);
        *trace = buf;
    }
    td_status st = td_trace_begin(ctx, *trace);
    return st == TD_OK ? TD_CLI_EXIT_OK : td_cli_fail(command, ctx, st, "--trace");
}

int td_cli_trace_finish(const char *command, td_context *ctx, uint32_t process, uint32_t processes, const char *path,
                        int rc)
{
    if (!td_trace_active(ctx))
        return rc;
    td_status st = td_trace_end(ctx);
    if (st != TD_OK) {
        const int failed = td_cli_fail(command, ctx, st, "writing --trace");
        return rc == TD_CLI_EXIT_OK ? failed : rc;
    }
    if (processes > 1 && rc == TD_CLI_EXIT_OK) {
        /* Every process's file is written (the sum is the barrier); process
         * 0 makes them one, a track per device of every process. */
        double written = 1.0;
        if ((st = td_processes_sum(ctx, &written, 1)) != TD_OK)
            return td_cli_fail(command, ctx, st, "waiting for the processes' traces");
        if (process == 0 && (rc = td_cli_trace_merge(path, processes)) == TD_CLI_EXIT_OK)
            printf("trace %s (%u processes)\n", path, processes);
        return rc;
    }
    printf("trace %s\n", path);
    return rc;
}

bool td_cli_balance_parse(const char *command, const char *text, td_balance *balance, uint32_t capacity, float *weights,
                          uint32_t *n_weights)
{
    /* A context of its own, for the library's message naming the weight
     * at fault; none yet exists this early. */
    td_context *ctx = NULL;
    if (td_context_create(NULL, &ctx) != TD_OK)
        ctx = NULL;
    const bool ok = td_balance_parse(ctx, text, balance, capacity, weights, n_weights) == TD_OK;
    if (!ok)
        fprintf(stderr, "tandem %s: --balance: %s (expected even, auto, or up to %u weights like 3,3,1)\n", command,
                ctx ? td_last_error(ctx) : text, capacity);
    td_context_destroy(ctx);
    return ok;
}
