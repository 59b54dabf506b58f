/* Fibers (td_platform.h): a stack of its own and a function on it, run by
 * whichever thread resumes it until the function suspends.
 *
 * Only x86-64 ELF systems have them: the switch is a few instructions of
 * assembly that keep the registers the System V ABI says a call preserves
 * (and the SSE and x87 control words), where glibc's swapcontext also
 * saves the signal mask with a system call each time (about 240 ns a
 * switch on this VM, measured; this switch takes a few). Elsewhere
 * td_fiber_available() is false and callers keep a thread per task.
 *
 * The sanitizers and valgrind are told of every stack switch, or they
 * would take the fiber's frames for a corrupt thread stack: ASan through
 * __sanitizer_{start,finish}_switch_fiber, TSan through its fiber
 * interface (each fiber a thread of its own to it, synchronized with the
 * thread at every switch), valgrind through a registered stack. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "td_platform.h"

#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__)
#define TD_FIBERS 1
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define TD_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TD_FIBER_TSAN 1
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TD_FIBER_VALGRIND 1
#endif
#endif

struct td_fiber {
    void *sp;        /* the fiber's stack pointer while it is suspended */
    void *thread_sp; /* the resuming thread's while the fiber runs */
    void *map;       /* the mapping: a guard page, then the stack */
    size_t map_bytes;
    char *stack;
    size_t stack_bytes;
    void (*fn)(void *arg);
    void *arg;
    bool finished;
#ifdef TD_FIBER_ASAN
    const void *thread_stack; /* the resuming thread's stack, to switch back to */
    size_t thread_stack_bytes;
#endif
#ifdef TD_FIBER_TSAN
    void *tsan_fiber;
    void *tsan_thread;
#endif
#ifdef TD_FIBER_VALGRIND
    unsigned valgrind_stack;
#endif
};

/* The fiber this thread is running now, NULL on its own stack. */
static _Thread_local td_fiber *running;

#ifdef TD_FIBERS
/* void fiber_switch(void **save_sp, void *to_sp): pushes the callee-saved
 * registers and the control words on the current stack, stores the stack
 * pointer in *save_sp, and pops the same from to_sp's stack, returning to
 * wherever that stack last switched away (or to fiber_entry, for a new
 * fiber: see td_fiber_create). */
__attribute__((visibility("hidden"))) void td_fiber_switch_x86_64(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".globl td_fiber_switch_x86_64\n"
        ".hidden td_fiber_switch_x86_64\n"
        ".type td_fiber_switch_x86_64, @function\n"
        ".p2align 4\n"
        "td_fiber_switch_x86_64:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size td_fiber_switch_x86_64, .-td_fiber_switch_x86_64\n");

/* The switch back to the thread that resumed `f`, told to the tools.
 * `dying`: the fiber never runs again (ASan drops its fake stack). */
static void switch_to_thread(td_fiber *f, bool dying)
{
#ifdef TD_FIBER_TSAN
    __tsan_switch_to_fiber(f->tsan_thread, 0);
#endif
#ifdef TD_FIBER_ASAN
    void *fake_stack = NULL;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake_stack, f->thread_stack, f->thread_stack_bytes);
#else
    (void)dying;
#endif
    running = NULL;
    td_fiber_switch_x86_64(&f->sp, f->thread_sp);
    /* Resumed (not after a dying switch). */
#ifdef TD_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, &f->thread_stack, &f->thread_stack_bytes);
#endif
}

/* Where a new fiber starts: entered by the switch's `ret` with the stack
 * aligned as after a call. Never returns: it has no caller. */
static void fiber_entry(void)
{
    td_fiber *f = running;
#ifdef TD_FIBER_ASAN
    __sanitizer_finish_switch_fiber(NULL, &f->thread_stack, &f->thread_stack_bytes);
#endif
    f->fn(f->arg);
    f->finished = true;
    switch_to_thread(f, true);
    abort(); /* a finished fiber is never resumed (td_fiber_resume) */
}
#endif

bool td_fiber_available(void)
{
#ifdef TD_FIBERS
    return true;
#else
    return false;
#endif
}

int td_fiber_create(td_fiber **out, size_t stack_bytes, void (*fn)(void *arg), void *arg)
{
    *out = NULL;
#ifndef TD_FIBERS
    (void)stack_bytes;
    (void)fn;
    (void)arg;
    return ENOSYS;
#else
    const long page_size = sysconf(_SC_PAGESIZE);
    const size_t page = page_size > 0 ? (size_t)page_size : 4096u;
    if (stack_bytes < 16 * page || stack_bytes > ((size_t)1 << 32))
        return EINVAL;
    stack_bytes = (stack_bytes + page - 1) / page * page;
    td_fiber *f = calloc(1, sizeof *f);
    if (!f)
        return ENOMEM;
    /* Touched pages only are backed: a big stack costs address space. */
    f->map_bytes = stack_bytes + page;
    f->map = mmap(NULL, f->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (f->map == MAP_FAILED) {
        const int e = errno;
        free(f);
        return e ? e : ENOMEM;
    }
    /* The page below the stack faults on an overflow rather than
     * overwriting whatever lies beneath. */
    if (mprotect(f->map, page, PROT_NONE) != 0) {
        const int e = errno;
        munmap(f->map, f->map_bytes);
        free(f);
        return e ? e : ENOMEM;
    }
    f->stack = (char *)f->map + page;
    f->stack_bytes = stack_bytes;
    f->fn = fn;
    f->arg = arg;
    /* The frame td_fiber_switch_x86_64 pops on the first switch in: the
     * control words, six zeroed registers, then fiber_entry as the return
     * address, above it a zero word where fiber_entry's own return
     * address would be, so it starts with the stack aligned as after a
     * call (16-byte alignment less 8). */
    uint64_t *sp = (uint64_t *)(((uintptr_t)f->stack + stack_bytes) & ~(uintptr_t)15);
    *--sp = 0;
    *--sp = (uint64_t)(uintptr_t)fiber_entry;
    for (int i = 0; i < 6; i++)
        *--sp = 0;
    uint32_t mxcsr;
    uint16_t fpu_control;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpu_control));
    *--sp = (uint64_t)mxcsr | (uint64_t)fpu_control << 32;
    f->sp = sp;
#ifdef TD_FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
#ifdef TD_FIBER_VALGRIND
    f->valgrind_stack = VALGRIND_STACK_REGISTER(f->stack, f->stack + stack_bytes);
#endif
    *out = f;
    return 0;
#endif
}

void td_fiber_resume(td_fiber *f)
{
#ifdef TD_FIBERS
    if (f->finished || running)
        abort(); /* a caller's bug, not input: fibers do not nest here */
#ifdef TD_FIBER_TSAN
    f->tsan_thread = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
#ifdef TD_FIBER_ASAN
    void *fake_stack = NULL;
    __sanitizer_start_switch_fiber(&fake_stack, f->stack, f->stack_bytes);
#endif
    running = f;
    td_fiber_switch_x86_64(&f->thread_sp, f->sp);
#ifdef TD_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, NULL, NULL);
#endif
#else
    (void)f;
#endif
}

void td_fiber_suspend(void)
{
#ifdef TD_FIBERS
    td_fiber *f = running;
    if (f)
        switch_to_thread(f, false);
#endif
}

bool td_fiber_inside(void)
{
    return running != NULL;
}

bool td_fiber_finished(const td_fiber *f)
{
    return f->finished;
}

void td_fiber_destroy(td_fiber *f)
{
    if (!f)
        return;
#ifdef TD_FIBER_TSAN
    __tsan_destroy_fiber(f->tsan_fiber);
#endif
#ifdef TD_FIBER_VALGRIND
    VALGRIND_STACK_DEREGISTER(f->valgrind_stack);
#endif
#ifdef TD_FIBER_ASAN
    /* A fiber that never finished leaves its frames' red zones poisoned;
     * memory mapped here later must not inherit them. */
    ASAN_UNPOISON_MEMORY_REGION(f->stack, f->stack_bytes);
#endif
    if (f->map)
        munmap(f->map, f->map_bytes);
    free(f);
}
