/* Per-thread working memory of the CPU backend's packed GEMMs (the FMA and
 * bf16 ones): each user has one block per thread, made with the C
 * library's malloc on the thread's first call and freed when the thread
 * exits (td_thread_slot). It belongs to the thread, not to a context (as
 * OpenBLAS's own buffers do), so it is outside td_allocator's hooks; a
 * step in steady state allocates nothing. (The deterministic own GEMM,
 * cpu_gemm_own.c, keeps its own slot: it is also compiled alone, for other
 * instruction sets and for AArch64, without the rest of the backend.) */
#ifndef TD_CPU_THREAD_SCRATCH_H
#define TD_CPU_THREAD_SCRATCH_H

#include <stddef.h>

typedef enum td_cpu_scratch_user {
    TD_SCRATCH_OWN_FMA,       /* cpu_gemm_own_fma.c's panels and sums */
    TD_SCRATCH_BF16_NATIVE,   /* cpu_gemm_bf16.c's packed bf16 pairs */
    TD_SCRATCH_BF16_PORTABLE, /* cpu_gemm_bf16.c's rounded copies (grows with k) */
    TD_SCRATCH_USERS
} td_cpu_scratch_user;

/* This thread's block for `user`: at least `bytes`, aligned to 64 bytes
 * (a cache line: a vector load of a packed panel never straddles two). A
 * smaller block made before is replaced, its contents not kept. NULL when
 * it cannot be made; callers then run a path that needs none (the same
 * bits, slower). */
void *td_cpu_thread_scratch(td_cpu_scratch_user user, size_t bytes);

#endif
