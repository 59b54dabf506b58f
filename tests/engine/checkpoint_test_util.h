/* File helpers shared by the checkpoint tests: temporary directories,
 * whole-file reads, directory listings. */
#ifndef CHECKPOINT_TEST_UTIL_H
#define CHECKPOINT_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* A new directory under /tmp (fails the test when it cannot be made). */
char *ckpt_test_temp_dir(void);
/* Removes the directory's files, the directory, and frees `dir`. */
void ckpt_test_remove_dir(char *dir);
bool ckpt_test_file_exists(const char *path);
/* The file's bytes (malloc'd) and size; fails the test when unreadable. */
unsigned char *ckpt_test_read_whole(const char *path, size_t *size);
/* How many entries of dir start with prefix. */
int ckpt_test_count_prefixed(const char *dir, const char *prefix);

#endif
