/* The platform layer: everything tandem asks of the operating system, in
 * one small internal header with two implementations, platform_posix.c
 * (Linux, and only what macOS also has) and platform_windows.c (Win32,
 * built with mingw-w64). No other file includes an OS header (pthread.h,
 * unistd.h, fcntl.h, sys/stat.h, dirent.h, windows.h, spawn.h, signal.h'
 * sigaction): a port is these files.
 *
 * Conventions: calls that can fail return 0 or an errno value (EINVAL,
 * ENOENT, EEXIST, ETIMEDOUT, ...; the Windows branch maps its error codes
 * onto those), so callers keep writing their own messages with strerror.
 * Deadlines are absolute times on td_platform_now_ns()'s monotonic clock.
 * Paths are UTF-8 byte strings with '/' separators ('\\' also works on
 * Windows). File descriptors are the C runtime's (POSIX descriptors, or
 * the Microsoft C runtime's on Windows), opened in binary mode. */
#ifndef TD_PLATFORM_H
#define TD_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef _WIN32
/* The Win32 objects are pointer-sized (SRWLOCK, CONDITION_VARIABLE,
 * INIT_ONCE) and all-zero when initialized statically, so the header needs
 * no windows.h: the .c file casts. */
typedef struct td_mutex {
    void *opaque;
} td_mutex;
typedef struct td_cond {
    void *opaque;
} td_cond;
typedef struct td_once {
    void *opaque;
} td_once;
#define TD_MUTEX_INITIALIZER {0}
#define TD_ONCE_INITIALIZER {0}
#else
#include <pthread.h>
typedef struct td_mutex {
    pthread_mutex_t m;
} td_mutex;
typedef struct td_cond {
    pthread_cond_t c;
} td_cond;
typedef struct td_once {
    pthread_once_t o;
} td_once;
#define TD_MUTEX_INITIALIZER {PTHREAD_MUTEX_INITIALIZER}
#define TD_ONCE_INITIALIZER {PTHREAD_ONCE_INIT}
#endif

/* ---- clock, sleeping ---- */

/* Nanoseconds on a clock that never jumps (not the wall clock); only
 * differences mean anything. */
uint64_t td_platform_now_ns(void);
/* td_platform_now_ns() + ms milliseconds, saturating. */
uint64_t td_platform_deadline_after_ms(uint64_t ms);
/* Sleeps at least ns nanoseconds (Windows rounds up to its timer's
 * millisecond). */
void td_platform_sleep_ns(uint64_t ns);
/* Gives the processor to another ready thread, if any. */
void td_platform_yield(void);
/* td_platform_yield, and whether the processor came back only after more
 * than `long_ns`: another thread -- often another process's -- ran a
 * time slice meanwhile. A spinning waiter then sleeps instead: yielding
 * again would lose a slice each time, where a sleeper woken by the thread
 * it waits for is scheduled at once. */
static inline bool td_platform_yield_was_long(uint64_t long_ns)
{
    const uint64_t before = td_platform_now_ns();
    td_platform_yield();
    return td_platform_now_ns() - before > long_ns;
}

/* One pause of a busy-wait: tells the core this thread spins (x86's
 * PAUSE, AArch64's YIELD), so its sibling hyperthread and the memory
 * system are not flooded; nothing elsewhere. */
static inline void td_platform_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* The spinning waits' brake (the device workers' and the ring's): a spin
 * yields now and then, and a yield that took longer than
 * TD_SPIN_LONG_YIELD_NS lost a whole time slice to another thread --
 * another process busy on every core, where each yield then costs a slice
 * (4 ms here) and sleeping at once is 20-80x faster (bench/RESULTS.md,
 * small steps). Then `*quiet_until` (a word the waits share, read and
 * written atomically) stops every spin on it for TD_SPIN_QUIET_NS.
 * 1 ms, a quarter of that slice: on a quiet 2-vCPU VM, 50-80 yields of a
 * 4000-step linreg run (0.1-0.3 s) took over 50 us, at most one over
 * 250 us and none over 1 ms; at 50 us each of them silenced the spins for
 * 0.1 s, so a small step's hand-offs slept nearly always. */
#define TD_SPIN_LONG_YIELD_NS 1000000u
#define TD_SPIN_QUIET_NS 100000000u
/* Whether spins sharing `quiet_until` must sleep at once now. */
static inline bool td_spin_quiet(const uint64_t *quiet_until)
{
    return td_platform_now_ns() < __atomic_load_n(quiet_until, __ATOMIC_RELAXED);
}
/* Yields; false if the yield lost a time slice (then quiet for a while). */
static inline bool td_spin_yield(uint64_t *quiet_until)
{
    if (!td_platform_yield_was_long(TD_SPIN_LONG_YIELD_NS))
        return true;
    __atomic_store_n(quiet_until, td_platform_now_ns() + TD_SPIN_QUIET_NS, __ATOMIC_RELAXED);
    return false;
}

/* Copies of a loop for AVX-512 and AVX2 beside baseline x86-64, chosen
 * at load time: GCC on x86-64 ELF systems, whose loaders resolve the
 * ifuncs target_clones makes (not under TSan, whose resolver crashes at
 * load). For loops whose every lane is one element's own operations, so
 * that every copy gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__)
#define TD_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TD_SIMD_CLONES
#endif

/* Before a loop: its iterations carry no dependence through memory (GCC
 * then vectorizes it without a run-time overlap check). */
#if defined(__GNUC__) && !defined(__clang__)
#define TD_IVDEP _Pragma("GCC ivdep")
#else
#define TD_IVDEP
#endif

/* ---- mutexes, condition variables, once ---- */

/* A mutex may also be set up with TD_MUTEX_INITIALIZER. Init returns 0
 * or an errno value; lock and unlock cannot fail on a valid mutex. */
int td_mutex_init(td_mutex *m);
void td_mutex_destroy(td_mutex *m);
void td_mutex_lock(td_mutex *m);
/* Takes the mutex if it is free now; whether it did. */
bool td_mutex_try_lock(td_mutex *m);
void td_mutex_unlock(td_mutex *m);

int td_cond_init(td_cond *c);
void td_cond_destroy(td_cond *c);
void td_cond_signal(td_cond *c);
void td_cond_broadcast(td_cond *c);
/* Waits with no bound: only for waits whose waker is certain (a worker
 * idle between jobs); every other wait has a deadline. */
void td_cond_wait(td_cond *c, td_mutex *m);
/* Waits until signalled or the monotonic deadline passes: 0, or ETIMEDOUT
 * once the deadline has passed. May wake spuriously, as any condition
 * variable: callers loop on their predicate. */
int td_cond_wait_until(td_cond *c, td_mutex *m, uint64_t deadline_ns);
/* How late td_cond_wait_until may end past its deadline by the system's
 * own rounding: Windows counts a wait in whole milliseconds, rounded up,
 * and ends it on a timer tick (under wine a 300 us wait took 1.1 ms);
 * POSIX waits to the nanosecond. A wait that must end on time (an
 * injected slowdown) stops this much early and yields the rest away. */
#ifdef _WIN32
#define TD_COND_WAIT_SLACK_NS 2000000u
#else
#define TD_COND_WAIT_SLACK_NS 0u
#endif

/* Runs fn exactly once per td_once (TD_ONCE_INITIALIZER), whichever
 * thread gets there first; the others wait for it to finish. */
void td_once_run(td_once *once, void (*fn)(void));

/* ---- threads ---- */

typedef struct td_thread_state td_thread_state;
typedef struct td_thread {
    td_thread_state *state;
} td_thread;

/* Starts fn(arg) on a new thread: 0, or an errno value (EAGAIN, ENOMEM). */
int td_thread_start(td_thread *t, void (*fn)(void *arg), void *arg);
/* Waits for the thread to return, with no bound (a thread known to be
 * finishing: a pool's helper told to stop). */
void td_thread_join(td_thread *t);
/* Waits for the thread to return until the monotonic deadline: true when
 * it did (joined, released). false when it did not: the thread is left
 * running, detached, and releases its own bookkeeping when it returns;
 * `t` is released either way. */
bool td_thread_join_until(td_thread *t, uint64_t deadline_ns);

/* ---- fibers ----
 * A fiber is a function on a stack of its own that the thread resuming it
 * runs until the function suspends (back to that thread, which may resume
 * it later) or returns. The device workers run CPU devices as fibers when
 * a mesh has more of them than the machine has threads (core/worker.c).
 * x86-64 ELF systems only (fiber_posix.c); elsewhere td_fiber_available()
 * is false and td_fiber_create fails with ENOSYS. A fiber stays on the
 * thread that first resumed it: its code may cache thread-local addresses. */
typedef struct td_fiber td_fiber;
bool td_fiber_available(void);
/* A suspended fiber that will run fn(arg) at its first resume, on a stack
 * of stack_bytes (rounded up to pages; only touched pages are backed): 0,
 * or EINVAL, ENOMEM, ENOSYS. */
int td_fiber_create(td_fiber **out, size_t stack_bytes, void (*fn)(void *arg), void *arg);
/* From a thread's own stack: runs `f` until it suspends or its function
 * returns. Never for a finished fiber, never from inside a fiber. */
void td_fiber_resume(td_fiber *f);
/* From inside a fiber: back to the thread that resumed it. Nothing on a
 * thread's own stack. */
void td_fiber_suspend(void);
/* Whether the calling code runs on a fiber. */
bool td_fiber_inside(void);
/* Whether the fiber's function has returned. */
bool td_fiber_finished(const td_fiber *f);
/* Frees a fiber that is not running (suspended, finished or never
 * resumed); NULL is ignored. */
void td_fiber_destroy(td_fiber *f);

/* A per-thread slot whose value, a malloc'd block, is free()d when the
 * thread that set it exits. 0 or an errno value. */
typedef struct td_thread_slot {
    uintptr_t key;
} td_thread_slot;
int td_thread_slot_create(td_thread_slot *slot);
void *td_thread_slot_get(const td_thread_slot *slot);
int td_thread_slot_set(const td_thread_slot *slot, void *value);

/* ---- memory and processors ---- */

/* Memory aligned to `alignment` (a power of two, at least sizeof(void *))
 * that only td_platform_aligned_free releases; NULL when there is none. */
void *td_platform_aligned_alloc(size_t alignment, size_t bytes);
void td_platform_aligned_free(void *p);
/* Processors this process may run on now, at least 1. */
uint32_t td_platform_cpu_count(void);
/* Physical memory in bytes; 0 when the system does not say. */
uint64_t td_platform_physical_memory(void);
/* The processor's model name and vendor, for device listings ("host CPU"
 * and "unknown" when the system does not say). */
void td_platform_cpu_name(char *name, size_t name_size, char *vendor, size_t vendor_size);
/* This process's id (for temporary names that tell a dead writer). */
long td_platform_process_id(void);
/* Whether a process with this id is running (or exists but is not ours
 * to signal): false only when it is certainly gone. */
bool td_platform_process_alive(long pid);

/* ---- files ---- */

typedef enum td_file_kind {
    TD_FILE_KIND_REGULAR,
    TD_FILE_KIND_DIRECTORY,
    TD_FILE_KIND_CHARACTER_DEVICE,
    TD_FILE_KIND_BLOCK_DEVICE,
    TD_FILE_KIND_FIFO,
    TD_FILE_KIND_SOCKET,
    TD_FILE_KIND_SYMBOLIC_LINK,
    TD_FILE_KIND_OTHER,
} td_file_kind;

/* What is at `path`, not following a symbolic link (lstat), and its size:
 * 0, ENOENT when nothing is, another errno value when it cannot be
 * examined. size may be NULL. */
int td_platform_path_kind(const char *path, td_file_kind *kind, uint64_t *size);
/* The same, following links (stat): what a reader would open. */
int td_platform_path_kind_followed(const char *path, td_file_kind *kind, uint64_t *size);
/* What an open descriptor is, and its size. */
int td_platform_fd_kind(int fd, td_file_kind *kind, uint64_t *size);

/* Opens for reading, binary, not inherited by child processes, and
 * without waiting for a writer when the path is a FIFO (the caller checks
 * the kind with td_platform_fd_kind, then calls td_platform_fd_blocking). */
int td_platform_open_read(const char *path, int *fd);
/* Clears the non-blocking flag td_platform_open_read set. */
int td_platform_fd_blocking(int fd);
/* Creates a new file for writing (fails with EEXIST when one is there),
 * binary, not inherited, mode 0666 less the umask. */
int td_platform_create_exclusive(const char *path, int *fd);
/* A stdio stream over a descriptor td_platform_create_exclusive made;
 * NULL (errno set) on failure, the descriptor then still open. */
FILE *td_platform_fd_stream(int fd, const char *mode);
int td_platform_close(int fd);
/* Reads up to `bytes` at `offset`: the count read (0 at the end), or -1
 * with errno set. Safe from several threads at once on one descriptor; the
 * descriptor's own position is unspecified afterwards (pread leaves it,
 * Windows' ReadFile at an offset moves it), so a descriptor is read either
 * this way or sequentially, never both. */
int64_t td_platform_read_at(int fd, void *buffer, size_t bytes, uint64_t offset);
/* Flushes the stream and hands its data to the disk (fsync /
 * FlushFileBuffers): what a crash after it returns cannot lose. */
int td_platform_stream_sync(FILE *stream);
/* Renames `from` over `to`, replacing a file there, atomically where the
 * system can (rename; MoveFileEx with REPLACE_EXISTING | WRITE_THROUGH). */
int td_platform_replace_file(const char *from, const char *to);
/* Makes entries created, renamed or removed in `dir` durable: fsync of
 * the directory on POSIX, 0 where the file system cannot (EINVAL,
 * ENOTSUP) and on Windows (MoveFileEx's write-through covers the rename). */
int td_platform_sync_directory(const char *dir);
int td_platform_remove_file(const char *path);
/* Creates a directory (mode 0777 less the umask); EEXIST when something
 * is there already. */
int td_platform_make_directory(const char *path);
int td_platform_remove_directory(const char *path);
/* Creates a new, empty directory of this user's in the system's temporary
 * folder ($TMPDIR or /tmp; GetTempPath), its name starting with `prefix`,
 * and writes its path to out: 0, or an errno value (ENAMETOOLONG when
 * `size` is too small). */
int td_platform_make_temp_directory(const char *prefix, char *out, size_t size);
/* Whether the path is an absolute one ("/x"; "C:\\x", "\\\\server\\x"). */
bool td_platform_path_is_absolute(const char *path);
/* The position of the last separator in path, or NULL ('/', and on
 * Windows also '\\'). */
const char *td_platform_last_separator(const char *path);

/* Directory listing: the names in a directory, "." and ".." left out, in
 * the system's order. */
typedef struct td_platform_dir td_platform_dir;
int td_platform_dir_open(const char *path, td_platform_dir **dir);
/* The next name, valid until the next call; NULL at the end. */
const char *td_platform_dir_next(td_platform_dir *dir);
/* After td_platform_dir_next returned NULL: 0 at the listing's end, or the
 * errno value of the read that failed. */
int td_platform_dir_error(const td_platform_dir *dir);
void td_platform_dir_close(td_platform_dir *dir);

/* The null device, for output thrown away. */
#ifdef _WIN32
#define TD_PLATFORM_NULL_DEVICE "NUL"
#else
#define TD_PLATFORM_NULL_DEVICE "/dev/null"
#endif

/* Whether the descriptor is a terminal (progress lines redraw in place). */
bool td_platform_is_terminal(FILE *stream);

/* ---- processes and signals ---- */

/* Runs `program` (looked up on PATH) with argv (argv[0] the program's
 * name, NULL-terminated), the environment inherited, and waits for it:
 * 0 with *exit_code its exit status (128 + the signal when one ended
 * it), or an errno value (ENOENT when there is no such program). */
int td_platform_run_process(const char *program, char *const argv[], int *exit_code);

/* Calls `on_interrupt` (from a signal handler on POSIX, from a console
 * control thread on Windows: it may only set an atomic flag) when the user
 * interrupts (Ctrl-C; SIGINT, SIGTERM; CTRL_C/CTRL_BREAK/CTRL_CLOSE).
 * Its argument is the POSIX signal number (SIGINT 2, SIGTERM 15; Windows
 * reports a close as 15). Only the first interrupt calls it: a second one
 * ends the process the system's usual way (a user who will not wait). */
int td_platform_on_interrupt(void (*on_interrupt)(int signal_number));

/* Ends the process at once with `code`: no exit handlers, no stdio
 * flush (what a crash test's kill leaves). */
_Noreturn void td_platform_exit_now(int code);

/* ---- shared libraries opened at run time (dynamic_library_*.c) ----
 * dlopen / LoadLibrary and their lookups. The GPU backends use them so that
 * libtandem runs on a machine with no OpenCL ICD loader, CLBlast or Vulkan
 * loader installed: each is opened when a backend is first probed, and its
 * absence is a reason shown to the user rather than a failure to start. */
typedef struct td_dynamic_library td_dynamic_library;

/* A function found in a library, to be cast to its real type. A function
 * pointer type rather than void *: C does not convert between the two. */
typedef void (*td_dynamic_symbol)(void);

/* Tries candidate_names (NULL-terminated) in order and returns the first that
 * opens, or NULL. On NULL, reason (when not NULL) holds each name tried with
 * the system loader's own message, "; "-separated, truncated to
 * reason_size. A name without a slash is searched for the system's way
 * (LD_LIBRARY_PATH, ld.so.cache; the DLL search order on Windows). */
td_dynamic_library *td_dynamic_library_open(const char *const *candidate_names, char *reason,
                                            size_t reason_size);

/* The address of function `name` in lib, or NULL when lib lacks it. */
td_dynamic_symbol td_dynamic_library_symbol(td_dynamic_library *lib, const char *name);

/* The candidate name that opened lib (a string of the caller's list). */
const char *td_dynamic_library_name(const td_dynamic_library *lib);

/* Closes lib; NULL is ignored. Pointers found in it are invalid afterwards. */
void td_dynamic_library_close(td_dynamic_library *lib);

#endif
