/* Keeps GPU driver libraries mapped until the test process exits, when the
 * tests run under LeakSanitizer.
 *
 * The Vulkan loader dlclose()s its drivers and layers at vkDestroyInstance.
 * A driver that leaks a few bytes (lavapipe does, on some CPUs) is then
 * reported at exit with a stack in "<unknown module>": the library is gone,
 * its name cannot be matched by scripts/lsan.supp, and the report fails the
 * run although none of it is tandem's memory. Opening each driver once more
 * with RTLD_NODELETE keeps it mapped, so the stack names the driver and the
 * suppression for that driver applies. tandem's own leaks are unaffected:
 * they are never inside these libraries, and the counting-allocator tests
 * check tandem's allocations directly.
 *
 * The driver list comes from the same manifests the loaders read: Vulkan
 * ICD and layer JSON files (the "library_path" value) and OpenCL .icd files
 * (one library name). Nothing happens in builds without AddressSanitizer. */
#if defined(__SANITIZE_ADDRESS__)
#define TD_PIN_DRIVERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TD_PIN_DRIVERS 1
#endif
#endif

#ifdef TD_PIN_DRIVERS
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pin_library(const char *manifest, const char *library)
{
    char path[4096];
    /* A relative path with a slash is relative to the manifest's folder; a
     * bare name goes through the dynamic linker's search, as the loader does. */
    if (library[0] != '/' && strchr(library, '/')) {
        const char *slash = strrchr(manifest, '/');
        int dir_len = slash ? (int)(slash - manifest) : 1;
        snprintf(path, sizeof path, "%.*s/%s", dir_len, slash ? manifest : ".", library);
    } else {
        snprintf(path, sizeof path, "%s", library);
    }
    void *handle = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (handle)
        dlclose(handle); /* RTLD_NODELETE: the mapping stays */
}

static size_t read_small_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* "library_path": "value" in a Vulkan manifest (no escapes in paths). */
static void pin_vulkan_manifest(const char *manifest)
{
    char text[16384];
    if (!read_small_file(manifest, text, sizeof text))
        return;
    const char *key = strstr(text, "\"library_path\"");
    if (!key)
        return;
    const char *open = strchr(key + 14, '"');
    const char *close = open ? strchr(open + 1, '"') : NULL;
    if (!close || close - open - 1 >= 1024)
        return;
    char library[1024];
    memcpy(library, open + 1, (size_t)(close - open - 1));
    library[close - open - 1] = '\0';
    pin_library(manifest, library);
}

/* An OpenCL .icd file holds one library name or path. */
static void pin_opencl_manifest(const char *manifest)
{
    char text[1024];
    if (!read_small_file(manifest, text, sizeof text))
        return;
    text[strcspn(text, "\r\n")] = '\0';
    if (text[0])
        pin_library(manifest, text);
}

static void pin_folder(const char *folder, const char *suffix, void (*pin)(const char *))
{
    DIR *d = opendir(folder);
    if (!d)
        return;
    struct dirent *e;
    size_t suffix_len = strlen(suffix);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= suffix_len || strcmp(e->d_name + len - suffix_len, suffix) != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        pin(path);
    }
    closedir(d);
}

/* Colon-separated manifest files or folders, as VK_DRIVER_FILES takes. */
static void pin_list(const char *list, const char *suffix, void (*pin)(const char *))
{
    char copy[8192];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *item = strtok_r(copy, ":", &save); item; item = strtok_r(NULL, ":", &save)) {
        size_t len = strlen(item);
        if (len > strlen(suffix) && strcmp(item + len - strlen(suffix), suffix) == 0)
            pin(item);
        else
            pin_folder(item, suffix, pin);
    }
}

__attribute__((constructor)) static void td_test_pin_drivers(void)
{
    static const char *const roots[] = {"/usr/share/vulkan", "/usr/local/share/vulkan", "/etc/vulkan"};
    static const char *const kinds[] = {"icd.d", "implicit_layer.d", "explicit_layer.d"};
    const char *drivers = getenv("VK_DRIVER_FILES");
    if (!drivers)
        drivers = getenv("VK_ICD_FILENAMES");
    if (drivers)
        pin_list(drivers, ".json", pin_vulkan_manifest);
    for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            char folder[512];
            snprintf(folder, sizeof folder, "%s/%s", roots[r], kinds[k]);
            pin_folder(folder, ".json", pin_vulkan_manifest);
        }
    const char *vendors = getenv("OCL_ICD_VENDORS");
    pin_list(vendors ? vendors : "/etc/OpenCL/vendors", ".icd", pin_opencl_manifest);
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int td_test_pin_drivers_unused;
#endif
