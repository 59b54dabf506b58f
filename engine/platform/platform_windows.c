/* The platform layer on Windows (td_platform.h), built with mingw-w64 and
 * run in CI under wine. Threads are Win32's own (SRW locks, condition
 * variables, _beginthreadex), the clock is QueryPerformanceCounter, paths
 * are UTF-8 converted to UTF-16 for the wide calls, and the file
 * descriptors are the C runtime's (_wopen, binary). Windows error codes
 * become errno values (to_errno) so callers write one message for both
 * branches. */
#include "td_platform.h"

#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <process.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <windows.h>

/* ---- errors, paths ---- */

static int to_errno(DWORD code)
{
    switch (code) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_DRIVE:
    case ERROR_BAD_NETPATH:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
        return EACCES;
    case ERROR_ALREADY_EXISTS:
    case ERROR_FILE_EXISTS:
        return EEXIST;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return ENOMEM;
    case ERROR_DIRECTORY:
        return ENOTDIR;
    case ERROR_DIR_NOT_EMPTY:
        return ENOTEMPTY;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return ENOSPC;
    case ERROR_INVALID_NAME:
    case ERROR_INVALID_PARAMETER:
        return EINVAL;
    case ERROR_BAD_EXE_FORMAT:
        return ENOEXEC;
    default:
        return EIO;
    }
}

/* UTF-8 to a malloc'd UTF-16 string; NULL (errno set) when it is not. */
static wchar_t *widen(const char *s)
{
    const int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    if (n <= 0) {
        errno = EINVAL;
        return NULL;
    }
    wchar_t *w = malloc((size_t)n * sizeof *w);
    if (!w) {
        errno = ENOMEM;
        return NULL;
    }
    MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n);
    return w;
}

/* ---- clock, sleeping ---- */

uint64_t td_platform_now_ns(void)
{
    static LARGE_INTEGER frequency; /* fixed at boot: a benign race */
    if (frequency.QuadPart == 0)
        QueryPerformanceFrequency(&frequency);
    LARGE_INTEGER now;
    QueryPerformanceCounter(&now);
    const uint64_t ticks = (uint64_t)now.QuadPart, hz = (uint64_t)frequency.QuadPart;
    return ticks / hz * 1000000000u + ticks % hz * 1000000000u / hz;
}

uint64_t td_platform_deadline_after_ms(uint64_t ms)
{
    const uint64_t now = td_platform_now_ns();
    return ms >= (UINT64_MAX - now) / 1000000u ? UINT64_MAX : now + ms * 1000000u;
}

void td_platform_sleep_ns(uint64_t ns)
{
    const uint64_t ms = (ns + 999999u) / 1000000u;
    Sleep(ms > 0xfffffffeu ? 0xfffffffeu : (DWORD)ms);
}

void td_platform_yield(void)
{
    SwitchToThread();
}

/* ---- mutexes, condition variables, once ---- */

int td_mutex_init(td_mutex *m)
{
    InitializeSRWLock((PSRWLOCK)m);
    return 0;
}

void td_mutex_destroy(td_mutex *m)
{
    (void)m; /* an SRW lock holds no resources */
}

void td_mutex_lock(td_mutex *m)
{
    AcquireSRWLockExclusive((PSRWLOCK)m);
}

bool td_mutex_try_lock(td_mutex *m)
{
    return TryAcquireSRWLockExclusive((PSRWLOCK)m) != 0;
}

void td_mutex_unlock(td_mutex *m)
{
    ReleaseSRWLockExclusive((PSRWLOCK)m);
}

int td_cond_init(td_cond *c)
{
    InitializeConditionVariable((PCONDITION_VARIABLE)c);
    return 0;
}

void td_cond_destroy(td_cond *c)
{
    (void)c;
}

void td_cond_signal(td_cond *c)
{
    WakeConditionVariable((PCONDITION_VARIABLE)c);
}

void td_cond_broadcast(td_cond *c)
{
    WakeAllConditionVariable((PCONDITION_VARIABLE)c);
}

void td_cond_wait(td_cond *c, td_mutex *m)
{
    SleepConditionVariableSRW((PCONDITION_VARIABLE)c, (PSRWLOCK)m, INFINITE, 0);
}

int td_cond_wait_until(td_cond *c, td_mutex *m, uint64_t deadline_ns)
{
    const uint64_t now = td_platform_now_ns();
    if (now >= deadline_ns)
        return ETIMEDOUT;
    /* Rounded up, so a wait never returns before its deadline. */
    const uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
    SleepConditionVariableSRW((PCONDITION_VARIABLE)c, (PSRWLOCK)m, ms >= INFINITE ? INFINITE - 1 : (DWORD)ms, 0);
    return td_platform_now_ns() >= deadline_ns ? ETIMEDOUT : 0;
}

static BOOL CALLBACK run_once(PINIT_ONCE once, PVOID fn, PVOID *context)
{
    (void)once;
    (void)context;
    void (*f)(void);
    memcpy(&f, &fn, sizeof f);
    f();
    return TRUE;
}

void td_once_run(td_once *once, void (*fn)(void))
{
    void *p;
    memcpy(&p, &fn, sizeof p);
    InitOnceExecuteOnce((PINIT_ONCE)once, run_once, p, NULL);
}

/* ---- threads ---- */

struct td_thread_state {
    HANDLE handle;
    void (*fn)(void *);
    void *arg;
};

static unsigned __stdcall thread_main(void *p)
{
    td_thread_state *st = p;
    void (*fn)(void *) = st->fn;
    void *arg = st->arg;
    /* The handle is all the joiner needs; the rest goes now, so a thread
     * left running after a timed-out join owns nothing of it. */
    free(st);
    fn(arg);
    return 0;
}

int td_thread_start(td_thread *t, void (*fn)(void *arg), void *arg)
{
    t->state = NULL;
    td_thread_state *st = calloc(1, sizeof *st);
    td_thread_state *handle_only = calloc(1, sizeof *handle_only);
    if (!st || !handle_only) {
        free(st);
        free(handle_only);
        return ENOMEM;
    }
    st->fn = fn;
    st->arg = arg;
    const uintptr_t h = _beginthreadex(NULL, 0, thread_main, st, 0, NULL);
    if (h == 0) {
        const int err = errno ? errno : EAGAIN;
        free(st);
        free(handle_only);
        return err;
    }
    handle_only->handle = (HANDLE)h;
    t->state = handle_only;
    return 0;
}

void td_thread_join(td_thread *t)
{
    if (!t->state)
        return;
    WaitForSingleObject(t->state->handle, INFINITE);
    CloseHandle(t->state->handle);
    free(t->state);
    t->state = NULL;
}

bool td_thread_join_until(td_thread *t, uint64_t deadline_ns)
{
    td_thread_state *st = t->state;
    if (!st)
        return true;
    t->state = NULL;
    DWORD rc;
    do {
        const uint64_t now = td_platform_now_ns();
        const uint64_t ms = now >= deadline_ns ? 0 : (deadline_ns - now + 999999u) / 1000000u;
        rc = WaitForSingleObject(st->handle, ms >= INFINITE ? INFINITE - 1 : (DWORD)ms);
    } while (rc == WAIT_TIMEOUT && td_platform_now_ns() < deadline_ns);
    /* Closing the handle of a running thread detaches it: it runs on. */
    CloseHandle(st->handle);
    free(st);
    return rc == WAIT_OBJECT_0;
}

static void WINAPI free_slot_value(void *value)
{
    free(value);
}

int td_thread_slot_create(td_thread_slot *slot)
{
    /* A fiber-local slot: unlike TlsAlloc's, it calls back at thread exit
     * with the thread's value, as pthread_key_create's destructor does. */
    const DWORD index = FlsAlloc(free_slot_value);
    if (index == FLS_OUT_OF_INDEXES)
        return EAGAIN;
    slot->key = index;
    return 0;
}

void *td_thread_slot_get(const td_thread_slot *slot)
{
    return FlsGetValue((DWORD)slot->key);
}

int td_thread_slot_set(const td_thread_slot *slot, void *value)
{
    return FlsSetValue((DWORD)slot->key, value) ? 0 : to_errno(GetLastError());
}

/* ---- memory and processors ---- */

void *td_platform_aligned_alloc(size_t alignment, size_t bytes)
{
    return _aligned_malloc(bytes ? bytes : 1, alignment);
}

void td_platform_aligned_free(void *p)
{
    _aligned_free(p);
}

uint32_t td_platform_cpu_count(void)
{
    const DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n < 1 ? 1u : (uint32_t)n;
}

uint64_t td_platform_physical_memory(void)
{
    MEMORYSTATUSEX status;
    status.dwLength = sizeof status;
    return GlobalMemoryStatusEx(&status) ? (uint64_t)status.ullTotalPhys : 0;
}

/* The registry's description of processor 0 (what Task Manager shows). */
static void read_processor_value(const char *value, char *out, size_t size)
{
    char text[256];
    DWORD bytes = sizeof text;
    if (RegGetValueA(HKEY_LOCAL_MACHINE, "HARDWARE\\DESCRIPTION\\System\\CentralProcessor\\0", value,
                     RRF_RT_REG_SZ, NULL, text, &bytes) == ERROR_SUCCESS)
        snprintf(out, size, "%s", text);
}

void td_platform_cpu_name(char *name, size_t name_size, char *vendor, size_t vendor_size)
{
    snprintf(name, name_size, "host CPU");
    snprintf(vendor, vendor_size, "unknown");
    read_processor_value("ProcessorNameString", name, name_size);
    read_processor_value("VendorIdentifier", vendor, vendor_size);
}

long td_platform_process_id(void)
{
    return (long)GetCurrentProcessId();
}

bool td_platform_process_alive(long pid)
{
    HANDLE h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!h)
        return GetLastError() != ERROR_INVALID_PARAMETER; /* no such process */
    DWORD code = 0;
    const bool running = GetExitCodeProcess(h, &code) && code == STILL_ACTIVE;
    CloseHandle(h);
    return running;
}

/* ---- files ---- */

static int kind_from_attributes(DWORD attributes, td_file_kind *kind)
{
    if (attributes & FILE_ATTRIBUTE_REPARSE_POINT)
        *kind = TD_FILE_KIND_SYMBOLIC_LINK;
    else if (attributes & FILE_ATTRIBUTE_DIRECTORY)
        *kind = TD_FILE_KIND_DIRECTORY;
    else if (attributes & FILE_ATTRIBUTE_DEVICE)
        *kind = TD_FILE_KIND_CHARACTER_DEVICE;
    else
        *kind = TD_FILE_KIND_REGULAR;
    return 0;
}

/* Windows has no FIFOs or sockets in the file system; a device name
 * ("NUL", "CON") reports as a character device through the C runtime. */
static int path_kind(const char *path, bool follow, td_file_kind *kind, uint64_t *size)
{
    wchar_t *w = widen(path);
    if (!w)
        return errno;
    WIN32_FILE_ATTRIBUTE_DATA data;
    const BOOL ok = GetFileAttributesExW(w, GetFileExInfoStandard, &data);
    const DWORD err = ok ? 0 : GetLastError();
    if (!ok) {
        /* Device names have no attributes; the C runtime knows them. */
        struct _stat64 st;
        const int rc = _wstat64(w, &st);
        free(w);
        if (rc == 0 && (st.st_mode & _S_IFCHR)) {
            *kind = TD_FILE_KIND_CHARACTER_DEVICE;
            if (size)
                *size = 0;
            return 0;
        }
        return to_errno(err);
    }
    free(w);
    if (size)
        *size = (uint64_t)data.nFileSizeHigh << 32 | data.nFileSizeLow;
    DWORD attributes = data.dwFileAttributes;
    /* "Followed" reports a link's target as a file or directory by the
     * link's own directory flag; tandem never creates links, and a reader
     * opens the target and checks the descriptor (td_platform_fd_kind). */
    if (follow)
        attributes &= ~(DWORD)FILE_ATTRIBUTE_REPARSE_POINT;
    return kind_from_attributes(attributes, kind);
}

int td_platform_path_kind(const char *path, td_file_kind *kind, uint64_t *size)
{
    return path_kind(path, false, kind, size);
}

int td_platform_path_kind_followed(const char *path, td_file_kind *kind, uint64_t *size)
{
    return path_kind(path, true, kind, size);
}

int td_platform_fd_kind(int fd, td_file_kind *kind, uint64_t *size)
{
    struct _stat64 st;
    if (_fstat64(fd, &st) != 0)
        return errno;
    *kind = (st.st_mode & _S_IFMT) == _S_IFREG   ? TD_FILE_KIND_REGULAR
            : (st.st_mode & _S_IFMT) == _S_IFDIR ? TD_FILE_KIND_DIRECTORY
            : (st.st_mode & _S_IFMT) == _S_IFCHR ? TD_FILE_KIND_CHARACTER_DEVICE
            : (st.st_mode & _S_IFMT) == _S_IFIFO ? TD_FILE_KIND_FIFO
                                                 : TD_FILE_KIND_OTHER;
    if (size)
        *size = (uint64_t)st.st_size;
    return 0;
}

int td_platform_open_read(const char *path, int *fd)
{
    *fd = -1;
    wchar_t *w = widen(path);
    if (!w)
        return errno;
    *fd = _wopen(w, _O_RDONLY | _O_BINARY | _O_NOINHERIT);
    const int err = errno;
    free(w);
    return *fd < 0 ? err : 0;
}

int td_platform_fd_blocking(int fd)
{
    (void)fd; /* Windows opens never wait for a writer */
    return 0;
}

int td_platform_create_exclusive(const char *path, int *fd)
{
    *fd = -1;
    wchar_t *w = widen(path);
    if (!w)
        return errno;
    *fd = _wopen(w, _O_WRONLY | _O_CREAT | _O_EXCL | _O_BINARY | _O_NOINHERIT, _S_IREAD | _S_IWRITE);
    const int err = errno;
    free(w);
    return *fd < 0 ? err : 0;
}

FILE *td_platform_fd_stream(int fd, const char *mode)
{
    return _fdopen(fd, mode);
}

int td_platform_close(int fd)
{
    return _close(fd) != 0 ? errno : 0;
}

int64_t td_platform_read_at(int fd, void *buffer, size_t bytes, uint64_t offset)
{
    HANDLE h = (HANDLE)_get_osfhandle(fd);
    if (h == INVALID_HANDLE_VALUE) {
        errno = EBADF;
        return -1;
    }
    OVERLAPPED at;
    memset(&at, 0, sizeof at);
    at.Offset = (DWORD)offset;
    at.OffsetHigh = (DWORD)(offset >> 32);
    DWORD got = 0;
    const DWORD want = bytes > 0x40000000u ? 0x40000000u : (DWORD)bytes;
    if (!ReadFile(h, buffer, want, &got, &at)) {
        const DWORD err = GetLastError();
        if (err == ERROR_HANDLE_EOF)
            return 0;
        errno = to_errno(err);
        return -1;
    }
    return (int64_t)got;
}

int td_platform_stream_sync(FILE *stream)
{
    if (fflush(stream) != 0)
        return errno;
    HANDLE h = (HANDLE)_get_osfhandle(_fileno(stream));
    if (h == INVALID_HANDLE_VALUE)
        return EBADF;
    return FlushFileBuffers(h) ? 0 : to_errno(GetLastError());
}

int td_platform_replace_file(const char *from, const char *to)
{
    wchar_t *wf = widen(from), *wt = wf ? widen(to) : NULL;
    if (!wf || !wt) {
        const int err = errno;
        free(wf);
        return err;
    }
    /* rename() on Windows refuses an existing target; MoveFileEx replaces
     * it, and write-through returns only once the move is on disk (the
     * directory sync of the POSIX branch). */
    const BOOL ok = MoveFileExW(wf, wt, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH);
    const DWORD err = ok ? 0 : GetLastError();
    free(wf);
    free(wt);
    return ok ? 0 : to_errno(err);
}

int td_platform_sync_directory(const char *dir)
{
    (void)dir;
    return 0;
}

int td_platform_remove_file(const char *path)
{
    wchar_t *w = widen(path);
    if (!w)
        return errno;
    const BOOL ok = DeleteFileW(w);
    const DWORD err = ok ? 0 : GetLastError();
    free(w);
    return ok ? 0 : to_errno(err);
}

int td_platform_make_directory(const char *path)
{
    wchar_t *w = widen(path);
    if (!w)
        return errno;
    const BOOL ok = CreateDirectoryW(w, NULL);
    const DWORD err = ok ? 0 : GetLastError();
    free(w);
    return ok ? 0 : to_errno(err);
}

int td_platform_remove_directory(const char *path)
{
    wchar_t *w = widen(path);
    if (!w)
        return errno;
    const BOOL ok = RemoveDirectoryW(w);
    const DWORD err = ok ? 0 : GetLastError();
    free(w);
    return ok ? 0 : to_errno(err);
}

int td_platform_make_temp_directory(const char *prefix, char *out, size_t size)
{
    wchar_t wide[MAX_PATH + 1];
    const DWORD n = GetTempPathW(MAX_PATH + 1, wide);
    if (n == 0 || n > MAX_PATH)
        return ENOENT;
    char base[4 * MAX_PATH];
    if (WideCharToMultiByte(CP_UTF8, 0, wide, -1, base, (int)sizeof base, NULL, NULL) <= 0)
        return EINVAL;
    /* The process id and a counter make the name; CreateDirectory fails
     * on one that exists, so a clash only costs another try. */
    static volatile long counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        const long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        const int len = snprintf(out, size, "%s%s%lu-%ld", base, prefix, (unsigned long)GetCurrentProcessId(), k);
        if (len < 0 || (size_t)len >= size)
            return ENAMETOOLONG;
        const int err = td_platform_make_directory(out);
        if (err != EEXIST)
            return err;
    }
    return EEXIST;
}

bool td_platform_path_is_absolute(const char *path)
{
    if (path[0] == '/' || path[0] == '\\')
        return true;
    return ((path[0] >= 'A' && path[0] <= 'Z') || (path[0] >= 'a' && path[0] <= 'z')) && path[1] == ':' &&
           (path[2] == '/' || path[2] == '\\');
}

const char *td_platform_last_separator(const char *path)
{
    const char *slash = strrchr(path, '/'), *back = strrchr(path, '\\');
    return !slash ? back : !back ? slash : slash > back ? slash : back;
}

struct td_platform_dir {
    HANDLE find;
    bool pending; /* `data` holds an entry not yet returned */
    int error;
    WIN32_FIND_DATAW data;
    char name[MAX_PATH * 4];
};

int td_platform_dir_open(const char *path, td_platform_dir **dir)
{
    *dir = NULL;
    const size_t len = strlen(path);
    char *pattern = malloc(len + 3);
    if (!pattern)
        return ENOMEM;
    memcpy(pattern, path, len);
    memcpy(pattern + len, "/*", 3);
    wchar_t *w = widen(pattern);
    free(pattern);
    if (!w)
        return errno;
    td_platform_dir *d = calloc(1, sizeof *d);
    if (!d) {
        free(w);
        return ENOMEM;
    }
    d->find = FindFirstFileW(w, &d->data);
    const DWORD err = d->find == INVALID_HANDLE_VALUE ? GetLastError() : 0;
    free(w);
    /* A drive's root has no "." or "..": with nothing in it, the search
     * finds no file, which is an empty listing, not an error. */
    if (d->find == INVALID_HANDLE_VALUE && err != ERROR_FILE_NOT_FOUND) {
        free(d);
        return to_errno(err);
    }
    d->pending = d->find != INVALID_HANDLE_VALUE;
    *dir = d;
    return 0;
}

const char *td_platform_dir_next(td_platform_dir *dir)
{
    for (;;) {
        if (dir->find == INVALID_HANDLE_VALUE)
            return NULL;
        if (!dir->pending && !FindNextFileW(dir->find, &dir->data)) {
            const DWORD err = GetLastError();
            dir->error = err == ERROR_NO_MORE_FILES ? 0 : to_errno(err);
            return NULL;
        }
        dir->pending = false;
        const wchar_t *n = dir->data.cFileName;
        if (wcscmp(n, L".") == 0 || wcscmp(n, L"..") == 0)
            continue;
        if (WideCharToMultiByte(CP_UTF8, 0, n, -1, dir->name, (int)sizeof dir->name, NULL, NULL) > 0)
            return dir->name;
    }
}

int td_platform_dir_error(const td_platform_dir *dir)
{
    return dir->error;
}

void td_platform_dir_close(td_platform_dir *dir)
{
    if (dir) {
        if (dir->find != INVALID_HANDLE_VALUE)
            FindClose(dir->find);
        free(dir);
    }
}

bool td_platform_is_terminal(FILE *stream)
{
    return _isatty(_fileno(stream)) != 0;
}

/* ---- processes and signals ---- */

/* One argument quoted for CommandLineToArgvW's rules: backslashes are
 * literal unless they precede a quote. */
static size_t quote_argument(const char *arg, char *out)
{
    size_t n = 0;
    out[n++] = '"';
    for (const char *p = arg;; p++) {
        size_t backslashes = 0;
        while (*p == '\\') {
            backslashes++;
            p++;
        }
        if (*p == '\0') {
            for (size_t i = 0; i < 2 * backslashes; i++)
                out[n++] = '\\';
            break;
        }
        const size_t copies = *p == '"' ? 2 * backslashes + 1 : backslashes;
        for (size_t i = 0; i < copies; i++)
            out[n++] = '\\';
        out[n++] = *p;
    }
    out[n++] = '"';
    return n;
}

int td_platform_run_process(const char *program, char *const argv[], int *exit_code)
{
    size_t cap = 1;
    for (size_t i = 0; argv[i]; i++)
        cap += 2 * strlen(argv[i]) + 3;
    char *line = malloc(cap);
    if (!line)
        return ENOMEM;
    size_t n = 0;
    for (size_t i = 0; argv[i]; i++) {
        if (i)
            line[n++] = ' ';
        n += quote_argument(i == 0 ? program : argv[i], line + n);
    }
    line[n] = '\0';
    wchar_t *wline = widen(line);
    free(line);
    if (!wline)
        return errno;
    STARTUPINFOW si;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    PROCESS_INFORMATION pi;
    /* No application name: CreateProcess then searches PATH for the first
     * word, and adds ".exe". */
    const BOOL ok = CreateProcessW(NULL, wline, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi);
    const DWORD err = ok ? 0 : GetLastError();
    free(wline);
    if (!ok)
        return to_errno(err);
    WaitForSingleObject(pi.hProcess, INFINITE);
    DWORD code = 1;
    GetExitCodeProcess(pi.hProcess, &code);
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    *exit_code = (int)code;
    return 0;
}

static void (*volatile interrupt_hook)(int);

/* Runs on a thread the console starts. Taking the hook makes the next
 * event fall through to the default handler, which ends the process. */
static BOOL WINAPI on_console_event(DWORD event)
{
    if (event != CTRL_C_EVENT && event != CTRL_BREAK_EVENT && event != CTRL_CLOSE_EVENT)
        return FALSE;
    void (*hook)(int) = __atomic_exchange_n(&interrupt_hook, NULL, __ATOMIC_ACQ_REL);
    if (!hook)
        return FALSE;
    hook(event == CTRL_CLOSE_EVENT ? 15 : 2);
    return TRUE;
}

int td_platform_on_interrupt(void (*on_interrupt)(int signal_number))
{
    interrupt_hook = on_interrupt;
    return SetConsoleCtrlHandler(on_console_event, TRUE) ? 0 : to_errno(GetLastError());
}

_Noreturn void td_platform_exit_now(int code)
{
    _exit(code);
}

/* ---- fibers ----
 * None here (td_platform.h): the device workers keep a thread per device
 * on Windows, as on any system without fiber_posix.c's switch. */

bool td_fiber_available(void)
{
    return false;
}

int td_fiber_create(td_fiber **out, size_t stack_bytes, void (*fn)(void *arg), void *arg)
{
    (void)stack_bytes;
    (void)fn;
    (void)arg;
    *out = NULL;
    return ENOSYS;
}

void td_fiber_resume(td_fiber *f)
{
    (void)f;
}

void td_fiber_suspend(void)
{
}

bool td_fiber_inside(void)
{
    return false;
}

bool td_fiber_finished(const td_fiber *f)
{
    (void)f;
    return true;
}

void td_fiber_destroy(td_fiber *f)
{
    (void)f;
}
