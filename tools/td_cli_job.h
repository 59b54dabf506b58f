/* What every training command reports about the job's devices at its end,
 * and how it ends its trace: shared by `tandem train`'s loops (epochs for
 * the classifiers, steps for the GPT), one process or several. */
#ifndef TD_CLI_JOB_H
#define TD_CLI_JOB_H

#include "td_cli.h"

/* The devices the run is on now: every process's (across processes), or
 * `trainer_devices` when not 0, or the mesh's. */
uint32_t td_cli_job_devices(td_mesh *mesh, uint32_t processes, uint32_t trainer_devices);

/* Prints `"split":[...]` (examples per device of a global batch, every
 * device of the job, process 0's first) and, when the balancer measured
 * them, `,"device_speeds":[...]` for the final JSON line. n_devices: the
 * job's. Collective across processes. */
void td_cli_job_print_split(td_context *ctx, td_mesh *mesh, td_trainer *trainer, uint32_t n_devices, FILE *f);

/* --balance TEXT through td_balance_parse; false after printing the
 * library's message naming what is wrong (a weight that is no positive
 * normal float among them). */
bool td_cli_balance_parse(const char *command, const char *text, td_balance *balance, uint32_t capacity, float *weights,
                          uint32_t *n_weights);

/* Starts --trace (`*trace`, NULL: none): across processes process q > 0
 * writes FILE.q, built in buf, and *trace then points at it (the merge at
 * td_cli_trace_finish reads them). Returns an exit code. */
int td_cli_trace_begin(const char *command, td_context *ctx, uint32_t process, const char **trace, char *buf,
                       size_t capacity);

/* Ends a run's --trace (written whatever the outcome `rc`: a trace of a
 * failed run is the one wanted most); across processes, once every file is
 * written, process 0 merges them into `path`. Returns `rc`, or the failure
 * when rc was OK. */
int td_cli_trace_finish(const char *command, td_context *ctx, uint32_t process, uint32_t processes, const char *path,
                        int rc);

#endif
