/* The one rule for writers that rename a finished temporary file over a
 * path (checkpoints, traces): what is at the path now must be a regular
 * file, or nothing. rename() replaces any kind of directory entry, so
 * without the rule a checkpoint saved to /dev/null by root, or a trace
 * written to a FIFO, would swap the node for a plain file -- every later
 * user of the node would find a file there. A symbolic link is refused
 * too: the rename would replace the link itself and leave what it points
 * at untouched, which is not what either reading of "write to the link"
 * means, so the caller is asked to name the real file.
 *
 * Writers check twice: before they create the temporary file (so a
 * refused path costs nothing and leaves nothing), and again right before
 * the rename (the path may have changed while they wrote). */
#ifndef TD_FILE_REPLACE_H
#define TD_FILE_REPLACE_H

#include "td_context_internal.h"

/* TD_OK when `path` names nothing or a regular file (by lstat: a link is
 * not followed). Otherwise TD_ERR_INVALID_ARGUMENT, the message
 * "<who>: <path> is a character device, expected a regular file or no
 * file" (a directory, a FIFO, a socket, a block device, a symbolic link);
 * TD_ERR_IO naming the path and the system's reason when it cannot be
 * examined (a parent that is not a directory, no permission). `who` names
 * the public call. */
td_status td_file_check_replaceable(td_context *ctx, const char *who, const char *path);

/* The rule for readers (checkpoints, IDX files, texts, tokenizers, GPT
 * weights): only a regular file is read. Opening a FIFO for reading waits
 * for a writer that may never come, and a device or directory is no data
 * file, so the open does not wait (O_NONBLOCK, cleared again once fstat
 * has said what it is). *fd is the open descriptor (O_CLOEXEC) and *size
 * the file's size on TD_OK; otherwise *fd is -1 and the status is
 * TD_ERR_IO with "<who>: cannot open '<path>': <the system's reason>" or
 * "<who>: '<path>' is a FIFO (named pipe), expected a regular file". */
td_status td_file_open_regular(td_context *ctx, const char *who, const char *path, int *fd, uint64_t *size);

#endif
