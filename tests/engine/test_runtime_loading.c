/* The GPU runtimes (OpenCL ICD loader, CLBlast, Vulkan loader) are opened at
 * run time, not linked. Here TD_OPENCL_LIBRARY / TD_VULKAN_LIBRARY point the
 * loaders at files that do not exist, as on a machine without them: the
 * backends must report themselves unavailable with the library and the
 * system's reason, a spec asking for them must fail with that, and CPU
 * devices must work as before. The libraries are opened once per process.
 * Criterion runs each test in a process of its own; the Criterion shim runs
 * them all in one. Either way the loaders see these overrides: every test
 * here sets the same ones in its setup, before any context exists, and no
 * test in this file opens a GPU runtime otherwise. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_util.h"
#include "td_platform.h"

#define MISSING_OPENCL "/nonexistent-tandem-test/libOpenCL.so.1"
#define MISSING_VULKAN "/nonexistent-tandem-test/libvulkan.so.1"

static td_context *ctx;

static void setup(void)
{
    test_set_env("TD_OPENCL_LIBRARY", MISSING_OPENCL);
    test_set_env("TD_VULKAN_LIBRARY", MISSING_VULKAN);
    ctx = test_context(0);
}

static void teardown(void)
{
    td_context_destroy(ctx);
}

TestSuite(runtime_loading, .init = setup, .fini = teardown);

/* The backend_info of `name`, or false when it is not built in. */
static bool query_backend(const char *name, td_backend_info *out)
{
    uint32_t count = 0;
    TEST_OK(ctx, td_backend_count(ctx, &count));
    for (uint32_t i = 0; i < count; i++) {
        td_backend_info info = {.struct_size = sizeof(td_backend_info)};
        TEST_OK(ctx, td_backend_query(ctx, i, &info));
        if (strcmp(info.name, name) == 0) {
            *out = info;
            return true;
        }
    }
    return false;
}

/* What a missing runtime must look like from every public entry point. */
static void check_missing(const char *backend, const char *library, const char *variable)
{
    td_backend_info info;
    if (!query_backend(backend, &info))
        return; /* compiled out: nothing to open */
    cr_assert(!info.available, "%s is available with its library at %s", backend, library);
    cr_assert_eq(info.device_count, 0);
    cr_assert_str_eq(info.runtime, "", "%s claims runtime '%s'", backend, info.runtime);
    /* The path tried, the system's reason, and where the path came from. */
    cr_assert(strstr(info.reason, library) != NULL, "reason '%s' does not name %s", info.reason, library);
    cr_assert(strstr(info.reason, "No such file") != NULL, "reason '%s' lacks dlerror's text", info.reason);
    cr_assert(strstr(info.reason, variable) != NULL, "reason '%s' does not name %s", info.reason, variable);

    char spec[32];
    snprintf(spec, sizeof spec, "%s:0", backend);
    td_mesh *mesh = NULL;
    TEST_FAILS(ctx, TD_ERR_BACKEND_UNAVAILABLE, library, td_mesh_create(ctx, spec, &mesh));
    cr_assert_null(mesh);
    cr_assert(test_message_mentions(ctx, spec), "message '%s' does not name the spec item", td_last_error(ctx));

    td_device_info device = {.struct_size = sizeof(td_device_info)};
    TEST_FAILS(ctx, TD_ERR_BACKEND_UNAVAILABLE, library, td_device_query(ctx, backend, 0, &device));
}

Test(runtime_loading, missing_opencl_loader_is_a_reason)
{
    check_missing("opencl", MISSING_OPENCL, "TD_OPENCL_LIBRARY");
}

Test(runtime_loading, missing_vulkan_loader_is_a_reason)
{
    check_missing("vulkan", MISSING_VULKAN, "TD_VULKAN_LIBRARY");
}

Test(runtime_loading, cpu_devices_work_without_gpu_runtimes)
{
    td_mesh *mesh = test_mesh(ctx, "cpu:2");
    cr_assert_eq(test_mesh_size(mesh), 2);
    td_device_info info = {.struct_size = sizeof(td_device_info)};
    TEST_OK(ctx, td_mesh_device_info(mesh, 1, &info));
    cr_assert_str_eq(info.backend, "cpu");
    td_mesh_destroy(mesh);

    /* "all" finds no GPU device, so it falls back to one CPU device, and
     * is not an error. */
    mesh = test_mesh(ctx, "all");
    cr_assert_eq(test_mesh_size(mesh), 1);
    TEST_OK(ctx, td_mesh_device_info(mesh, 0, &info));
    cr_assert_str_eq(info.backend, "cpu");
    td_mesh_destroy(mesh);

    /* The CPU backend needs no run-time library: its runtime line names
     * the GEMM engine its devices run instead (since 0.2). */
    td_backend_info cpu;
    cr_assert(query_backend("cpu", &cpu));
    cr_assert(cpu.available);
    cr_assert(strncmp(cpu.runtime, "GEMM ", 5) == 0, "cpu runtime: '%s'", cpu.runtime);
    cr_assert(strstr(cpu.runtime, ".so") == NULL && strstr(cpu.runtime, ".dll") == NULL, "cpu runtime: '%s'",
              cpu.runtime);
}

/* td_dynamic_library itself, on a library every build has: zlib on POSIX
 * (libtandem links it), kernel32 on Windows. */
#if defined(_WIN32)
#  define PRESENT_LIBRARY "kernel32.dll"
#  define PRESENT_FUNCTION "GetTickCount"
#else
#  define PRESENT_LIBRARY "libz.so.1"
#  define PRESENT_FUNCTION "zlibVersion"
#endif
#define ABSENT_LIBRARY "tandem-test-no-such-library.so.7"

Test(dynamic_library, opens_the_first_candidate_that_exists)
{
    const char *const names[] = {ABSENT_LIBRARY, PRESENT_LIBRARY, NULL};
    char reason[256] = "stale";
    td_dynamic_library *lib = td_dynamic_library_open(names, reason, sizeof reason);
    cr_assert_not_null(lib, "%s", reason);
    /* The name that opened is the caller's own string. */
    cr_assert_eq(td_dynamic_library_name(lib), names[1]);
    td_dynamic_symbol present = td_dynamic_library_symbol(lib, PRESENT_FUNCTION);
    cr_assert_not_null(present);
#if !defined(_WIN32)
    const char *(*version)(void) = (const char *(*)(void))present;
    cr_assert_eq(version()[0], '1', "zlibVersion() = %s", version());
#endif
    cr_assert_null(td_dynamic_library_symbol(lib, "tandem_test_no_such_function"));
    cr_assert_null(td_dynamic_library_symbol(NULL, PRESENT_FUNCTION));
    td_dynamic_library_close(lib);
    td_dynamic_library_close(NULL);
}

Test(dynamic_library, says_why_nothing_opened)
{
    const char *const names[] = {ABSENT_LIBRARY, "/nonexistent-tandem-test/libB.so", NULL};
    char reason[512];
    cr_assert_null(td_dynamic_library_open(names, reason, sizeof reason));
    /* Every name tried, in order, with the system loader's words. */
    const char *first = strstr(reason, ABSENT_LIBRARY);
    const char *second = strstr(reason, "/nonexistent-tandem-test/libB.so");
    cr_assert(first != NULL && second != NULL && first < second, "%s", reason);
    cr_assert(strstr(reason, "; ") != NULL, "%s", reason);

    /* A short buffer is cut, never overrun; no list is an answer too. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    cr_assert_null(td_dynamic_library_open(names, tiny, sizeof tiny));
    cr_assert_lt(strlen(tiny), sizeof tiny);
    const char *const none[] = {NULL};
    cr_assert_null(td_dynamic_library_open(none, reason, sizeof reason));
    cr_assert_gt(strlen(reason), 0);
    cr_assert_null(td_dynamic_library_open(NULL, NULL, 0));
}
