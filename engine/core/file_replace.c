/* What a rename may replace (td_file_replace.h). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

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
