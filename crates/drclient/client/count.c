/* Counts instructions per basic block with one inline counter update at
   each block's entry (drx_insert_counter_update), the cost of watching
   for a sampled window's start. Prints the total at exit. */
#include "dr_api.h"
#include "drmgr.h"
#include "drx.h"

static uint64 count;

static dr_emit_flags_t bb_analysis(void *drcontext, void *tag, instrlist_t *bb, bool for_trace, bool translating, void **user_data)
{
    uint n = 0;
    for (instr_t *i = instrlist_first_app(bb); i != NULL; i = instr_get_next_app(i))
        n++;
    *user_data = (void *)(ptr_uint_t)n;
    return DR_EMIT_DEFAULT;
}

static dr_emit_flags_t bb_insert(void *drcontext, void *tag, instrlist_t *bb, instr_t *inst, bool for_trace, bool translating, void *user_data)
{
    if (!drmgr_is_first_instr(drcontext, inst))
        return DR_EMIT_DEFAULT;
    uint n = (uint)(ptr_uint_t)user_data;
    drx_insert_counter_update(drcontext, bb, inst, SPILL_SLOT_MAX + 1, IF_AARCHXX_OR_RISCV64_(SPILL_SLOT_MAX + 1) & count, n, DRX_COUNTER_64BIT);
    return DR_EMIT_DEFAULT;
}

static void at_exit(void)
{
    dr_fprintf(STDERR, "splab-count: %llu instructions\n", (unsigned long long)count);
    drx_exit();
    drmgr_exit();
}

DR_EXPORT void dr_client_main(client_id_t id, int argc, const char *argv[])
{
    dr_set_client_name("splab counting client", "");
    drmgr_init();
    drx_init();
    dr_register_exit_event(at_exit);
    drmgr_register_bb_instrumentation_event(bb_analysis, bb_insert, NULL);
}
