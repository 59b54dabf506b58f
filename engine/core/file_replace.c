/* What a rename may replace, and what a reader may open (td_file_replace.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "td_file_replace.h"

/* The entry's kind in words, for a message; NULL for a regular file. */
static const char *kind_of(mode_t mode)
{
    if (S_ISREG(mode))
        return NULL;
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link (a rename would replace the link, not write to the file it points at)";
    return "not a regular file";
}

td_status td_file_check_replaceable(td_context *ctx, const char *who, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return TD_OK;
        return td_error_set(ctx, TD_ERR_IO, "%s: cannot examine %s: %s", who, path, strerror(errno));
    }
    const char *kind = kind_of(st.st_mode);
    if (!kind)
        return TD_OK;
    return td_error_set(ctx, TD_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected a regular file or no file", who, path,
                        kind);
}

td_status td_file_open_regular(td_context *ctx, const char *who, const char *path, int *fd, uint64_t *size)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0)
        return td_error_set(ctx, TD_ERR_IO, "%s: cannot open '%s': %s", who, path, strerror(errno));
    struct stat st;
    td_status s = TD_OK;
    const char *kind = NULL;
    if (fstat(*fd, &st) != 0)
        s = td_error_set(ctx, TD_ERR_IO, "%s: cannot examine '%s': %s", who, path, strerror(errno));
    else if ((kind = kind_of(st.st_mode)) != NULL)
        s = td_error_set(ctx, TD_ERR_IO, "%s: '%s' is %s, expected a regular file", who, path, kind);
    else {
        /* A regular file never blocks; the flag goes so that nothing
         * downstream (zlib, pread loops) meets EAGAIN semantics. */
        const int flags = fcntl(*fd, F_GETFL);
        if (flags < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
            s = td_error_set(ctx, TD_ERR_IO, "%s: '%s': %s", who, path, strerror(errno));
    }
    if (s != TD_OK) {
        close(*fd);
        *fd = -1;
        return s;
    }
    *size = (uint64_t)st.st_size;
    return TD_OK;
}
