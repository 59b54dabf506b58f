/* Per-thread blocks for the CPU GEMMs; see cpu_thread_scratch.h. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_thread_scratch.h"
#include "td_platform.h"

enum { LINE = 64 };

/* A block as malloc gave it (what the slot frees at thread exit): its
 * usable size first, the aligned space after. */
typedef struct scratch_block {
    size_t bytes;
} scratch_block;

static td_thread_slot slots[TD_SCRATCH_USERS];
static td_once slots_once = TD_ONCE_INITIALIZER;
static bool slots_ok;

static void make_slots(void)
{
    slots_ok = true;
    for (int u = 0; u < TD_SCRATCH_USERS; u++)
        slots_ok = slots_ok && td_thread_slot_create(&slots[u]) == 0;
}

static void *aligned_space(scratch_block *block)
{
    return (void *)(((uintptr_t)(block + 1) + LINE - 1) & ~(uintptr_t)(LINE - 1));
}

void *td_cpu_thread_scratch(td_cpu_scratch_user user, size_t bytes)
{
    td_once_run(&slots_once, make_slots);
    if (!slots_ok || (unsigned)user >= TD_SCRATCH_USERS || bytes > SIZE_MAX - sizeof(scratch_block) - LINE)
        return NULL;
    scratch_block *block = td_thread_slot_get(&slots[user]);
    if (block && block->bytes >= bytes)
        return aligned_space(block);
    scratch_block *grown = malloc(sizeof *grown + LINE + bytes);
    if (!grown || td_thread_slot_set(&slots[user], grown) != 0) {
        free(grown);
        return NULL;
    }
    free(block); /* the slot holds the new block now */
    grown->bytes = bytes;
    return aligned_space(grown);
}
