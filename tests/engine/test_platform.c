/* The platform layer (engine/platform/td_platform.h), through its own
 * interface only, so the same file checks the POSIX branch here and the
 * Windows branch under wine: deadlines that end on time and not before, a
 * timed join that gives up on a thread and leaves it running, a once that
 * runs once, per-thread slots, aligned memory, file kinds, reads at an
 * offset, a rename over an existing file, directory listings. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_platform.h"

/* A fresh directory for a test's files; removed by remove_tree. */
static void temp_dir(char *out, size_t size)
{
    cr_assert_eq(td_platform_make_temp_directory("tandem-platform-test-", out, size), 0);
    td_file_kind kind;
    cr_assert_eq(td_platform_path_kind(out, &kind, NULL), 0);
    cr_assert_eq(kind, TD_FILE_KIND_DIRECTORY);
}

static void remove_tree(const char *dir)
{
    td_platform_dir *d;
    cr_assert_eq(td_platform_dir_open(dir, &d), 0);
    char path[4200];
    const char *name;
    while ((name = td_platform_dir_next(d)) != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        cr_assert_eq(td_platform_remove_file(path), 0, "removing %s", path);
    }
    td_platform_dir_close(d);
    cr_assert_eq(td_platform_remove_directory(dir), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static void expect_contents(const char *path, const char *text)
{
    char buf[256] = {0};
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot read %s", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    cr_assert_eq(n, strlen(text));
    cr_assert_str_eq(buf, text);
}

Test(platform, clock_moves_forward_and_sleep_lasts)
{
    const uint64_t a = td_platform_now_ns();
    td_platform_sleep_ns(20u * 1000000u);
    const uint64_t b = td_platform_now_ns();
    cr_assert_geq(b - a, 20u * 1000000u, "slept %llu ns", (unsigned long long)(b - a));
    cr_assert_lt(b - a, 2000u * 1000000u);
    const uint64_t d = td_platform_deadline_after_ms(5);
    cr_assert_geq(d, b + 5u * 1000000u);
    cr_assert_eq(td_platform_deadline_after_ms(UINT64_MAX), UINT64_MAX);
}

Test(platform, timed_wait_ends_at_its_deadline_not_before)
{
    td_mutex m;
    td_cond c;
    cr_assert_eq(td_mutex_init(&m), 0);
    cr_assert_eq(td_cond_init(&c), 0);
    const uint64_t start = td_platform_now_ns();
    const uint64_t deadline = start + 50u * 1000000u;
    td_mutex_lock(&m);
    int rc = 0;
    while (rc != ETIMEDOUT)
        rc = td_cond_wait_until(&c, &m, deadline);
    td_mutex_unlock(&m);
    const uint64_t waited = td_platform_now_ns() - start;
    cr_assert_geq(waited, 50u * 1000000u, "returned after %llu ns", (unsigned long long)waited);
    cr_assert_lt(waited, 2000u * 1000000u, "returned after %llu ns", (unsigned long long)waited);
    /* A deadline already past times out at once. */
    td_mutex_lock(&m);
    cr_assert_eq(td_cond_wait_until(&c, &m, start), ETIMEDOUT);
    td_mutex_unlock(&m);
    td_cond_destroy(&c);
    td_mutex_destroy(&m);
}

typedef struct flag_wait {
    td_mutex lock;
    td_cond cond;
    bool raised;
    atomic_int done;
} flag_wait;

static void raise_after_20ms(void *p)
{
    flag_wait *f = p;
    td_platform_sleep_ns(20u * 1000000u);
    td_mutex_lock(&f->lock);
    f->raised = true;
    td_cond_broadcast(&f->cond);
    td_mutex_unlock(&f->lock);
    atomic_store(&f->done, 1);
}

Test(platform, signalled_wait_wakes_before_its_deadline)
{
    flag_wait f = {.raised = false};
    cr_assert_eq(td_mutex_init(&f.lock), 0);
    cr_assert_eq(td_cond_init(&f.cond), 0);
    td_thread t;
    cr_assert_eq(td_thread_start(&t, raise_after_20ms, &f), 0);
    const uint64_t start = td_platform_now_ns();
    td_mutex_lock(&f.lock);
    while (!f.raised && td_cond_wait_until(&f.cond, &f.lock, start + 10000u * 1000000u) != ETIMEDOUT)
        ;
    const bool raised = f.raised;
    td_mutex_unlock(&f.lock);
    cr_assert(raised);
    cr_assert_lt(td_platform_now_ns() - start, 5000u * 1000000u);
    cr_assert(td_thread_join_until(&t, td_platform_deadline_after_ms(10000)));
    cr_assert_null(t.state);
    cr_assert_eq(atomic_load(&f.done), 1);
}

typedef struct gate {
    atomic_int open;
    atomic_int finished;
} gate;

static void wait_for_gate(void *p)
{
    gate *g = p;
    while (!atomic_load(&g->open))
        td_platform_sleep_ns(1000000u);
    atomic_store(&g->finished, 1);
}

Test(platform, timed_join_gives_up_and_the_thread_runs_on)
{
    static gate g; /* outlives the test's frame: the thread is left running */
    atomic_store(&g.open, 0);
    atomic_store(&g.finished, 0);
    td_thread t;
    cr_assert_eq(td_thread_start(&t, wait_for_gate, &g), 0);
    const uint64_t start = td_platform_now_ns();
    cr_assert_not(td_thread_join_until(&t, start + 30u * 1000000u));
    const uint64_t waited = td_platform_now_ns() - start;
    cr_assert_geq(waited, 30u * 1000000u);
    cr_assert_lt(waited, 2000u * 1000000u);
    cr_assert_null(t.state);
    /* Left, not killed: it finishes once let go, and frees its own state
     * (ASan and valgrind see no leak). */
    atomic_store(&g.open, 1);
    for (int i = 0; i < 5000 && !atomic_load(&g.finished); i++)
        td_platform_sleep_ns(1000000u);
    cr_assert_eq(atomic_load(&g.finished), 1);
    td_platform_sleep_ns(20u * 1000000u); /* its return, before the process ends */
}

static atomic_int once_runs;
static td_once once = TD_ONCE_INITIALIZER;

static void count_once(void)
{
    td_platform_sleep_ns(5u * 1000000u); /* the others arrive while it runs */
    atomic_fetch_add(&once_runs, 1);
}

static void call_once(void *p)
{
    (void)p;
    td_once_run(&once, count_once);
    cr_assert_eq(atomic_load(&once_runs), 1); /* done before anyone returns */
}

Test(platform, once_runs_once_whoever_calls)
{
    td_thread t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(td_thread_start(&t[i], call_once, NULL), 0);
    for (int i = 0; i < 4; i++)
        td_thread_join(&t[i]);
    cr_assert_eq(atomic_load(&once_runs), 1);
}

static td_thread_slot slot;

static void use_slot(void *p)
{
    cr_assert_null(td_thread_slot_get(&slot)); /* each thread starts empty */
    int *mine = malloc(sizeof *mine);
    cr_assert(mine);
    *mine = *(int *)p;
    cr_assert_eq(td_thread_slot_set(&slot, mine), 0);
    td_platform_sleep_ns(5u * 1000000u);
    cr_assert_eq(td_thread_slot_get(&slot), mine);
    cr_assert_eq(*(int *)td_thread_slot_get(&slot), *(int *)p);
}

Test(platform, thread_slots_are_per_thread)
{
    cr_assert_eq(td_thread_slot_create(&slot), 0);
    int values[3] = {7, 8, 9};
    td_thread t[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(td_thread_start(&t[i], use_slot, &values[i]), 0);
    for (int i = 0; i < 3; i++)
        td_thread_join(&t[i]);
}

Test(platform, aligned_memory_and_machine_facts)
{
    const size_t alignments[] = {8, 64, 4096};
    for (size_t i = 0; i < 3; i++) {
        unsigned char *p = td_platform_aligned_alloc(alignments[i], 1000);
        cr_assert(p);
        cr_assert_eq((uintptr_t)p % alignments[i], 0);
        memset(p, 0xab, 1000);
        td_platform_aligned_free(p);
    }
    td_platform_aligned_free(NULL);
    cr_assert_geq(td_platform_cpu_count(), 1u);
    cr_assert_gt(td_platform_physical_memory(), (uint64_t)64 << 20);
    char name[128], vendor[64];
    td_platform_cpu_name(name, sizeof name, vendor, sizeof vendor);
    cr_assert_gt(strlen(name), 0);
    cr_assert_gt(strlen(vendor), 0);
    cr_assert_gt(td_platform_process_id(), 0);
    cr_assert(td_platform_process_alive(td_platform_process_id()));
}

Test(platform, replace_file_over_an_existing_one)
{
    char dir[4096], from[4200], to[4200];
    temp_dir(dir, sizeof dir);
    snprintf(from, sizeof from, "%s/new", dir);
    snprintf(to, sizeof to, "%s/target", dir);
    write_file(to, "old contents");
    int fd;
    cr_assert_eq(td_platform_create_exclusive(from, &fd), 0);
    FILE *f = td_platform_fd_stream(fd, "wb");
    cr_assert(f);
    fputs("new contents", f);
    cr_assert_eq(td_platform_stream_sync(f), 0);
    cr_assert_eq(fclose(f), 0);
    /* Exclusive: a second create of the same name is refused. */
    int again;
    cr_assert_eq(td_platform_create_exclusive(from, &again), EEXIST);
    cr_assert_eq(td_platform_replace_file(from, to), 0);
    cr_assert_eq(td_platform_sync_directory(dir), 0);
    expect_contents(to, "new contents");
    td_file_kind kind;
    cr_assert_eq(td_platform_path_kind(from, &kind, NULL), ENOENT);
    remove_tree(dir);
}

Test(platform, kinds_reads_at_offsets_and_listings)
{
    char dir[4096], path[4200], sub[4200];
    temp_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/data.bin", dir);
    write_file(path, "0123456789");
    td_file_kind kind;
    uint64_t size = 0;
    cr_assert_eq(td_platform_path_kind_followed(path, &kind, &size), 0);
    cr_assert_eq(kind, TD_FILE_KIND_REGULAR);
    cr_assert_eq(size, 10);
    int fd;
    cr_assert_eq(td_platform_open_read(path, &fd), 0);
    cr_assert_eq(td_platform_fd_kind(fd, &kind, &size), 0);
    cr_assert_eq(kind, TD_FILE_KIND_REGULAR);
    cr_assert_eq(size, 10);
    cr_assert_eq(td_platform_fd_blocking(fd), 0);
    char buf[8] = {0};
    cr_assert_eq(td_platform_read_at(fd, buf, 4, 3), 4);
    cr_assert_str_eq(buf, "3456");
    cr_assert_eq(td_platform_read_at(fd, buf, 4, 8), 2); /* short at the end */
    cr_assert_eq(td_platform_read_at(fd, buf, 4, 10), 0);
    cr_assert_eq(td_platform_close(fd), 0);
    cr_assert_eq(td_platform_open_read("no/such/file", &fd), ENOENT);

    snprintf(sub, sizeof sub, "%s/sub", dir);
    cr_assert_eq(td_platform_make_directory(sub), 0);
    cr_assert_eq(td_platform_make_directory(sub), EEXIST);
    cr_assert_eq(td_platform_path_kind(sub, &kind, NULL), 0);
    cr_assert_eq(kind, TD_FILE_KIND_DIRECTORY);
    td_platform_dir *d;
    cr_assert_eq(td_platform_dir_open(dir, &d), 0);
    int seen_data = 0, seen_sub = 0, others = 0;
    const char *name;
    while ((name = td_platform_dir_next(d)) != NULL) {
        if (strcmp(name, "data.bin") == 0)
            seen_data++;
        else if (strcmp(name, "sub") == 0)
            seen_sub++;
        else
            others++; /* "." and ".." are left out */
    }
    cr_assert_eq(td_platform_dir_error(d), 0);
    td_platform_dir_close(d);
    cr_assert_eq(seen_data, 1);
    cr_assert_eq(seen_sub, 1);
    cr_assert_eq(others, 0);
    cr_assert_eq(td_platform_remove_directory(sub), 0);
    remove_tree(dir);
}

Test(platform, path_helpers)
{
    cr_assert(td_platform_path_is_absolute("/tmp/x"));
    cr_assert_not(td_platform_path_is_absolute("tmp/x"));
    const char *p = "a/b/c";
    cr_assert_eq(td_platform_last_separator(p), p + 3);
    cr_assert_null(td_platform_last_separator("plain"));
#ifdef _WIN32
    cr_assert(td_platform_path_is_absolute("C:\\x"));
    const char *w = "a/b\\c";
    cr_assert_eq(td_platform_last_separator(w), w + 3);
#endif
}

Test(platform, run_process_reports_exit_status_and_missing_programs)
{
    int code = -1;
    char *const missing[] = {"tandem-no-such-program", NULL};
    const int err = td_platform_run_process("tandem-no-such-program", missing, &code);
    /* posix_spawnp reports a missing program itself (glibc 2.24 on) or as
     * the child's exit 127 (older glibc, macOS). */
    cr_assert(err == ENOENT || (err == 0 && code == 127), "err %d, code %d", err, code);
#ifndef _WIN32
    char *const ok[] = {"sh", "-c", "exit 3", NULL};
    cr_assert_eq(td_platform_run_process("sh", ok, &code), 0);
    cr_assert_eq(code, 3);
#endif
}

typedef struct {
    td_mutex *lock;
    atomic_int took;
} try_taker;

static void try_from_another_thread(void *p)
{
    try_taker *t = p;
    const bool took = td_mutex_try_lock(t->lock);
    if (took)
        td_mutex_unlock(t->lock);
    atomic_store(&t->took, took ? 1 : 0);
}

/* A held mutex refuses another thread's try, a free one gives it (the
 * workers' spin takes the pool's lock this way, engine/core/worker.c). */
Test(platform, try_lock_takes_only_a_free_mutex)
{
    td_mutex lock;
    cr_assert_eq(td_mutex_init(&lock), 0);
    cr_assert(td_mutex_try_lock(&lock), "a free mutex");
    try_taker t = {.lock = &lock};
    atomic_store(&t.took, -1);
    td_thread th;
    cr_assert_eq(td_thread_start(&th, try_from_another_thread, &t), 0);
    cr_assert(td_thread_join_until(&th, td_platform_deadline_after_ms(10000)));
    cr_assert_eq(atomic_load(&t.took), 0, "another thread took a held mutex");
    td_mutex_unlock(&lock);
    atomic_store(&t.took, -1);
    cr_assert_eq(td_thread_start(&th, try_from_another_thread, &t), 0);
    cr_assert(td_thread_join_until(&th, td_platform_deadline_after_ms(10000)));
    cr_assert_eq(atomic_load(&t.took), 1, "another thread could not take a free mutex");
    td_mutex_destroy(&lock);
}

/* ---- fibers ---- */

typedef struct {
    int id;
    int *log;
    int *logged;
    bool inside[3];
    bool intact[3];
} fiber_trace;

/* Three turns, each on a stack frame too big for a small stack: the
 * fiber's own stack holds it, and the values survive the switches. */
static void three_turns(void *arg)
{
    fiber_trace *t = arg;
    for (int turn = 0; turn < 3; turn++) {
        volatile char frame[256 * 1024];
        memset((char *)frame, t->id + turn, sizeof frame);
        t->inside[turn] = td_fiber_inside();
        td_fiber_suspend();
        /* Checked by the test on its own stack: a failed assertion must
         * not leave from a fiber's. */
        t->intact[turn] = frame[0] == t->id + turn && frame[sizeof frame - 1] == t->id + turn;
        t->log[(*t->logged)++] = t->id * 10 + turn;
    }
}

Test(platform, fibers_take_turns_on_their_own_stacks)
{
    if (!td_fiber_available()) {
        td_fiber *f = (td_fiber *)&f;
        cr_assert_eq(td_fiber_create(&f, 1 << 20, three_turns, NULL), ENOSYS);
        cr_assert_null(f);
        cr_skip("no fibers on this system (td_fiber_create answers ENOSYS, checked)");
    }
    int log[6], logged = 0;
    fiber_trace a = {.id = 1, .log = log, .logged = &logged}, b = {.id = 2, .log = log, .logged = &logged};
    td_fiber *fa, *fb;
    cr_assert_eq(td_fiber_create(&fa, 1 << 20, three_turns, &a), 0);
    cr_assert_eq(td_fiber_create(&fb, 1 << 20, three_turns, &b), 0);
    cr_assert_eq(td_fiber_create(&(td_fiber *){NULL}, 16, three_turns, &a), EINVAL);
    cr_assert_not(td_fiber_inside());
    while (!td_fiber_finished(fa) || !td_fiber_finished(fb)) {
        if (!td_fiber_finished(fa))
            td_fiber_resume(fa);
        if (!td_fiber_finished(fb))
            td_fiber_resume(fb);
        cr_assert_not(td_fiber_inside());
    }
    /* Each resume ran one fiber to its next suspend: strictly alternating. */
    const int expected[6] = {10, 20, 11, 21, 12, 22};
    cr_assert_eq(logged, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(log[i], expected[i], "entry %d: %d, expected %d", i, log[i], expected[i]);
    for (int turn = 0; turn < 3; turn++) {
        cr_assert(a.inside[turn] && b.inside[turn], "turn %d did not run on a fiber", turn);
        cr_assert(a.intact[turn] && b.intact[turn], "turn %d's frame changed across a switch", turn);
    }
    td_fiber_destroy(fa);
    td_fiber_destroy(fb);
    td_fiber_destroy(NULL);
}
