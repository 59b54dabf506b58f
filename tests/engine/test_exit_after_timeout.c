/* No tandem thread may still be inside another library when the process
 * exits: a run whose CPU kernels outlast the context's timeout is fenced
 * off, and OpenBLAS's exit handler unmaps the buffers a worker still inside
 * cblas_sgemm would be using (docs/DESIGN.md, "No tandem thread outlives
 * its context").
 *
 * The scenario runs in separate processes (exit_after_timeout_child.c,
 * spawned, not forked: a fork of this process would run Criterion's exit
 * handlers too): a step that times out inside two long GEMMs, a second
 * step, then the end of main -- after td_context_destroy, and without it;
 * and a program run that times out, main returning at once. Before the
 * fix the children died of SIGSEGV in 17, 9 and 4 runs of 20 (and the
 * destroy took over 2 s in two more); with the cancel but without the
 * exit handler, the last one still did in 8 of 20. Every child must now
 * exit 0. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

enum { RUNS = 5 };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* This environment less MALLOC_PERTURB_ (meson test sets it): filling
 * every allocation would make the child's setup, not its GEMMs, outlast
 * the small timeout it races against. */
static char **child_environment(void)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 1, sizeof *env);
    cr_assert(env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "MALLOC_PERTURB_=", 16) != 0)
            env[k++] = environ[i];
    return env;
}

/* Runs the child `runs` times in `mode`; fails on the first run that does
 * not exit 0, naming the signal or the status. */
static void run_children(const char *mode, int runs)
{
    char **env = child_environment();
    for (int i = 0; i < runs; i++) {
        char *argv[] = {(char *)TD_EXIT_CHILD, (char *)mode, NULL};
        pid_t pid;
        const double t0 = now_s();
        int rc = posix_spawn(&pid, TD_EXIT_CHILD, NULL, NULL, argv, env);
        cr_assert_eq(rc, 0, "posix_spawn %s: %s", TD_EXIT_CHILD, strerror(rc));
        int status = 0;
        pid_t got;
        while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
            ;
        cr_assert_eq(got, pid, "waitpid: %s", strerror(errno));
        cr_assert(!WIFSIGNALED(status), "%s run %d of %d died of signal %d (%s) after %.2f s", mode, i + 1, runs,
                  WTERMSIG(status), strsignal(WTERMSIG(status)), now_s() - t0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%s run %d of %d exited with status %d (2 setup, 3 no timeout, 4 slow to stop; see its stderr)",
                  mode, i + 1, runs, WEXITSTATUS(status));
    }
    free(env);
}

Test(exit_after_timeout, destroy_then_exit_after_a_timed_out_gemm_never_crashes, .timeout = 120)
{
    run_children("destroy", RUNS);
}

/* A caller that never destroys its context: the process's exit waits for
 * the fenced workers to leave their kernels before OpenBLAS goes. */
Test(exit_after_timeout, exit_without_destroy_after_a_timed_out_gemm_never_crashes, .timeout = 120)
{
    run_children("exit", RUNS);
}

/* The same, returning from main the moment the run times out: the fenced
 * workers are then usually still inside their last GEMM tile. */
Test(exit_after_timeout, exit_right_after_a_timed_out_run_never_crashes, .timeout = 120)
{
    run_children("run-exit", RUNS);
}
