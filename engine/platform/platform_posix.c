/* The platform layer on POSIX systems (td_platform.h): Linux, and written
 * to what macOS also has. Where the two differ the Apple branch is chosen
 * at compile time: macOS has no pthread_condattr_setclock (its condition
 * variables wait on the wall clock), so a deadline wait there converts the
 * monotonic deadline into a relative wait (pthread_cond_timedwait_relative_np);
 * no _SC_PHYS_PAGES (sysctl hw.memsize instead), and no `environ` in a
 * shared library (_NSGetEnviron). Nothing here uses
 * glibc-only calls (pthread_timedjoin_np: a timed join is a finished flag
 * under a mutex and condition variable instead). */
#include "td_platform.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef __APPLE__
#include <crt_externs.h>
#include <sys/sysctl.h>
/* A macOS shared library cannot refer to `environ` (only the main program
 * has it); _NSGetEnviron is the documented way in. */
#define TD_ENVIRON (*_NSGetEnviron())
#else
extern char **environ;
#define TD_ENVIRON environ
#endif

/* ---- clock, sleeping ---- */

uint64_t td_platform_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t td_platform_deadline_after_ms(uint64_t ms)
{
    const uint64_t now = td_platform_now_ns();
    return ms >= (UINT64_MAX - now) / 1000000u ? UINT64_MAX : now + ms * 1000000u;
}

void td_platform_sleep_ns(uint64_t ns)
{
    struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

void td_platform_yield(void)
{
    sched_yield();
}

/* ---- mutexes, condition variables, once ---- */

int td_mutex_init(td_mutex *m)
{
    return pthread_mutex_init(&m->m, NULL);
}

void td_mutex_destroy(td_mutex *m)
{
    pthread_mutex_destroy(&m->m);
}

void td_mutex_lock(td_mutex *m)
{
    pthread_mutex_lock(&m->m);
}

bool td_mutex_try_lock(td_mutex *m)
{
    return pthread_mutex_trylock(&m->m) == 0;
}

void td_mutex_unlock(td_mutex *m)
{
    pthread_mutex_unlock(&m->m);
}

int td_cond_init(td_cond *c)
{
#ifdef __APPLE__
    return pthread_cond_init(&c->c, NULL);
#else
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&c->c, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
#endif
}

void td_cond_destroy(td_cond *c)
{
    pthread_cond_destroy(&c->c);
}

void td_cond_signal(td_cond *c)
{
    pthread_cond_signal(&c->c);
}

void td_cond_broadcast(td_cond *c)
{
    pthread_cond_broadcast(&c->c);
}

void td_cond_wait(td_cond *c, td_mutex *m)
{
    pthread_cond_wait(&c->c, &m->m);
}

int td_cond_wait_until(td_cond *c, td_mutex *m, uint64_t deadline_ns)
{
    const uint64_t now = td_platform_now_ns();
    if (now >= deadline_ns)
        return ETIMEDOUT;
#ifdef __APPLE__
    const uint64_t left = deadline_ns - now;
    struct timespec rel = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    int rc = pthread_cond_timedwait_relative_np(&c->c, &m->m, &rel);
#else
    /* A deadline past what time_t holds is a wait with no practical end. */
    const uint64_t capped = deadline_ns > (uint64_t)INT32_MAX * 1000000000u ? (uint64_t)INT32_MAX * 1000000000u
                                                                           : deadline_ns;
    struct timespec at = {(time_t)(capped / 1000000000u), (long)(capped % 1000000000u)};
    int rc = pthread_cond_timedwait(&c->c, &m->m, &at);
#endif
    return rc == ETIMEDOUT && td_platform_now_ns() >= deadline_ns ? ETIMEDOUT : 0;
}

void td_once_run(td_once *once, void (*fn)(void))
{
    pthread_once(&once->o, fn);
}

/* ---- threads ---- */

/* Shared by the thread and its joiner; whichever of them is last frees it:
 * the joiner after a join, the thread itself when the joiner gave up. */
struct td_thread_state {
    pthread_t id;
    void (*fn)(void *);
    void *arg;
    td_mutex lock;
    td_cond finished_cond; /* on the monotonic clock, as every deadline here */
    bool finished;
    bool abandoned;
};

static void state_free(td_thread_state *st)
{
    td_cond_destroy(&st->finished_cond);
    td_mutex_destroy(&st->lock);
    free(st);
}

static void *thread_main(void *p)
{
    td_thread_state *st = p;
    st->fn(st->arg);
    td_mutex_lock(&st->lock);
    st->finished = true;
    const bool abandoned = st->abandoned;
    td_cond_broadcast(&st->finished_cond);
    td_mutex_unlock(&st->lock);
    if (abandoned)
        state_free(st);
    return NULL;
}

int td_thread_start(td_thread *t, void (*fn)(void *arg), void *arg)
{
    t->state = NULL;
    td_thread_state *st = calloc(1, sizeof *st);
    if (!st)
        return ENOMEM;
    st->fn = fn;
    st->arg = arg;
    int rc = td_mutex_init(&st->lock);
    if (rc != 0) {
        free(st);
        return rc;
    }
    if ((rc = td_cond_init(&st->finished_cond)) != 0) {
        td_mutex_destroy(&st->lock);
        free(st);
        return rc;
    }
    if ((rc = pthread_create(&st->id, NULL, thread_main, st)) != 0) {
        state_free(st);
        return rc;
    }
    t->state = st;
    return 0;
}

void td_thread_join(td_thread *t)
{
    td_thread_state *st = t->state;
    if (!st)
        return;
    pthread_join(st->id, NULL);
    state_free(st);
    t->state = NULL;
}

bool td_thread_join_until(td_thread *t, uint64_t deadline_ns)
{
    td_thread_state *st = t->state;
    if (!st)
        return true;
    t->state = NULL;
    td_mutex_lock(&st->lock);
    while (!st->finished) {
        if (td_cond_wait_until(&st->finished_cond, &st->lock, deadline_ns) == ETIMEDOUT && !st->finished) {
            /* The thread frees st when it returns; its id is read now. */
            const pthread_t id = st->id;
            st->abandoned = true;
            td_mutex_unlock(&st->lock);
            pthread_detach(id);
            return false;
        }
    }
    td_mutex_unlock(&st->lock);
    /* Finished: only its return is left, so this join is short. */
    pthread_join(st->id, NULL);
    state_free(st);
    return true;
}

int td_thread_slot_create(td_thread_slot *slot)
{
    pthread_key_t key;
    int rc = pthread_key_create(&key, free);
    if (rc == 0)
        slot->key = (uintptr_t)key;
    return rc;
}

void *td_thread_slot_get(const td_thread_slot *slot)
{
    return pthread_getspecific((pthread_key_t)slot->key);
}

int td_thread_slot_set(const td_thread_slot *slot, void *value)
{
    return pthread_setspecific((pthread_key_t)slot->key, value);
}

/* ---- memory and processors ---- */

void *td_platform_aligned_alloc(size_t alignment, size_t bytes)
{
    /* posix_memalign, not aligned_alloc: macOS has the latter only from
     * 10.15, and it wants the size a multiple of the alignment. */
    void *p = NULL;
    if (alignment < sizeof(void *))
        alignment = sizeof(void *);
    return posix_memalign(&p, alignment, bytes ? bytes : 1) == 0 ? p : NULL;
}

void td_platform_aligned_free(void *p)
{
    free(p);
}

uint32_t td_platform_cpu_count(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : n > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint64_t td_platform_physical_memory(void)
{
#ifdef __APPLE__
    uint64_t bytes = 0;
    size_t len = sizeof bytes;
    return sysctlbyname("hw.memsize", &bytes, &len, NULL, 0) == 0 ? bytes : 0;
#else
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
#endif
}

void td_platform_cpu_name(char *name, size_t name_size, char *vendor, size_t vendor_size)
{
    snprintf(name, name_size, "host CPU");
    snprintf(vendor, vendor_size, "unknown");
#ifdef __APPLE__
    char brand[256];
    size_t len = sizeof brand;
    if (sysctlbyname("machdep.cpu.brand_string", brand, &len, NULL, 0) == 0)
        snprintf(name, name_size, "%s", brand);
    len = sizeof brand;
    if (sysctlbyname("machdep.cpu.vendor", brand, &len, NULL, 0) == 0)
        snprintf(vendor, vendor_size, "%s", brand);
#else
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    int got = 0;
    while (got != 3 && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *value = colon + 1;
        while (*value == ' ')
            value++;
        value[strcspn(value, "\n")] = '\0';
        if (!(got & 1) && strncmp(line, "model name", 10) == 0) {
            snprintf(name, name_size, "%s", value);
            got |= 1;
        } else if (!(got & 2) && strncmp(line, "vendor_id", 9) == 0) {
            snprintf(vendor, vendor_size, "%s", value);
            got |= 2;
        }
    }
    fclose(f);
#endif
}

long td_platform_process_id(void)
{
    return (long)getpid();
}

bool td_platform_process_alive(long pid)
{
    return !(kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

/* ---- files ---- */

static td_file_kind kind_of(mode_t mode)
{
    if (S_ISREG(mode))
        return TD_FILE_KIND_REGULAR;
    if (S_ISDIR(mode))
        return TD_FILE_KIND_DIRECTORY;
    if (S_ISCHR(mode))
        return TD_FILE_KIND_CHARACTER_DEVICE;
    if (S_ISBLK(mode))
        return TD_FILE_KIND_BLOCK_DEVICE;
    if (S_ISFIFO(mode))
        return TD_FILE_KIND_FIFO;
    if (S_ISSOCK(mode))
        return TD_FILE_KIND_SOCKET;
    if (S_ISLNK(mode))
        return TD_FILE_KIND_SYMBOLIC_LINK;
    return TD_FILE_KIND_OTHER;
}

static int report(const struct stat *st, td_file_kind *kind, uint64_t *size)
{
    *kind = kind_of(st->st_mode);
    if (size)
        *size = (uint64_t)st->st_size;
    return 0;
}

int td_platform_path_kind(const char *path, td_file_kind *kind, uint64_t *size)
{
    struct stat st;
    return lstat(path, &st) != 0 ? errno : report(&st, kind, size);
}

int td_platform_path_kind_followed(const char *path, td_file_kind *kind, uint64_t *size)
{
    struct stat st;
    return stat(path, &st) != 0 ? errno : report(&st, kind, size);
}

int td_platform_fd_kind(int fd, td_file_kind *kind, uint64_t *size)
{
    struct stat st;
    return fstat(fd, &st) != 0 ? errno : report(&st, kind, size);
}

int td_platform_open_read(const char *path, int *fd)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    return *fd < 0 ? errno : 0;
}

int td_platform_fd_blocking(int fd)
{
    const int flags = fcntl(fd, F_GETFL);
    return flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ? errno : 0;
}

int td_platform_create_exclusive(const char *path, int *fd)
{
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    return *fd < 0 ? errno : 0;
}

FILE *td_platform_fd_stream(int fd, const char *mode)
{
    return fdopen(fd, mode);
}

int td_platform_close(int fd)
{
    return close(fd) != 0 ? errno : 0;
}

int64_t td_platform_read_at(int fd, void *buffer, size_t bytes, uint64_t offset)
{
    ssize_t n;
    while ((n = pread(fd, buffer, bytes, (off_t)offset)) < 0 && errno == EINTR)
        ;
    return (int64_t)n;
}

int td_platform_stream_sync(FILE *stream)
{
    if (fflush(stream) != 0)
        return errno;
    return fsync(fileno(stream)) != 0 ? errno : 0;
}

int td_platform_replace_file(const char *from, const char *to)
{
    return rename(from, to) != 0 ? errno : 0;
}

int td_platform_sync_directory(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    const int rc = fsync(fd) != 0 ? errno : 0;
    close(fd);
    /* Some file systems cannot sync a directory and say so; the rename is
     * as durable there as they make it. */
    return rc == EINVAL || rc == ENOTSUP ? 0 : rc;
}

int td_platform_remove_file(const char *path)
{
    return unlink(path) != 0 ? errno : 0;
}

int td_platform_make_directory(const char *path)
{
    return mkdir(path, 0777) != 0 ? errno : 0;
}

int td_platform_remove_directory(const char *path)
{
    return rmdir(path) != 0 ? errno : 0;
}

int td_platform_make_temp_directory(const char *prefix, char *out, size_t size)
{
    const char *tmp = getenv("TMPDIR");
    const int n = snprintf(out, size, "%s/%sXXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    if (n < 0 || (size_t)n >= size)
        return ENAMETOOLONG;
    return mkdtemp(out) ? 0 : errno;
}

bool td_platform_path_is_absolute(const char *path)
{
    return path[0] == '/';
}

const char *td_platform_last_separator(const char *path)
{
    return strrchr(path, '/');
}

struct td_platform_dir {
    DIR *d;
    int error;
};

int td_platform_dir_open(const char *path, td_platform_dir **dir)
{
    *dir = NULL;
    td_platform_dir *d = malloc(sizeof *d);
    if (!d)
        return ENOMEM;
    d->error = 0;
    if (!(d->d = opendir(path))) {
        const int err = errno;
        free(d);
        return err;
    }
    *dir = d;
    return 0;
}

const char *td_platform_dir_next(td_platform_dir *dir)
{
    struct dirent *e;
    errno = 0; /* readdir's end and its failure differ only by errno */
    while ((e = readdir(dir->d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            return e->d_name;
    dir->error = errno;
    return NULL;
}

int td_platform_dir_error(const td_platform_dir *dir)
{
    return dir->error;
}

void td_platform_dir_close(td_platform_dir *dir)
{
    if (dir) {
        closedir(dir->d);
        free(dir);
    }
}

bool td_platform_is_terminal(FILE *stream)
{
    return isatty(fileno(stream)) == 1;
}

/* ---- processes and signals ---- */

int td_platform_run_process(const char *program, char *const argv[], int *exit_code)
{
    pid_t pid;
    int err = posix_spawnp(&pid, program, NULL, NULL, argv, TD_ENVIRON);
    if (err != 0)
        return err;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return errno;
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    /* posix_spawnp reports a missing program as exit 127 from the child on
     * some systems (glibc before 2.24, macOS): the shell's convention. */
    return 0;
}

int td_platform_on_interrupt(void (*on_interrupt)(int signal_number))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        return errno;
    return 0;
}

_Noreturn void td_platform_exit_now(int code)
{
    _exit(code);
}
