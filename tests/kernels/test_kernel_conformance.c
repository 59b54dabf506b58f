/* Every conformance family on every device of every backend this build
 * has: one Criterion test per (backend, family), kernels_<backend>/<family>,
 * made from TD_BACKENDS_BUILT and TD_CONFORMANCE_FAMILIES, so a new backend
 * or a new family is tested without an edit here. A backend with no device
 * on this host is skipped with its probe's reason.
 *
 * Criterion forks per test and drivers do not survive a fork after their
 * initialisation, so each test makes its own context and opens the devices
 * itself. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_conformance.h"
#include "td_host_pool.h"
#include "tandem/context.h"

/* The devices of one backend, all opened: a case's inputs and reference
 * results are made once for all of them. */
typedef struct backend_devices {
    td_context *ctx;
    td_context *split_ctx; /* the CPU backend's second device, see open_all */
    size_t count;
    td_conformance_device *devices;
} backend_devices;

/* Opens every device of the backend, or skips the test with the reason
 * its probe gives. */
static backend_devices open_all(const td_backend_ops *ops)
{
    backend_devices all = {0};
    cr_assert_eq(td_context_create(NULL, &all.ctx), TD_OK);
    td_backend_info info = {.struct_size = sizeof(td_backend_info)};
    cr_assert_eq(ops->probe(all.ctx, &info), TD_OK, "%s probe: %s", ops->name, td_last_error(all.ctx));
    if (!info.available) {
        td_context_destroy(all.ctx);
        cr_skip_test("no %s device: %s", ops->name, info.reason);
    }
    /* A backend whose devices run on the host pool also runs every case
     * with each call cut into as many parts as it allows (up to three, on
     * pool threads): the parts must give the whole call's bits, those of
     * its first device (whose calls run whole or in the parts its own team
     * picks), compared bit for bit. */
    bool pooled = ops->caps & TD_BACKEND_SIMULATED;
    all.devices = calloc(info.device_count + pooled, sizeof *all.devices);
    cr_assert_not_null(all.devices);
    for (uint32_t index = 0; index < info.device_count; index++) {
        td_conformance_device *d = &all.devices[index];
        *d = (td_conformance_device){.ops = ops, .ctx = all.ctx};
        td_device_info described = {.struct_size = sizeof(td_device_info)};
        cr_assert_eq(ops->describe(all.ctx, index, &described), TD_OK, "%s", td_last_error(all.ctx));
        snprintf(d->label, sizeof d->label, "%s:%u (%s)", ops->name, index, described.name);
        cr_assert_eq(ops->open(all.ctx, index, 0, &d->dev), TD_OK, "open %s: %s", d->label,
                     td_last_error(all.ctx));
        all.count++;
    }
    if (pooled) {
        td_context_options options;
        td_context_options_init(&options);
        options.cpu_threads = 3;
        cr_assert_eq(td_context_create(&options, &all.split_ctx), TD_OK);
        /* Held across the open so the flag stays with the device's pool. */
        td_host_pool *pool = td_context_host_pool_acquire(all.split_ctx);
        cr_assert_not_null(pool, "%s", td_last_error(all.split_ctx));
        td_host_pool_set_split_everything(pool, true);
        td_conformance_device *d = &all.devices[all.count];
        *d = (td_conformance_device){.ops = ops, .ctx = all.split_ctx, .bitwise_as_first = true};
        snprintf(d->label, sizeof d->label, "%s:0 (every call in parts on 3 pool threads)", ops->name);
        cr_assert_eq(ops->open(all.split_ctx, 0, 0, &d->dev), TD_OK, "open %s: %s", d->label,
                     td_last_error(all.split_ctx));
        td_context_host_pool_release(all.split_ctx);
        all.count++;
    }
    return all;
}

static void close_all(backend_devices *all)
{
    for (size_t i = 0; i < all->count; i++)
        all->devices[i].ops->close(all->devices[i].dev);
    free(all->devices);
    td_context_destroy(all->ctx);
    td_context_destroy(all->split_ctx);
}

/* Logs each device's tally; returns the failures of all of them. */
static size_t report(const backend_devices *all, const char *what, size_t ran, const size_t *failures)
{
    size_t total = 0;
    for (size_t i = 0; i < all->count; i++) {
        cr_log_info("%s: %zu of %zu %s cases pass", all->devices[i].label, ran - failures[i], ran, what);
        total += failures[i];
    }
    return total;
}

static void family_on_every_device(const td_backend_ops *ops, const char *family_name,
                                   void (*family)(td_case_list *))
{
    backend_devices all = open_all(ops);
    td_case_list cases = {0};
    family(&cases);
    cr_assert_gt(cases.count, 0, "family %s has no cases", family_name);
    size_t *failures = calloc(all.count, sizeof *failures);
    cr_assert_not_null(failures);
    size_t ran = td_conformance_run(all.devices, all.count, &cases, failures);
    size_t total = report(&all, family_name, ran, failures), devices = all.count;
    td_case_list_free(&cases);
    close_all(&all);
    free(failures);
    /* After the cleanup: a failed assertion ends the test. */
    cr_assert_eq(total, 0, "%zu failures of %zu %s cases on %zu devices (listed above)", total, ran, family_name,
                 devices);
}

static void rejections_on_every_device(const td_backend_ops *ops)
{
    backend_devices all = open_all(ops);
    size_t *failures = calloc(all.count, sizeof *failures), ran = 0;
    cr_assert_not_null(failures);
    for (size_t i = 0; i < all.count; i++)
        failures[i] = td_conformance_run_rejections(&all.devices[i], &ran);
    size_t total = report(&all, "rejection", ran, failures), devices = all.count;
    close_all(&all);
    free(failures);
    cr_assert_eq(total, 0, "%zu failures of %zu rejection cases on %zu devices (listed above)", total, ran, devices);
}

#define TD_FAMILY_TEST(backend, family)                                       \
    Test(kernels_##backend, family, .timeout = 600)                           \
    {                                                                         \
        family_on_every_device(&td_##backend##_backend, #family, td_cases_##family); \
    }

#define TD_BACKEND_TESTS(backend)                                             \
    TD_CONFORMANCE_FAMILIES(TD_FAMILY_TEST, backend)                          \
    Test(kernels_##backend, rejections)                                       \
    {                                                                         \
        rejections_on_every_device(&td_##backend##_backend);                 \
    }

TD_BACKENDS_BUILT(TD_BACKEND_TESTS)

static int compare_names(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The table covers the whole contract: every kernel of TD_KERNELS and
 * every op of TD_EW_OPS has at least one case, so a kernel added to the
 * list without conformance rows fails here, on any host. */
Test(kernel_conformance, every_kernel_and_op_has_cases)
{
    td_case_list cases = {0};
    td_cases_all(&cases);
    bool kernel_seen[TD_KERNEL_COUNT] = {0}, op_seen[TD_EW_OP_COUNT] = {0};
    for (size_t i = 0; i < cases.count; i++)
        for (size_t k = 0; k < cases.cases[i].call_count; k++) {
            const td_kernel_call *call = &cases.cases[i].calls[k];
            cr_assert(call->kernel >= 0 && call->kernel < TD_KERNEL_COUNT, "%s", cases.cases[i].name);
            kernel_seen[call->kernel] = true;
            if (call->kernel == TD_KERNEL_ELEMENTWISE)
                op_seen[call->p.ew.op] = true;
        }
    for (int k = 0; k < TD_KERNEL_COUNT; k++)
        cr_expect(kernel_seen[k], "kernel %s has no conformance case", td_kernel_name(k));
    for (int op = 0; op < TD_EW_OP_COUNT; op++)
        cr_expect(op_seen[op], "elementwise op %s has no conformance case", td_ew_name(op));
    /* Names identify cases in failure messages and TD_CONFORMANCE_FILTER. */
    const char **names = malloc(cases.count * sizeof *names);
    cr_assert_not_null(names);
    for (size_t i = 0; i < cases.count; i++)
        names[i] = cases.cases[i].name;
    qsort(names, cases.count, sizeof *names, compare_names);
    for (size_t i = 1; i < cases.count; i++)
        cr_expect_str_neq(names[i], names[i - 1], "two cases are named %s", names[i]);
    free(names);
#define TD_COUNT_FAMILY(arg, family) +1
    cr_log_info("%zu cases in %d families", cases.count, 0 TD_CONFORMANCE_FAMILIES(TD_COUNT_FAMILY, unused));
#undef TD_COUNT_FAMILY
    td_case_list_free(&cases);
}
