/* The CPU backend: a simulated device is host memory plus the worker thread
 * that drives it. Its "queue" executes each enqueued operation at once on
 * that thread, so tickets are complete as soon as they are issued. GEMM goes
 * to CBLAS with one BLAS thread per calling thread, in tiles a cancel can
 * stop between (cpu_gemm.c); everything else runs the reference kernels.
 * When the context's host pool has more threads than CPU devices, a call
 * is split into parts (cpu_split.c) and a run of independent GEMMs (a
 * batched product's) into its calls, which the device's worker and the
 * pool's spare threads run together. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cpu_epilogue.h"
#include "cpu_gemm.h"
#include "cpu_gemm_bf16.h"
#include "cpu_gemm_own_fma.h"
#include "cpu_split.h"
#include "td_backend.h"
#include "td_context_internal.h"
#include "td_host_pool.h"
#include "td_platform.h"
#include "td_reference.h"

struct td_device {
    td_context *ctx;
    uint32_t instance;
    uint64_t ticket;
    /* Set once, by cpu_cancel from another thread; read by this device's
     * worker between kernel calls and GEMM tiles (atomics on both sides). */
    bool cancelled;
    td_host_pool *pool; /* the context's; this device is one of its users */
    bool told_bf16;     /* the note that bf16 runs without bf16 instructions was logged */
};

struct td_buffer {
    size_t bytes;
    float *data;
};

struct td_staging {
    void *data;
};

struct td_segment {
    size_t count;
    td_kernel_call *calls;
    /* run_end[i]: one past the last call of the run of mutually
     * independent GEMMs starting at call i (i + 1 when none follows). */
    uint32_t *run_end;
    /* epilogue[i]: how many elementwise calls after GEMM call i run on
     * each block of its rows as soon as it is computed, or after
     * POOL_BACKWARD call i on each block of its images (cpu_epilogue.h);
     * 0 for every other call. */
    uint8_t *epilogue;
    /* prologue[i]: IM2COL call i - 1 runs block by block before GEMM call
     * i's rows, whole images at a time (td_cpu_prologue_im2col). */
    uint8_t *prologue;
    /* Read at segment_create (TD_CPU_GEMM, or the own one in deterministic
     * mode), as the OpenCL backend reads TD_OPENCL_GEMM: a benchmark can
     * time both engines on one device. */
    td_cpu_gemm_engine gemm_engine;
};

/* OpenBLAS keeps a process-wide thread count. Device threads and the host
 * pool already give the parallelism, splitting a GEMM by rows so the bits
 * do not depend on the thread count; BLAS threads on top would
 * oversubscribe the cores. The symbols are weak so that another CBLAS
 * still links. */
extern void openblas_set_num_threads(int) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern int blas_thread_shutdown_(void) __attribute__((weak));

/* One BLAS thread, and none of OpenBLAS's server threads left running.
 * Its pthreads build starts them as the library loads, and each watches
 * for work with sched_yield for about 0.1 s before it sleeps: a third
 * runnable thread on a 2-core machine for the first tenth of a second of
 * every process, during which linear regression's steps on cpu:1 took
 * 7.5-15.7 us against 5.9-7.1 with OPENBLAS_NUM_THREADS=1 set beforehand
 * (bench/RESULTS.md). With one thread OpenBLAS never uses them; a later
 * threaded call (an embedding program's own) starts them again. A
 * process-wide setting, like the count: done when the count is not
 * already one. */
static void quiet_openblas_threads(void)
{
    if (!openblas_set_num_threads || (openblas_get_num_threads && openblas_get_num_threads() == 1))
        return;
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
}

static td_status cpu_probe(td_context *ctx, td_backend_info *info)
{
    snprintf(info->name, sizeof info->name, "cpu");
    info->available = true;
    info->device_count = 1; /* the host; "cpu:N" opens N instances of it */
    info->reason[0] = '\0';
    /* No run-time library to name: say instead which GEMM engine new
     * segments get (segment_create's rule), and on which code path. */
    const bool deterministic = ctx && td_context_deterministic(ctx);
    const td_cpu_gemm_engine engine = deterministic ? TD_CPU_GEMM_OWN : td_cpu_gemm_engine_chosen();
    if (engine == TD_CPU_GEMM_OWN_FMA)
        snprintf(info->runtime, sizeof info->runtime, "GEMM own-fma (%s)",
                 td_cpu_gemm_own_fma_isa_name(td_cpu_gemm_own_fma_best_isa()));
    else
        snprintf(info->runtime, sizeof info->runtime, "GEMM %s%s", td_cpu_gemm_engine_name(engine),
                 deterministic ? " (deterministic mode)" : "");
    return TD_OK;
}

static td_status cpu_describe(td_context *ctx, uint32_t index, td_device_info *info)
{
    if (index != 0)
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "cpu device %u does not exist (the host is cpu device 0)",
                            index);
    memset(info, 0, sizeof *info);
    snprintf(info->backend, sizeof info->backend, "cpu");
    info->index = 0;
    td_platform_cpu_name(info->name, sizeof info->name, info->vendor, sizeof info->vendor);
    snprintf(info->driver_version, sizeof info->driver_version, "tandem %s", TD_VERSION_STRING);
    snprintf(info->language_version, sizeof info->language_version, "C11");
    info->compute_units = 1; /* one worker thread per simulated device */
    info->global_memory = td_platform_physical_memory();
    info->max_allocation = info->global_memory;
    info->max_buffer_range = info->global_memory;
    info->max_workgroup_size = 1;
    info->subgroup_size = 1;
    info->unified_memory = true;
    return TD_OK;
}

static td_status cpu_open(td_context *ctx, uint32_t index, uint32_t instance, td_device **out)
{
    if (index != 0)
        return td_error_set(ctx, TD_ERR_UNKNOWN_DEVICE, "cpu device %u does not exist", index);
    td_device *dev = td_alloc_zeroed(ctx, sizeof *dev);
    if (!dev)
        return TD_OOM(ctx, "a cpu device", sizeof *dev);
    dev->ctx = ctx;
    dev->instance = instance;
    dev->pool = td_context_host_pool_acquire(ctx);
    if (!dev->pool) { /* out of memory, recorded by the pool */
        td_free(ctx, dev);
        return TD_ERR_OUT_OF_MEMORY;
    }
    quiet_openblas_threads();
    *out = dev;
    return TD_OK;
}

static void cpu_close(td_device *dev)
{
    td_context_host_pool_release(dev->ctx);
    td_free(dev->ctx, dev);
}

static td_status cpu_buffer_create(td_device *dev, size_t bytes, td_buffer **out)
{
    td_buffer *buf = td_alloc_zeroed(dev->ctx, sizeof *buf);
    float *data = td_alloc(dev->ctx, bytes);
    if (!buf || !data) {
        td_free(dev->ctx, buf);
        td_free(dev->ctx, data);
        return TD_OOM(dev->ctx, "a cpu device buffer", bytes);
    }
    buf->bytes = bytes;
    buf->data = data;
    *out = buf;
    return TD_OK;
}

static void cpu_buffer_destroy(td_device *dev, td_buffer *buf)
{
    if (!buf)
        return;
    td_free(dev->ctx, buf->data);
    td_free(dev->ctx, buf);
}

static void *cpu_buffer_host_pointer(td_device *dev, td_buffer *buf)
{
    (void)dev;
    return buf->data;
}

static td_status cpu_staging_create(td_device *dev, size_t bytes, td_staging **out, void **host)
{
    td_staging *st = td_alloc_zeroed(dev->ctx, sizeof *st);
    void *data = td_alloc_aligned(dev->ctx, bytes, 4096);
    if (!st || !data) {
        td_free(dev->ctx, st);
        td_free(dev->ctx, data);
        return TD_OOM(dev->ctx, "cpu staging memory", bytes);
    }
    st->data = data;
    *out = st;
    *host = data;
    return TD_OK;
}

static void cpu_staging_destroy(td_device *dev, td_staging *st)
{
    if (!st)
        return;
    td_free(dev->ctx, st->data);
    td_free(dev->ctx, st);
}

static td_status check_range(td_device *dev, const td_buffer *buf, size_t offset, size_t bytes, const char *what)
{
    if (offset > buf->bytes || bytes > buf->bytes - offset)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "cpu %s of %zu bytes at offset %zu runs past the %zu-byte buffer", what, bytes, offset,
                            buf->bytes);
    return TD_OK;
}

static td_status cpu_write(td_device *dev, td_buffer *dst, size_t offset, const void *host, size_t bytes)
{
    td_status s = check_range(dev, dst, offset, bytes, "write");
    if (s == TD_OK && bytes)
        memmove((char *)dst->data + offset, host, bytes);
    return s;
}

static td_status cpu_read(td_device *dev, td_buffer *src, size_t offset, void *host, size_t bytes)
{
    td_status s = check_range(dev, src, offset, bytes, "read");
    if (s == TD_OK && bytes)
        memmove(host, (char *)src->data + offset, bytes);
    return s;
}

static td_status cpu_copy(td_device *dev, td_buffer *src, size_t src_offset, td_buffer *dst, size_t dst_offset,
                          size_t bytes)
{
    td_status s = check_range(dev, src, src_offset, bytes, "copy source");
    if (s == TD_OK)
        s = check_range(dev, dst, dst_offset, bytes, "copy destination");
    if (s == TD_OK && bytes)
        memmove((char *)dst->data + dst_offset, (char *)src->data + src_offset, bytes);
    return s;
}

static float *at(const td_arg *arg)
{
    return arg->buffer ? arg->buffer->data + arg->offset : NULL;
}

/* One kernel call on the host; false when a cancel stopped it part way. */
static bool run_call(td_device *dev, td_cpu_gemm_engine gemm_engine, const td_kernel_call *c)
{
    switch (c->kernel) {
    case TD_KERNEL_FILL: td_reference_fill(at(&c->out), c->n, c->alpha); break;
    case TD_KERNEL_COPY: td_reference_copy(at(&c->out), at(&c->a), c->n); break;
    case TD_KERNEL_ELEMENTWISE: td_reference_elementwise(at(&c->out), at(&c->a), at(&c->b), &c->p.ew); break;
    case TD_KERNEL_REDUCE: td_reference_reduce(at(&c->out), at(&c->a), &c->p.reduce); break;
    case TD_KERNEL_GEMM:
        if (c->p.gemm.precision == TD_GEMM_BF16) /* deterministic: the rule that is the same on every CPU */
            return td_cpu_gemm_bf16(&c->p.gemm, at(&c->out), at(&c->a), at(&c->b),
                                    td_context_deterministic(dev->ctx) ? TD_CPU_BF16_PORTABLE : TD_CPU_BF16_FASTEST,
                                    &dev->cancelled);
        return td_cpu_gemm(&c->p.gemm, at(&c->out), at(&c->a), at(&c->b), gemm_engine, &dev->cancelled);
    case TD_KERNEL_XENT_FORWARD:
        td_reference_xent_forward(at(&c->out), at(&c->out2), at(&c->a), (const int32_t *)at(&c->b), &c->p.xent);
        break;
    case TD_KERNEL_XENT_BACKWARD:
        td_reference_xent_backward(at(&c->out), at(&c->a), (const int32_t *)at(&c->b), at(&c->c), &c->p.xent);
        break;
    case TD_KERNEL_SOFTMAX: td_reference_softmax(at(&c->out), at(&c->a), &c->p.rows); break;
    case TD_KERNEL_LAYER_NORM: td_reference_layer_norm(at(&c->out), at(&c->out2), at(&c->a), &c->p.rows); break;
    case TD_KERNEL_LAYER_NORM_BACKWARD:
        td_reference_layer_norm_backward(at(&c->out), at(&c->a), at(&c->b), at(&c->c), &c->p.rows);
        break;
    case TD_KERNEL_ARGMAX: td_reference_argmax(at(&c->out), at(&c->a), &c->p.rows); break;
    case TD_KERNEL_CAST: td_reference_cast(at(&c->out), at(&c->a), &c->p.cast); break;
    case TD_KERNEL_DROPOUT_MASK:
        td_reference_dropout_mask(at(&c->out), (const uint32_t *)at(&c->b), &c->p.dropout);
        break;
    case TD_KERNEL_GATHER_ROWS:
        td_reference_gather_rows(at(&c->out), at(&c->a), (const int32_t *)at(&c->b), &c->p.gather);
        break;
    case TD_KERNEL_SCATTER_ADD_ROWS:
        td_reference_scatter_add_rows(at(&c->out), at(&c->a), (const int32_t *)at(&c->b), &c->p.gather);
        break;
    case TD_KERNEL_IM2COL: td_reference_im2col(at(&c->out), at(&c->a), &c->p.conv); break;
    case TD_KERNEL_COL2IM: td_reference_col2im(at(&c->out), at(&c->a), &c->p.conv); break;
    case TD_KERNEL_POOL: td_reference_pool(at(&c->out), at(&c->a), &c->p.pool); break;
    case TD_KERNEL_POOL_BACKWARD:
        td_reference_pool_backward(at(&c->out), at(&c->a), at(&c->b), at(&c->c), &c->p.pool);
        break;
    default: break;
    }
    return true;
}

/* The row kernels index with caller-given ids and sizes: their ranges are
 * checked here so that a bad call is a status, not a stray host access. */
static td_status check_row_call(td_device *dev, size_t i, const td_kernel_call *c)
{
    static const char *const slot_names[TD_ROW_SLOTS] = {"out", "out2", "a", "b", "c"};
    const td_arg *args[TD_ROW_SLOTS] = {&c->out, &c->out2, &c->a, &c->b, &c->c};
    int64_t need[TD_ROW_SLOTS];
    char why[160];
    if (td_row_kernel_extents(c, need, why, sizeof why) != 0)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu segment call %zu (%s): %s", i,
                            td_kernel_name(c->kernel), why);
    for (int s = 0; s < TD_ROW_SLOTS; s++) {
        if (need[s] == 0)
            continue;
        const td_arg *a = args[s];
        if (!a->buffer)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu segment call %zu (%s): %s has no buffer", i,
                                td_kernel_name(c->kernel), slot_names[s]);
        uint64_t elems = a->buffer->bytes / 4;
        if (a->offset > elems || (uint64_t)need[s] > elems - a->offset)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                                "cpu segment call %zu (%s): %s needs elements up to %llu + %lld but its buffer "
                                "holds %llu",
                                i, td_kernel_name(c->kernel), slot_names[s], (unsigned long long)a->offset,
                                (long long)need[s], (unsigned long long)elems);
    }
    return TD_OK;
}

/* Elements [offset, offset + count) of arg must lie in its buffer. */
static td_status check_elems(td_device *dev, size_t i, const td_kernel_call *c, const char *aname, const td_arg *arg,
                             int64_t count)
{
    if (count <= 0)
        return TD_OK;
    const char *kname = td_kernel_name(c->kernel);
    if (!arg->buffer)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu segment call %zu (%s): %s has no buffer", i,
                            kname, aname);
    uint64_t elems = arg->buffer->bytes / 4;
    if (arg->offset > elems || (uint64_t)count > elems - arg->offset)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT,
                            "cpu segment call %zu (%s): %s needs elements %llu + %lld but its buffer holds %llu", i,
                            kname, aname, (unsigned long long)arg->offset, (long long)count,
                            (unsigned long long)elems);
    return TD_OK;
}

/* The convolution and pooling kernels index with the call's geometry, so
 * it and every argument's range are checked before they are accepted. */
static td_status check_conv_call(td_device *dev, size_t i, const td_kernel_call *c)
{
    bool pool = c->kernel == TD_KERNEL_POOL || c->kernel == TD_KERNEL_POOL_BACKWARD;
    const td_conv_params *g = pool ? &c->p.pool.geo : &c->p.conv;
    const char *why = pool ? td_pool_check(&c->p.pool) : td_conv_check(g, 0);
    if (why)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu segment call %zu (%s): %s", i,
                            td_kernel_name(c->kernel), why);
    int64_t image = td_conv_image_count(g), patches = td_conv_patch_count(g), pooled = td_conv_pooled_count(g);
    td_status st = TD_OK;
    switch (c->kernel) {
    case TD_KERNEL_IM2COL:
        st = check_elems(dev, i, c, "patches (out)", &c->out, patches);
        if (st == TD_OK && patches > 0)
            st = check_elems(dev, i, c, "image (a)", &c->a, image);
        break;
    case TD_KERNEL_COL2IM:
        st = check_elems(dev, i, c, "image (out)", &c->out, image);
        if (st == TD_OK && image > 0)
            st = check_elems(dev, i, c, "patches (a)", &c->a, patches);
        break;
    case TD_KERNEL_POOL:
        st = check_elems(dev, i, c, "y (out)", &c->out, pooled);
        if (st == TD_OK && pooled > 0)
            st = check_elems(dev, i, c, "x (a)", &c->a, image);
        break;
    default: /* POOL_BACKWARD */
        st = check_elems(dev, i, c, "gx (out)", &c->out, image);
        if (st == TD_OK && image > 0 && c->p.pool.mode == TD_POOL_MAX)
            st = check_elems(dev, i, c, "x (a)", &c->a, image);
        if (st == TD_OK && image > 0 && c->p.pool.mode == TD_POOL_MAX)
            st = check_elems(dev, i, c, "y (b)", &c->b, pooled);
        if (st == TD_OK && image > 0)
            st = check_elems(dev, i, c, "gy (c)", &c->c, pooled);
        break;
    }
    return st;
}

/* Runs of GEMMs (and REDUCEs) that touch disjoint outputs and read nothing
 * another writes: a batched product lowers to one GEMM per batch entry, each
 * too small to split, so the pool runs the calls themselves side by side;
 * a convolution's bias gradient (a REDUCE over dY) and its kernel gradient
 * (a GEMM reading dY) likewise, where neither splits (run_side_by_side). */
static void find_gemm_runs(const td_kernel_call *calls, size_t count, uint32_t *run_end)
{
    size_t i = 0;
    while (i < count) {
        size_t end = i + 1;
        if (!td_cpu_calls_conflict(&calls[i], &calls[i])) {
            while (end < count) {
                bool free_of_run = !td_cpu_calls_conflict(&calls[end], &calls[end]);
                for (size_t j = i; free_of_run && j < end; j++)
                    free_of_run = !td_cpu_calls_conflict(&calls[j], &calls[end]);
                if (!free_of_run)
                    break;
                end++;
            }
        }
        for (size_t j = i; j < end; j++)
            run_end[j] = (uint32_t)end;
        i = end;
    }
}

static td_status cpu_segment_create(td_device *dev, const td_kernel_call *calls, size_t count, td_segment **out)
{
    for (size_t i = 0; i < count; i++) {
        if (calls[i].kernel < 0 || calls[i].kernel >= TD_KERNEL_COUNT)
            return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "kernel call %zu has unknown kernel id %d", i,
                                calls[i].kernel);
        if (td_is_row_kernel(calls[i].kernel)) {
            td_status s = check_row_call(dev, i, &calls[i]);
            if (s != TD_OK)
                return s;
        }
    }
    for (size_t i = 0; i < count; i++) {
        int32_t k = calls[i].kernel;
        td_status st = TD_OK;
        if (k == TD_KERNEL_IM2COL || k == TD_KERNEL_COL2IM || k == TD_KERNEL_POOL || k == TD_KERNEL_POOL_BACKWARD)
            st = check_conv_call(dev, i, &calls[i]);
        char why[160];
        if (k == TD_KERNEL_GEMM && td_gemm_check(&calls[i].p.gemm, why, sizeof why) != 0)
            st = td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu segment call %zu (gemm): %s", i, why);
        /* FILL and COPY take their count from the caller as it is, as the
         * row kernels do; the GPU backends refuse the same calls. */
        if (k == TD_KERNEL_FILL || k == TD_KERNEL_COPY)
            st = check_elems(dev, i, &calls[i], "out", &calls[i].out, calls[i].n);
        if (st == TD_OK && k == TD_KERNEL_COPY)
            st = check_elems(dev, i, &calls[i], "a", &calls[i].a, calls[i].n);
        if (st != TD_OK)
            return st;
    }
    if (count > UINT32_MAX - 1)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu segment of %zu calls: at most %u are taken",
                            count, UINT32_MAX - 1);
    td_segment *seg = td_alloc_zeroed(dev->ctx, sizeof *seg);
    td_kernel_call *copy = td_alloc(dev->ctx, sizeof *copy * (count ? count : 1));
    uint32_t *run_end = td_alloc(dev->ctx, sizeof *run_end * (count ? count : 1));
    uint8_t *epilogue = td_alloc_zeroed(dev->ctx, count ? count : 1);
    uint8_t *prologue = td_alloc_zeroed(dev->ctx, count ? count : 1);
    if (!seg || !copy || !run_end || !epilogue || !prologue) {
        td_free(dev->ctx, seg);
        td_free(dev->ctx, copy);
        td_free(dev->ctx, run_end);
        td_free(dev->ctx, epilogue);
        td_free(dev->ctx, prologue);
        return TD_OOM(dev->ctx, "a cpu segment", (sizeof *copy + sizeof *run_end + 2) * count);
    }
    if (count)
        memcpy(copy, calls, sizeof *copy * count);
    find_gemm_runs(copy, count, run_end);
    const bool epilogues = td_cpu_epilogues_on();
    for (size_t i = 0; i < count && epilogues; i++)
        if (run_end[i] == i + 1)
            epilogue[i] = (uint8_t)td_cpu_epilogue_length(copy, count, i);
    for (size_t i = 0; i < count && epilogues; i++)
        if (copy[i].kernel == TD_KERNEL_POOL_BACKWARD)
            epilogue[i] = (uint8_t)td_cpu_pool_backward_epilogue_length(copy, count, i);
    for (size_t i = 1; i < count && epilogues; i++)
        if (run_end[i] == i + 1 && run_end[i - 1] == i && !prologue[i - 1])
            prologue[i] = td_cpu_prologue_im2col(copy, count, i, epilogue[i]);
    seg->count = count;
    seg->calls = copy;
    seg->run_end = run_end;
    seg->epilogue = epilogue;
    seg->prologue = prologue;
    /* bf16 without AVX512_BF16 gives bf16's answers at fp32's speed at
     * best: said once per device, so a user who asked for speed knows. */
    for (size_t i = 0; i < count && !dev->told_bf16; i++)
        if (copy[i].kernel == TD_KERNEL_GEMM && copy[i].p.gemm.precision == TD_GEMM_BF16 &&
            (td_context_deterministic(dev->ctx) || !td_cpu_gemm_bf16_native())) {
            dev->told_bf16 = true;
            td_log(dev->ctx, TD_LOG_INFO,
                   "cpu device %u: bf16 matrix products run as float arithmetic on rounded inputs (%s): the same "
                   "answers as bf16 hardware within float rounding, no faster than fp32",
                   dev->instance,
                   td_context_deterministic(dev->ctx) ? "deterministic mode" : "no AVX512_BF16 here, or TD_CPU_BF16=portable");
        }
    /* Deterministic mode: the own GEMM, whose sums have one order on
     * every CPU (OpenBLAS's depend on the CPU model). */
    seg->gemm_engine = td_context_deterministic(dev->ctx) ? TD_CPU_GEMM_OWN : td_cpu_gemm_engine_chosen();
    *out = seg;
    return TD_OK;
}

/* One job of the pool: the parts of one call, or the calls of one run. */
typedef struct shared_run {
    td_device *dev;
    td_cpu_gemm_engine gemm_engine;
    const td_kernel_call *calls; /* the split call, or the run's first call */
    int64_t parts;               /* > 0: parts of calls[0]; 0: the run's calls */
    bool stopped;                /* a part saw the cancel (atomic) */
    size_t epilogue;             /* calls after calls[0] run on each block of its rows */
    int64_t granule;             /* with an epilogue: parts and blocks start at multiples of it */
    const td_kernel_call *im2col; /* with an epilogue: its prologue, or NULL */
    bool pool_chain;             /* calls[0] a POOL_BACKWARD with `epilogue` calls, in parts of images */
} shared_run;

/* Images [image0, image0 + images) of POOL_BACKWARD calls[0] in blocks,
 * each followed by the chain's calls[1..epilogue] over the same images'
 * pixels (cpu_epilogue.h): ReLU's gradient reads the pooling's gradient
 * and the activation from cache, not memory. */
static bool run_pool_backward_chain(td_device *dev, td_cpu_gemm_engine gemm_engine, const td_kernel_call *calls,
                                    size_t epilogue, int64_t image0, int64_t images)
{
    const td_conv_params *g = &calls[0].p.pool.geo;
    const int64_t block = td_cpu_pool_backward_block_images(&calls[0]), pixels = g->h * g->w;
    int64_t n;
    for (int64_t i = image0; i < image0 + images; i += n) {
        if (__atomic_load_n(&dev->cancelled, __ATOMIC_ACQUIRE)) /* between blocks, as between GEMM tiles */
            return false;
        n = image0 + images - i < block ? image0 + images - i : block;
        td_kernel_call sub;
        td_cpu_split_units(&calls[0], i, n, &sub);
        if (!run_call(dev, gemm_engine, &sub))
            return false;
        for (size_t e = 1; e <= epilogue; e++) {
            td_cpu_epilogue_rows(&calls[e], g->c, i * pixels, n * pixels, &sub);
            run_call(dev, gemm_engine, &sub);
        }
    }
    return true;
}

/* GEMM `part` (calls[0] or a part of it) in blocks of rows, each followed
 * by the epilogue calls calls[1..epilogue] over the same rows while the
 * block is in cache. Blocks start at multiples of the chain's granule
 * (td_cpu_epilogue_granule: the engine's part rows, and whole bands of
 * windows for a final pooling) from C's first row, as parts do, and the
 * last takes the remainder: the GEMM's bits are the whole call's
 * (cpu_gemm.c). */
static bool run_gemm_with_epilogue(td_device *dev, td_cpu_gemm_engine gemm_engine, const td_kernel_call *part,
                                   const td_kernel_call *calls, size_t epilogue, int64_t granule,
                                   const td_kernel_call *im2col)
{
    const td_gemm_params *g = &part->p.gemm;
    const int64_t first = (int64_t)(part->out.offset - calls[0].out.offset) / g->ldc;
    const int64_t block = td_cpu_epilogue_block_rows(g->n, granule);
    int64_t rows;
    for (int64_t i = 0; i < g->m; i += rows) {
        rows = g->m - i < 2 * block ? g->m - i : block;
        td_kernel_call tile = *part;
        tile.p.gemm.m = rows;
        tile.out.offset += (uint64_t)(i * g->ldc);
        tile.a.offset += (uint64_t)(g->trans_a ? i : i * g->lda);
        if (im2col) { /* the block's patches first, while they fit in L2 */
            td_kernel_call patches;
            td_cpu_prologue_rows(im2col, first + i, rows, &patches);
            run_call(dev, gemm_engine, &patches);
        }
        if (!run_call(dev, gemm_engine, &tile))
            return false;
        for (size_t e = 1; e <= epilogue; e++) {
            td_kernel_call sub;
            td_cpu_epilogue_rows(&calls[e], g->n, first + i, rows, &sub);
            run_call(dev, gemm_engine, &sub);
        }
    }
    return true;
}

static void run_task(void *arg, int64_t task)
{
    shared_run *r = arg;
    if (__atomic_load_n(&r->dev->cancelled, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&r->stopped, true, __ATOMIC_RELEASE);
        return;
    }
    td_kernel_call part;
    const td_kernel_call *c = &r->calls[task];
    if (r->pool_chain) {
        const int64_t n = r->calls[0].p.pool.geo.n, first = task * n / r->parts, next = (task + 1) * n / r->parts;
        if (!run_pool_backward_chain(r->dev, r->gemm_engine, r->calls, r->epilogue, first, next - first))
            __atomic_store_n(&r->stopped, true, __ATOMIC_RELEASE);
        return;
    }
    if (r->parts && (r->epilogue || r->im2col)) {
        td_cpu_epilogue_part(&r->calls[0], r->granule, r->parts, task, &part);
        c = &part;
    } else if (r->parts) {
        if (r->calls[0].kernel == TD_KERNEL_GEMM)
            td_cpu_gemm_split_part(&r->calls[0], r->gemm_engine, r->parts, task, &part);
        else
            td_cpu_split_part(&r->calls[0], r->parts, task, &part);
        c = &part;
    }
    if (r->epilogue || r->im2col
            ? !run_gemm_with_epilogue(r->dev, r->gemm_engine, c, r->calls, r->epilogue, r->granule, r->im2col)
            : !run_call(r->dev, r->gemm_engine, c))
        __atomic_store_n(&r->stopped, true, __ATOMIC_RELEASE);
}

/* Whether the run of `run` calls at c goes to the pool as its calls side by
 * side. Only when what the helpers would take -- the run less its largest
 * call, which the device's own thread keeps busy -- is worth a part's
 * hand-over (td_cpu_split_part_shares): a small step's runs (linear
 * regression's 5 x 1 kernel gradient beside its 1-float bias gradient)
 * otherwise woke a sleeping helper for a fraction of a microsecond of
 * work, twice a step. Then a run of GEMMs always does (a batched product's
 * balanced entries); one with a REDUCE only where no call of it would
 * split: conv1's bias gradient (0.22 ms, one part) beside its kernel
 * gradient (0.8 ms, one part) takes the bias gradient off the step, but
 * conv2's kernel gradient (288 rows: two parts) is worth more split than
 * beside its bias gradient. */
static bool run_side_by_side(const td_kernel_call *c, size_t run, td_cpu_gemm_engine engine, uint32_t team,
                             bool any_size)
{
    bool only_gemms = true, any_splits = false;
    double shares = 0.0, largest = 0.0;
    for (size_t j = 0; j < run; j++) {
        const bool gemm = c[j].kernel == TD_KERNEL_GEMM;
        only_gemms = only_gemms && gemm;
        any_splits = any_splits || (gemm ? td_cpu_gemm_split_parts(&c[j], engine, team, any_size)
                                         : td_cpu_split_parts(&c[j], team, any_size)) > 1;
        const double s = td_cpu_split_part_shares(&c[j]);
        shares += s;
        largest = s > largest ? s : largest;
    }
    if (!any_size && shares - largest < 1.0)
        return false;
    return only_gemms || !any_splits;
}

/* Stops between calls and parts, and inside a GEMM between tiles, once the
 * device is cancelled: a worker the engine gave up on leaves within one
 * tile or one other part (bounded by the memory it touches, not by m n k),
 * not at the end of the segment. No message: the engine's timeout already
 * named the device, and the caller may be reading that message.
 * With spare pool threads, a call that splits runs as parts and a run of
 * independent GEMMs as its calls; the parts are the same whatever the
 * team, so are the bits. */
static td_status cpu_segment_run(td_device *dev, td_segment *seg)
{
    uint32_t team = td_host_pool_team(dev->pool);
    for (size_t i = 0; i < seg->count;) {
        if (__atomic_load_n(&dev->cancelled, __ATOMIC_ACQUIRE))
            return TD_ERR_DEVICE_LOST;
        const td_kernel_call *c = &seg->calls[i];
        const td_kernel_call *im2col = NULL;
        if (i + 1 < seg->count && seg->prologue[i + 1]) { /* this IM2COL runs inside the next GEMM's blocks */
            im2col = c;
            c = &seg->calls[++i];
        }
        size_t run = seg->run_end[i] - i;
        const bool any_size = td_host_pool_split_everything(dev->pool);
        if (run > 1 && team > 1 && !run_side_by_side(c, run, seg->gemm_engine, team, any_size))
            run = 1; /* this call alone, split; the rest of the run is looked at again */
        if (c->kernel == TD_KERNEL_POOL_BACKWARD && seg->epilogue[i]) {
            /* A pooling's gradient and its chain: parts of whole images. */
            const int64_t parts = team > 1 ? td_cpu_split_parts(c, team, any_size) : 1;
            shared_run r = {dev, seg->gemm_engine, c, parts, false, seg->epilogue[i], 0, NULL, true};
            if (parts > 1)
                td_host_pool_run(dev->pool, parts, run_task, &r);
            else if (!run_pool_backward_chain(dev, seg->gemm_engine, c, r.epilogue, 0, c->p.pool.geo.n))
                r.stopped = true;
            if (__atomic_load_n(&r.stopped, __ATOMIC_ACQUIRE))
                return TD_ERR_DEVICE_LOST;
            i += 1 + r.epilogue;
            continue;
        }
        if (seg->epilogue[i] || im2col) {
            /* A GEMM and its epilogue (and prologue): its parts (or the
             * whole) in blocks, at multiples of the chain's granule. */
            int64_t granule = td_cpu_epilogue_granule(c, seg->epilogue[i], td_cpu_gemm_part_rows(seg->gemm_engine));
            if (im2col)
                granule = td_cpu_prologue_granule(im2col, granule);
            int64_t parts = team > 1 ? td_cpu_gemm_split_parts(c, seg->gemm_engine, team, any_size) : 1;
            if (parts > (c->p.gemm.m + granule - 1) / granule)
                parts = (c->p.gemm.m + granule - 1) / granule;
            shared_run r = {dev, seg->gemm_engine, c, parts, false, seg->epilogue[i], granule, im2col, false};
            if (parts > 1)
                td_host_pool_run(dev->pool, parts, run_task, &r);
            else if (!run_gemm_with_epilogue(dev, seg->gemm_engine, c, c, r.epilogue, granule, im2col))
                r.stopped = true;
            if (__atomic_load_n(&r.stopped, __ATOMIC_ACQUIRE))
                return TD_ERR_DEVICE_LOST;
            i += 1 + r.epilogue;
            continue;
        }
        int64_t parts = 1;
        if (team > 1 && run == 1)
            parts = c->kernel == TD_KERNEL_GEMM ? td_cpu_gemm_split_parts(c, seg->gemm_engine, team, any_size)
                                                : td_cpu_split_parts(c, team, any_size);
        if (team > 1 && (run > 1 || parts > 1)) {
            shared_run r = {dev, seg->gemm_engine, c, run > 1 ? 0 : parts, false, 0, 0, NULL, false};
            td_host_pool_run(dev->pool, run > 1 ? (int64_t)run : parts, run_task, &r);
            if (__atomic_load_n(&r.stopped, __ATOMIC_ACQUIRE))
                return TD_ERR_DEVICE_LOST;
            i += run;
            continue;
        }
        if (!run_call(dev, seg->gemm_engine, c))
            return TD_ERR_DEVICE_LOST;
        i++;
    }
    return TD_OK;
}

/* Any thread, while the worker may be inside a segment: one atomic store. */
static void cpu_cancel(td_device *dev)
{
    __atomic_store_n(&dev->cancelled, true, __ATOMIC_RELEASE);
}

static void cpu_segment_destroy(td_device *dev, td_segment *seg)
{
    if (!seg)
        return;
    td_free(dev->ctx, seg->calls);
    td_free(dev->ctx, seg->run_end);
    td_free(dev->ctx, seg->epilogue);
    td_free(dev->ctx, seg->prologue);
    td_free(dev->ctx, seg);
}

static td_status cpu_submit(td_device *dev, uint64_t *ticket)
{
    *ticket = ++dev->ticket;
    return TD_OK;
}

static td_status cpu_wait(td_device *dev, uint64_t ticket, uint32_t timeout_ms)
{
    (void)timeout_ms;
    if (ticket > dev->ticket)
        return td_error_set(dev->ctx, TD_ERR_INVALID_ARGUMENT, "cpu wait for ticket %llu never issued (last %llu)",
                            (unsigned long long)ticket, (unsigned long long)dev->ticket);
    return TD_OK;
}

const td_backend_ops td_cpu_backend = {
    .name = "cpu",
    .caps = TD_BACKEND_SIMULATED | TD_BACKEND_HOST_BUFFERS,
    .probe = cpu_probe,
    .describe = cpu_describe,
    .open = cpu_open,
    .close = cpu_close,
    .buffer_create = cpu_buffer_create,
    .buffer_destroy = cpu_buffer_destroy,
    .buffer_host_pointer = cpu_buffer_host_pointer,
    .staging_create = cpu_staging_create,
    .staging_destroy = cpu_staging_destroy,
    .write = cpu_write,
    .read = cpu_read,
    .copy = cpu_copy,
    .segment_create = cpu_segment_create,
    .segment_run = cpu_segment_run,
    .segment_destroy = cpu_segment_destroy,
    .submit = cpu_submit,
    .wait = cpu_wait,
    .cancel = cpu_cancel,
};
