/* tandem — the command-line tool.
 *   tandem devices [--json]   every device of every backend compiled in
 *   tandem version            library version */
#include <stdio.h>
#include <string.h>

#include "tandem/tandem.h"

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int cmd_devices(td_context *ctx, int json)
{
    uint32_t backends = 0;
    td_backend_count(ctx, &backends);
    int first = 1;
    if (json)
        printf("[");
    for (uint32_t b = 0; b < backends; b++) {
        td_backend_info bi;
        td_status s = td_backend_query(ctx, b, &bi);
        if (s != TD_OK || !bi.available) {
            const char *why = s != TD_OK ? td_last_error(ctx) : bi.reason;
            if (json) {
                printf("%s\n {\"backend\":", first ? "" : ",");
                json_string(bi.name);
                printf(",\"available\":false,\"reason\":");
                json_string(why);
                printf("}");
            } else {
                printf("%-7s -  unavailable: %s\n", bi.name, why);
            }
            first = 0;
            continue;
        }
        for (uint32_t d = 0; d < bi.device_count; d++) {
            td_device_info di;
            if ((s = td_device_query(ctx, bi.name, d, &di)) != TD_OK) {
                if (json) {
                    printf("%s\n {\"backend\":", first ? "" : ",");
                    json_string(bi.name);
                    printf(",\"index\":%u,\"available\":false,\"reason\":", d);
                    json_string(td_last_error(ctx));
                    printf("}");
                } else {
                    printf("%-7s %u  error: %s\n", bi.name, d, td_last_error(ctx));
                }
                first = 0;
                continue;
            }
            if (json) {
                printf("%s\n {\"backend\":", first ? "" : ",");
                json_string(di.backend);
                printf(",\"index\":%u,\"available\":true,\"name\":", di.index);
                json_string(di.name);
                printf(",\"vendor\":");
                json_string(di.vendor);
                printf(",\"driver\":");
                json_string(di.driver_version);
                printf(",\"language\":");
                json_string(di.language_version);
                printf(",\"compute_units\":%u,\"global_memory\":%llu,\"max_allocation\":%llu,"
                       "\"max_buffer_range\":%llu,\"max_workgroup_size\":%u,\"subgroup_size\":%u,"
                       "\"unified_memory\":%s}",
                       di.compute_units, (unsigned long long)di.global_memory, (unsigned long long)di.max_allocation,
                       (unsigned long long)di.max_buffer_range, di.max_workgroup_size, di.subgroup_size,
                       di.unified_memory ? "true" : "false");
            } else {
                printf("%-7s %u  %-40s %-24s %8.1f GiB  %3u CU  %s\n", di.backend, di.index, di.name, di.vendor,
                       (double)di.global_memory / (1024.0 * 1024.0 * 1024.0), di.compute_units, di.driver_version);
            }
            first = 0;
        }
    }
    if (json)
        printf("\n]\n");
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tandem devices [--json]\n"
               "       tandem version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    td_context *ctx;
    td_status s = td_context_create(NULL, &ctx);
    if (s != TD_OK) {
        fprintf(stderr, "tandem: cannot create a context: %s\n", td_status_describe(s));
        return 1;
    }
    int rc;
    if (strcmp(argv[1], "devices") == 0 && (argc == 2 || (argc == 3 && strcmp(argv[2], "--json") == 0))) {
        rc = cmd_devices(ctx, argc == 3);
    } else if (strcmp(argv[1], "version") == 0 && argc == 2) {
        printf("tandem %s\n", td_version_string());
        rc = 0;
    } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        rc = 0;
    } else {
        usage(stderr);
        rc = 2;
    }
    td_context_destroy(ctx);
    return rc;
}
