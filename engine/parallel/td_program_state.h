/* The program's fields and its jobs, shared by the files of pmap only:
 * pmap_compile.c (compiling a graph for a mesh, and releasing it),
 * pmap_run.c (running it), pmap_params.c (parameter I/O) and program.c
 * (what they share). The rest of the engine sees td_program_internal.h. */
#ifndef TD_PROGRAM_STATE_H
#define TD_PROGRAM_STATE_H

#include "td_program_internal.h"

#define TD_NO_PIECE_STEP UINT32_MAX

/* What a program holds on one device. */
typedef struct td_program_device {
    td_buffer *buffers[TD_BUF_COUNT];
    td_segment **segments; /* per step; NULL for collective steps */
    /* For traces, which time every kernel alone: the plan's calls (kept
     * from compile) and one segment per call, made on the first traced run. */
    td_kernel_call *calls;
    td_segment **call_segments;
    const char **call_names; /* the graph op behind each of its plan's calls */
    double phase_seconds[TD_PHASE_COUNT]; /* the last run's, host clock (td_program_phase) */
    double collective_seconds;            /* the last run's time inside in-graph collectives */
    /* The bucketed schedule (td_program_set_buckets), made on the first run
     * after a compile: the steps' calls cut after each bucket's last call;
     * after piece i, buckets piece_buckets[i-1] .. piece_buckets[i]-1 of
     * bucket_order run. n_pieces 0 when not made (or not possible). */
    uint32_t n_pieces;
    uint32_t *piece_first, *piece_calls, *piece_buckets;
    uint32_t *piece_step; /* a collective step's index, or TD_NO_PIECE_STEP for calls */
    uint32_t *bucket_order; /* the buckets in the order every device runs them */
    td_segment **piece_segments;
    bool pieces_tried;
    uint32_t buckets_done; /* this run's, before the hook */
    double bucket_seconds; /* this run's time in the bucket function (inside the compute phase) */
} td_program_device;

/* Work for every device's worker at once (td_program_on_devices). */
typedef td_status (*td_program_device_fn)(td_program *p, uint32_t position);

struct td_program {
    td_owned owned;
    td_context *ctx;
    td_mesh *mesh;
    td_ring *ring; /* the mesh's, shared with every program on it */
    uint32_t n_dev;
    td_graph graph; /* a private copy of the nodes, so the caller's graph may go */
    /* One plan per row count in the split (shapes and arenas follow the
     * rows): one on an even split, shared by every device. */
    td_plan *plans;
    uint32_t n_plans;
    uint32_t *plan_of; /* per device: its plan's index in plans */
    /* The batch split (td_program_set_split): rows per device, and the
     * global index of each device's first example, of a global batch of
     * split_total over split_devices devices; split_total 0 = each sharded
     * input divided evenly. Set for the mesh the next plan is for. */
    uint32_t *split_rows;
    uint64_t *split_start;
    uint32_t split_devices;
    uint64_t split_total;
    uint32_t n_outputs;
    td_node *outputs;
    size_t *output_offset; /* into out_host, per output; each holds n_dev copies */
    float *out_host;
    float *param_init; /* every parameter's initial values, laid out as the parameter buffer */
    /* The step buffer's host image, per device (plan.size[TD_BUF_STEP]
     * words each): the example offsets are fixed at compile, the step is
     * refreshed before every run. */
    uint32_t *step_words;
    uint64_t step;
    td_program_device *devs;
    /* What a re-plan needs (td_program_refresh): the compile's arguments. */
    bool training;
    /* td_gemm_precision of every GEMM the plan emits (the trainer's and
     * evaluator's td_precision; td_pmap_compile: fp32). */
    int32_t gemm_precision;
    uint32_t n_grads;
    td_node *grad_params, *grad_nodes;
    bool planned;         /* plan holds a built plan */
    bool stale;           /* the mesh dropped devices: nothing is on the devices, plan again before use */
    float *saved_params;  /* the parameters read back before the devices went, for the re-plan */
    uint64_t saved_elems; /* their count */
    const char *trace_name;  /* the device tracks' name for one run: "run", "step", "evaluate" */
    const td_tensor **bound; /* per node, during a run */
    td_program_hook hook;
    void *hook_user;
    uint32_t n_buckets; /* td_program_set_buckets */
    size_t *bucket_bounds;
    td_program_bucket_fn bucket_begin_fn; /* NULL: each bucket's fn right when it is ready */
    td_program_bucket_fn bucket_fn;
    void *bucket_user;
    bool phase_waits; /* wait for the device at the phase boundaries (td_program_set_phase_waits) */
    size_t ring_bytes;
    /* the job running on the devices, and its arguments */
    td_program_device_fn job;
    td_node job_node;
    uint32_t job_device;
    const void *job_src;
    void *job_dst;
};

/* Runs fn on every device's worker at once and waits for all of them
 * (each bounded by the context timeout); returns the first failure. A
 * device that fails aborts the ring so its peers return instead of
 * waiting; a ring failed by an earlier job is reset first (no worker is
 * inside a collective between jobs). */
td_status td_program_on_devices(td_program *p, td_program_device_fn fn);

/* Frees device pos's bucketed schedule (pmap_buckets.c); it is made again
 * on the next run. */
void td_program_free_pieces(td_program *p, uint32_t pos);
/* Makes device pos's bucketed schedule (once per compile; on failure, or
 * for a plan with in-graph collectives, n_pieces stays 0). */
td_status td_program_make_pieces(td_program *p, uint32_t pos);

/* Device pos's plan. */
static inline const td_plan *td_program_device_plan(const td_program *p, uint32_t pos)
{
    return &p->plans[p->plan_of[pos]];
}

/* The global index of device pos's first example: the rows of the devices
 * before it under the split, or pos x `rows` on an even split. */
uint64_t td_program_row_start(const td_program *p, uint32_t pos, int64_t rows);

/* This process's rows of the global batch (all of it in one process) and,
 * in *first, the global index of its first: the bound inputs hold these
 * rows only. `rows` is a device's share on an even split. */
uint64_t td_program_process_rows(const td_program *p, int64_t rows, uint64_t *first);

/* TD_OK when t is a `dtype` tensor of shape `want`; otherwise a status and
 * a message naming the public call `fn`, the `what` ("input",
 * "parameter", ...) called `name`, what the tensor has and what was
 * expected (a wrong dtype by the one rule, td_dtype_error). */
td_status td_program_check_tensor(td_context *ctx, const char *fn, const td_tensor *t, td_dtype dtype,
                                  const td_shape *want, const char *what, const char *name);

#endif
