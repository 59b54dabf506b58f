/* Writing a file so that a crash at any point leaves either the old file or
 * the complete new one under its name: write a temporary file in the same
 * directory (same file system, so the rename is atomic), fsync it, rename it
 * over the final name, fsync the directory so the rename itself is durable.
 * A temporary file is named ".tmp-<final name>-<pid>-<n>": a later writer
 * can tell from the pid whether its writer is gone and the file is litter. */
#ifndef TD_ATOMIC_FILE_H
#define TD_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "td_context_internal.h"

typedef struct td_atomic_file {
    td_context *ctx;
    const char *who; /* the public call, for messages (a static string) */
    FILE *stream;
    char *final_path;
    char *temp_path;
    char *dir; /* the final path's directory, for its fsync */
} td_atomic_file;

/* Creates the temporary file next to `path`. Only a regular file or
 * nothing at `path` may be replaced (td_file_replace.h): anything else is
 * TD_ERR_INVALID_ARGUMENT naming `who`, the path and what is there, before
 * any file is created, and td_atomic_file_commit checks again before its
 * rename. TD_ERR_IO naming the path and the system's reason when the
 * temporary file cannot be created. */
td_status td_atomic_file_create(td_context *ctx, const char *who, const char *path, td_atomic_file *f);
/* Appends bytes (buffered). */
td_status td_atomic_file_write(td_atomic_file *f, const void *data, size_t bytes);
/* Flushes, fsyncs and closes the temporary file, checks the final path
 * again (see td_atomic_file_create), renames the file to it and fsyncs the
 * directory; on any failure the temporary file is removed. Releases f
 * either way. */
td_status td_atomic_file_commit(td_atomic_file *f);
/* Closes and removes the temporary file; releases f. */
void td_atomic_file_discard(td_atomic_file *f);

/* fsync of a directory, so entries created, renamed or removed in it
 * survive a crash. */
td_status td_sync_directory(td_context *ctx, const char *dir);

/* The points of a write at which the crash test stops the process. */
typedef enum td_write_stage {
    TD_WRITE_STAGE_NONE = 0,
    TD_WRITE_STAGE_CREATED = 1,         /* the temporary file exists, empty */
    TD_WRITE_STAGE_MID_DATA = 2,        /* part of the contents written (the writer marks it) */
    TD_WRITE_STAGE_BEFORE_FSYNC = 3,    /* all written and flushed, not synced */
    TD_WRITE_STAGE_BEFORE_RENAME = 4,   /* synced, still under the temporary name */
    TD_WRITE_STAGE_BEFORE_DIR_SYNC = 5, /* renamed, the directory not yet synced */
} td_write_stage;

/* The exit status of a process stopped by the crash hook. */
#define TD_WRITE_CRASH_EXIT 77

/* TEST ONLY (tests/engine/test_checkpoint.c): from now on, a write of this
 * process that reaches `stage` calls _exit(TD_WRITE_CRASH_EXIT) there, as a
 * kill would stop it, with what it wrote so far handed to the kernel.
 * TD_WRITE_STAGE_NONE turns it off. Process-wide and not thread-safe: set it
 * in a forked child before any write. No public header declares it. */
void td_atomic_file_test_crash_at(td_write_stage stage);

/* Where a writer marks a stage (the hook's check). */
void td_atomic_file_reached(td_atomic_file *f, td_write_stage stage);

#endif
