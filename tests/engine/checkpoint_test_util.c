/* File helpers shared by the checkpoint tests. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_test_util.h"

char *ckpt_test_temp_dir(void)
{
    char *dir = strdup("/tmp/td-ckpt-test-XXXXXX");
    cr_assert(dir && mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    return dir;
}

void ckpt_test_remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

bool ckpt_test_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

unsigned char *ckpt_test_read_whole(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    cr_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "read %s", path);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

int ckpt_test_count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    cr_assert(d, "opendir %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}
