/* splabdr: a DynamoRIO client that writes a program's loads and stores
   into splab's shared-memory rings, in the words the valgrind tool
   writes (tools/vgtrace/vt_main.c documents the words and the ring;
   crates/trace/src/online/ reads both; the three must agree).

   Options (the client's arguments): --ring=DIR --reader=PID, or
   --out=PATH: the stream goes into a file or FIFO instead, as the valgrind
   tool's --out writes it (`splab trace record --frontend dynamorio`): its
   magic word first, no rings, no gates, the first process only (a forked
   child writes nothing; an exec ends the stream).

   Each load or store becomes a few inline instructions that compute its
   address, shift it into the reference word (kind | size code << 2 in the
   low byte, the address above) and store the word into a per-thread
   buffer (drx_buf's trace buffer: a store into its guard region calls
   the flush). A flush copies the buffer into the ring's current slot,
   publishing slots as they fill. Every basic block gets a table (its
   instructions, references, dataflow, end and code lines; "the block
   table" below) written into the stream once, and writes an entry word
   when it runs and an exit word when it leaves by its conditional jump,
   as the valgrind tool's superblocks do: the simulator's core counts
   instructions and predicts branches from them.

   Processes: DynamoRIO follows forks and execs. A forked child opens its
   own ring ('F'); the parent writes the fork word with the child's pid.
   A vfork (or a clone that shares memory until the child execs) is made
   a fork, as valgrind makes it. An exec publishes what is buffered; the
   new program's client instance announces a ring under the same pid
   ('S'). Lockstep gates are taken as
   the valgrind tool takes them: before every slot and, once the process
   runs beside others, before every system call that can touch another
   process.

   After a system call: the kernel's copies into and out of the
   program's memory for the calls whose buffers it knows, and the words
   for a read or write that would have blocked and a wait a timer ended
   ("the kernel's accesses" below).

   What this client does not write (the valgrind tool does): the startup
   layout and map events (the reader maps 2 MB blocks where memory is
   touched outside any mapping), inner calls in block tables (a
   DynamoRIO block ends at every call), and the vDSO's blocks but its
   return ("The vDSO" below). Threads share the stream, each
   thread's buffer copied in whole at its flush, so a thread's words that
   follow another's are placed in the other's block until its next entry
   word. */

#define _GNU_SOURCE
#include "dr_api.h"
#include "drmgr.h"
#include "drreg.h"
#include "drutil.h"
#include "drx.h"

#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>

/* System calls made directly: the client's private libc is not the
   application's, and DynamoRIO redirects some of its routines. */
static long raw_syscall(long n, long a, long b, long c, long d)
{
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The ring's format and the words both front ends write. */
#include "ring_format.h"
#include "signals.h"

/* Words kept free at a slot's end for the end word. */
#define TAIL_WORDS 4

#define BUF_BYTES (64 * 1024)

enum { K_LOAD = 1, K_STORE = 2, K_MODIFY = 3 };

static char ring_dir[4096];
static char out_path[4096];
static file_t out_fd = INVALID_FILE;
static long reader_pid;
static drx_buf_t *buf;
static void *lock;

static volatile uint64 *ring;
static uint64 ring_published;
static uint64 ring_gates;
static bool lockstep;
static uint64 *slot_start, *slot_next, *slot_end;

/* Sampling (--detail, --period, --warm, --filter-sets, --filter-line;
   "sampling" below). */
static bool sampling;
static uint64 slot_mode;
static uint64 filter_sets;
static uint64 filter_line = 64;
static int filter_shift = 6; /* log2 of filter_line */
static volatile uint64 filter_gen = 1;
static int tls_filter;

/* Set when the process stops on an error: the caller may hold the lock,
   which the exit event then must not take again. */
static bool stopping;

static void fail(const char *msg)
{
    dr_fprintf(STDERR, "splabdr: %s; stopping\n", msg);
    stopping = true;
    ring = NULL;
    dr_exit_process(3);
}

static bool reader_gone(void)
{
    return reader_pid > 0 && raw_syscall(SYS_kill, reader_pid, 0, 0, 0) == -3 /* ESRCH */;
}

static void futex_wait(volatile uint64 *w, uint64 val)
{
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    raw_syscall(SYS_futex, (long)w, FUTEX_WAIT, (uint32_t)val, (long)&ts);
}

static uint64 *slot_at(uint64 n)
{
    return (uint64 *)(ring + RING_HEADER) + (n % NSLOTS) * SLOT_WORDS;
}

static bool in_lockstep(void)
{
    return ring != NULL &&
        (lockstep || __atomic_load_n(&ring[R_GRANTED], __ATOMIC_ACQUIRE) != ALL_GATES);
}

/* Waits at the next gate until the reader grants it. */
static void ring_gate(void)
{
    uint64 g = ring_gates;
    for (;;) {
        uint64 granted = __atomic_load_n(&ring[R_GRANTED], __ATOMIC_ACQUIRE);
        if (granted == ALL_GATES ? !lockstep : granted > g)
            break;
        ring[R_GATE] = g;
        __atomic_store_n(&ring[R_AT_GATE], 1, __ATOMIC_SEQ_CST);
        raw_syscall(SYS_futex, (long)&ring[R_AT_GATE], FUTEX_WAKE, 1, 0);
        if (__atomic_load_n(&ring[R_GRANTED], __ATOMIC_SEQ_CST) == granted)
            futex_wait(&ring[R_GRANTED], granted);
        if (reader_gone())
            fail("the reader of the reference stream is gone");
    }
    __atomic_store_n(&ring[R_AT_GATE], 0, __ATOMIC_RELEASE);
    ring_gates++;
}

/* Waits until the reader frees the slot the next publish uses, then at
   the gate before it. */
static void ring_take_slot(void)
{
    for (;;) {
        uint64 consumed = __atomic_load_n(&ring[R_CONSUMED], __ATOMIC_ACQUIRE);
        if (ring_published - consumed < NSLOTS)
            break;
        __atomic_store_n(&ring[R_TOOL_WAITS], 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&ring[R_CONSUMED], __ATOMIC_SEQ_CST) == consumed)
            futex_wait(&ring[R_CONSUMED], consumed);
        __atomic_store_n(&ring[R_TOOL_WAITS], 0, __ATOMIC_RELAXED);
        if (reader_gone())
            fail("the reader of the reference stream is gone");
    }
    ring_gate();
    slot_start = slot_at(ring_published);
    slot_next = slot_start;
    slot_end = slot_start + SLOT_WORDS - TAIL_WORDS;
    if (sampling) {
        /* Every slot begins with its mode (the valgrind tool's 0x85). */
        slot_next[0] = W_MODE;
        slot_next[1] = slot_mode;
        slot_next += 2;
    }
}

/* Writes words into the --out file whole (a FIFO may take a write in
   parts). */
static void out_write(const uint64 *w, size_t n)
{
    const char *p = (const char *)w;
    size_t left = n * sizeof(uint64);
    while (left > 0) {
        ssize_t k = dr_write_file(out_fd, p, left);
        if (k <= 0)
            fail("cannot write the stream (the reader is gone?)");
        p += k;
        left -= (size_t)k;
    }
}

static void ring_publish(bool ended)
{
    uint64 n = slot_next - slot_start;
    ring[R_LENS + ring_published % NSLOTS] = n;
    ring_published++;
    if (ended)
        ring[R_ENDED] = 1;
    __atomic_store_n(&ring[R_PUBLISHED], ring_published, __ATOMIC_RELEASE);
}

/* Creates DIR/r.PID.N, maps it, announces it on DIR/ctl with `how` ('S'
   a new program, 'F' a forked child) and takes the first slot. */
static void ring_open(char how)
{
    process_id_t pid = dr_get_process_id();
    size_t bytes = (RING_HEADER + (size_t)NSLOTS * SLOT_WORDS) * sizeof(uint64);
    char path[4200];
    file_t fd = INVALID_FILE;
    int n;
    for (n = 0; n < 1000 && fd == INVALID_FILE; n++) {
        dr_snprintf(path, sizeof path, "%s/r.%d.%d", ring_dir, (int)pid, n);
        fd = dr_open_file(path, DR_FILE_READ | DR_FILE_WRITE_REQUIRE_NEW | DR_FILE_CLOSE_ON_FORK);
    }
    n--;
    if (fd == INVALID_FILE)
        fail("cannot create a ring");
    if (raw_syscall(SYS_ftruncate, fd, (long)bytes, 0, 0) != 0)
        fail("cannot size the ring");
    size_t size = bytes;
    void *m = dr_map_file(fd, &size, 0, NULL, DR_MEMPROT_READ | DR_MEMPROT_WRITE, 0);
    dr_close_file(fd);
    if (m == NULL || size < bytes)
        fail("cannot map the ring");
    ring = (volatile uint64 *)m;
    ring[1] = NSLOTS;
    ring[2] = SLOT_WORDS;
    ring[3] = (uint64)pid;
    ring_published = 0;
    ring_gates = 0;
    ring[0] = RING_MAGIC;
    char ctl[4200], line[64];
    dr_snprintf(ctl, sizeof ctl, "%s/ctl", ring_dir);
    /* The reader holds the FIFO open for reading: this open does not wait.
       (Write-only takes no other write mode: DynamoRIO's debug build
       stops on two.) */
    file_t cfd = dr_open_file(ctl, DR_FILE_WRITE_ONLY);
    if (cfd == INVALID_FILE)
        fail("cannot open the ring directory's ctl (the reader is gone?)");
    /* A fixed-width line: one write below PIPE_BUF is atomic among the
       processes that share the FIFO. */
    memset(line, ' ', sizeof line);
    int len = dr_snprintf(line, sizeof line, "%c %d %d %d", how, (int)pid, (int)dr_get_parent_id(), n);
    line[len] = ' ';
    line[sizeof line - 1] = '\n';
    if (dr_write_file(cfd, line, sizeof line) != (ssize_t)sizeof line)
        fail("cannot announce the ring");
    dr_close_file(cfd);
    ring_take_slot();
}

/* Appends words to the stream (the caller holds the lock). */
static void append(const uint64 *w, size_t n)
{
    if (out_fd != INVALID_FILE) {
        out_write(w, n);
        return;
    }
    while (n > 0) {
        size_t room = slot_end - slot_next;
        if (room == 0) {
            ring_publish(false);
            ring_take_slot();
            continue;
        }
        size_t k = n < room ? n : room;
        memcpy(slot_next, w, k * sizeof(uint64));
        slot_next += k;
        w += k;
        n -= k;
    }
}

/* Appends a record of several words whole: the reader takes a record
   from one slot, so one that the slot has no room for starts the next
   (the caller holds the lock). */
static void append_whole(const uint64 *w, size_t n)
{
    if (ring != NULL && (size_t)(slot_end - slot_next) < n) {
        ring_publish(false);
        ring_take_slot();
    }
    append(w, n);
}

static void count_written_refs(int64 refs);
static void count_flush(void *drcontext);
static bool filtering(void);
static void filter_empty(void);
static size_t filter_words(void *drcontext, uint64 *w, size_t n, int64 *left);

static void full_cb(void *drcontext, void *base, size_t size)
{
    if (stopping)
        return;
    dr_mutex_lock(lock);
    if (ring != NULL || out_fd != INVALID_FILE) {
        uint64 *w = (uint64 *)base;
        size_t n = size / sizeof(uint64);
        int64 refs = 0;
        for (size_t i = 0; i < n; i++)
            refs += (uint8_t)w[i] < 0x20;
        if (filtering()) {
            /* The buffer is this thread's own and is emptied after this:
               the filter compacts it in place. */
            int64 left = 0;
            append(w, filter_words(drcontext, w, n, &left));
            if (left > 0) {
                uint64 skip[2] = { W_SKIP, (uint64)left };
                append_whole(skip, 2);
            }
        } else
            append(w, n);
        count_written_refs(refs);
    }
    dr_mutex_unlock(lock);
    count_flush(drcontext);
}

/* Moves what this thread buffered into the stream. */
static void flush_thread(void *drcontext)
{
    if (drcontext == NULL)
        return;
    byte *base = drx_buf_get_buffer_base(drcontext, buf);
    byte *ptr = drx_buf_get_buffer_ptr(drcontext, buf);
    if (ptr > base)
        full_cb(drcontext, base, ptr - base);
    drx_buf_set_buffer_ptr(drcontext, buf, base);
}

static void sample_sync(bool scan);

/* Publishes everything so far (the caller's thread buffer included;
   with sampling, what FAST counted, and before a fork the pages). */
static void publish_all(void *drcontext, bool fork)
{
    flush_thread(drcontext);
    dr_mutex_lock(lock);
    sample_sync(fork);
    if (ring != NULL) {
        ring_publish(false);
        ring_take_slot();
    }
    dr_mutex_unlock(lock);
}

/* ---- instrumentation ---- */

static int size_code(uint size)
{
    for (int c = 0; c < 7; c++)
        if (size == (1u << c))
            return c;
    return 7;
}

/* drx_buf's store of `val` at the buffer's pointer in `rptr`, before
   `where`, its translation `pc`, the application instruction it runs
   before. A store into the guard page faults, and DynamoRIO translates
   the fault by the faulting instruction's translation, which drx_buf
   takes from `where`: one that is not the application's (a label at a
   block's start) gives none, which DynamoRIO's debug build stops on. */
static void buf_store(void *dc, instrlist_t *bb, instr_t *where, reg_id_t rptr, opnd_t val, opnd_size_t size, app_pc pc)
{
    instr_t *before = instr_get_prev(where);
    drx_buf_insert_buf_store(dc, buf, bb, where, rptr, DR_REG_NULL, val, size, 0);
    for (instr_t *in = before == NULL ? instrlist_first(bb) : instr_get_next(before); in != where; in = instr_get_next(in))
        if (instr_get_app_pc(in) == NULL)
            instr_set_translation(in, pc);
}

static void insert_ref(void *dc, instrlist_t *bb, instr_t *where, app_pc pc, opnd_t ref, int kind)
{
    reg_id_t rptr, raddr;
    uint size = opnd_size_in_bytes(opnd_get_size(ref));
    if (size == 0)
        size = 1;
    if (size > 256)
        size = 256;
    int code = size_code(size);
    int shift = code < 7 ? 8 : 16;
    int low = kind | code << 2 | (code < 7 ? 0 : (int)(size - 1) << 8);
    if (drreg_reserve_register(dc, bb, where, NULL, &rptr) != DRREG_SUCCESS ||
        drreg_reserve_register(dc, bb, where, NULL, &raddr) != DRREG_SUCCESS ||
        drreg_reserve_aflags(dc, bb, where) != DRREG_SUCCESS)
        DR_ASSERT_MSG(false, "splabdr: no registers to reserve");
    /* A register the address uses may still hold what an earlier
       reference's instrumentation put there (drreg restores lazily). */
    reg_id_t swap = DR_REG_NULL;
    if (drreg_restore_app_values(dc, bb, where, ref, &swap) != DRREG_SUCCESS)
        DR_ASSERT_MSG(false, "splabdr: cannot restore the address's registers");
    if (!drutil_insert_get_mem_addr(dc, bb, where, ref, raddr, rptr))
        DR_ASSERT_MSG(false, "splabdr: cannot compute an address");
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_shl(dc, opnd_create_reg(raddr), OPND_CREATE_INT8(shift)));
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_or(dc, opnd_create_reg(raddr), OPND_CREATE_INT32(low)));
    drx_buf_insert_load_buf_ptr(dc, buf, bb, where, rptr);
    buf_store(dc, bb, where, rptr, opnd_create_reg(raddr), OPSZ_8, pc);
    drx_buf_insert_update_buf_ptr(dc, buf, bb, where, rptr, DR_REG_NULL, sizeof(uint64));
    drreg_unreserve_aflags(dc, bb, where);
    drreg_unreserve_register(dc, bb, where, raddr);
    drreg_unreserve_register(dc, bb, where, rptr);
}

static dr_emit_flags_t bb_app2app(void *dc, void *tag, instrlist_t *bb, bool for_trace, bool translating)
{
    bool expanded;
    drutil_expand_rep_string(dc, bb);
    drx_expand_scatter_gather(dc, bb, &expanded);
    return DR_EMIT_DEFAULT;
}

/* Whether memory operand `d`, written by `inst`, is also one it reads:
   a modify (add [m], r), one reference as valgrind's tool writes it. */
static bool also_read(instr_t *inst, opnd_t d)
{
    for (int i = 0; i < instr_num_srcs(inst); i++)
        if (opnd_same(d, instr_get_src(inst, i)))
            return true;
    return false;
}

/* The references `inst` makes, in the order the stream has them: the
   memory it reads (a source also written is one modify, as valgrind's
   tool writes it), then the memory it only writes. Calls `f` on each
   (when not NULL); returns how many. bb_insert writes them and the
   block table describes them through this one order. */
typedef void (*ref_fn)(void *arg, opnd_t ref, int kind);

static int each_ref(instr_t *inst, ref_fn f, void *arg)
{
    bool reads = instr_reads_memory(inst), writes = instr_writes_memory(inst);
    int n = 0;
    if (reads)
        for (int i = 0; i < instr_num_srcs(inst); i++) {
            opnd_t s = instr_get_src(inst, i);
            if (!opnd_is_memory_reference(s))
                continue;
            bool modify = false;
            if (writes)
                for (int j = 0; j < instr_num_dsts(inst); j++)
                    if (opnd_same(s, instr_get_dst(inst, j)))
                        modify = true;
            if (f != NULL)
                f(arg, s, modify ? K_MODIFY : K_LOAD);
            n++;
        }
    if (writes)
        for (int j = 0; j < instr_num_dsts(inst); j++) {
            opnd_t d = instr_get_dst(inst, j);
            if (opnd_is_memory_reference(d) && !(reads && also_read(inst, d))) {
                if (f != NULL)
                    f(arg, d, K_STORE);
                n++;
            }
        }
    return n;
}

/* ---- the block table ----
   Every basic block DynamoRIO translates gets an id (from 0, counted
   under the lock) and a table in the valgrind tool's words (its comment
   "the block table" in tools/vgtrace/vt_main.c documents them;
   crates/trace/src/block.rs decodes them), written into the stream
   before any word that enters the block. At run time the block's first
   instruction writes W_ENTER | id << 8, and a block that ends in a
   conditional jump writes W_EXIT (side exit 0) when the jump is taken.
   A block rebuilt (for a trace, or after a flush) gets a new id and
   table; a block recreated to translate a fault (`translating`) writes
   nothing, and its instrumentation has the same instructions as the
   original's (the id is the immediate of a 10-byte mov either way).

   Where the table differs from the valgrind tool's, because DynamoRIO's
   blocks are not valgrind's superblocks:
   - A DynamoRIO block ends at every control transfer (no elision under
     -code_api), so its only side exit is its last instruction: a
     conditional jump on the flags, taken to leave by the exit, not taken
     to run to the block's end (a jump, kind 0). jecxz, jrcxz and loop*
     end a block as a jump with no side exit, a branch the core does not
     predict.
   - Register slots are the 16 general registers at any width (0..15),
     the arithmetic flags (16) and xmm/ymm/zmm N (17 + N); other
     registers (x87, mmx, segment, mask) give no dependence.
   - The dataflow is by instruction, not by valgrind's IR: an instruction
     applies one operation of its class (op_class) to the union of its
     inputs, and all its outputs get that result, but for the pointers
     it steps (steps: the stack pointer, a string instruction's pointers
     and count), which get one ALU operation of their own.
   - A block drutil_expand_rep_string made of a rep-string instruction
     (a loop that enters the block again at every iteration) is described
     as the one string instruction and its references, each iteration an
     entry. An iteration whose count is zero makes no references: the
     reader takes the entry's references as they come. */

#include "block_deps.h"

#define SLOT_FLAGS 16
#define SLOT_VEC   17
#define REG_SLOTS  (SLOT_VEC + 32)

/* The reader's limit on a table's words (crates/trace/src/vgraw.rs). */
#define MAX_TABLE_WORDS (1 << 14)
#define MAX_TREFS  1024
#define MAX_TLINES 512

static int op_class(int opc)
{
    if (opc >= OP_vfmadd132ps && opc <= OP_vfnmsub231sd)
        return C_FMUL;
    switch (opc) {
    case OP_imul: case OP_mul: case OP_mulx:
        return C_MUL;
    case OP_div: case OP_idiv:
        return C_DIV;
    case OP_addsd: case OP_subsd: case OP_addss: case OP_subss:
    case OP_addpd: case OP_subpd: case OP_addps: case OP_subps:
    case OP_vaddsd: case OP_vsubsd: case OP_vaddss: case OP_vsubss:
    case OP_vaddpd: case OP_vsubpd: case OP_vaddps: case OP_vsubps:
    case OP_cvtsi2sd: case OP_cvtsi2ss: case OP_cvtsd2si: case OP_cvtss2si:
    case OP_cvttsd2si: case OP_cvttss2si:
    case OP_vcvtsi2sd: case OP_vcvtsi2ss: case OP_vcvtsd2si: case OP_vcvtss2si:
    case OP_vcvttsd2si: case OP_vcvttss2si:
        return C_FADD;
    case OP_mulsd: case OP_mulss: case OP_mulpd: case OP_mulps:
    case OP_vmulsd: case OP_vmulss: case OP_vmulpd: case OP_vmulps:
        return C_FMUL;
    case OP_divsd: case OP_divss: case OP_divpd: case OP_divps:
    case OP_vdivsd: case OP_vdivss: case OP_vdivpd: case OP_vdivps:
    case OP_sqrtsd: case OP_sqrtss: case OP_sqrtpd: case OP_sqrtps:
    case OP_vsqrtsd: case OP_vsqrtss: case OP_vsqrtpd: case OP_vsqrtps:
        return C_FDIV;
    /* Moves: the value as it was, no operation. */
    case OP_mov_ld: case OP_mov_st: case OP_mov_imm: case OP_movzx: case OP_movsx:
    case OP_movsxd: case OP_movaps: case OP_movups: case OP_movapd: case OP_movupd:
    case OP_movdqa: case OP_movdqu: case OP_movq: case OP_movd: case OP_movsd:
    case OP_movss: case OP_vmovaps: case OP_vmovups: case OP_vmovapd: case OP_vmovupd:
    case OP_vmovdqa: case OP_vmovdqu: case OP_vmovq: case OP_vmovd: case OP_vmovsd:
    case OP_vmovss: case OP_push: case OP_push_imm: case OP_pop: case OP_xchg:
    case OP_movs: case OP_stos: case OP_lods:
        return C_FREE;
    default:
        return C_ALU;
    }
}

/* Whether `in` steps register `r` as a side effect, a pointer or count
   that gets one ALU operation and stays out of the value the instruction
   computes: the stack pointer of pushes, pops, calls and returns; the
   pointers and count of string instructions (else each iteration of a
   copy would wait for the value the last one loaded). */
static bool steps(instr_t *in, reg_id_t r)
{
    r = reg_to_pointer_sized(r);
    if (instr_is_string_op(in) || instr_is_rep_string_op(in))
        return r == DR_REG_XSI || r == DR_REG_XDI || r == DR_REG_XCX;
    switch (instr_get_opcode(in)) {
    case OP_push: case OP_push_imm: case OP_pop: case OP_pushf: case OP_popf:
    case OP_call: case OP_call_ind: case OP_call_far: case OP_call_far_ind:
    case OP_ret: case OP_ret_far: case OP_leave: case OP_enter: case OP_iret:
        return r == DR_REG_XSP;
    default:
        return false;
    }
}

/* xor r, r and the like: a constant, whatever r held. */
static bool zero_idiom(instr_t *in)
{
    switch (instr_get_opcode(in)) {
    case OP_xor: case OP_sub: case OP_pxor: case OP_xorps: case OP_xorpd:
    case OP_vpxor: case OP_vxorps: case OP_vxorpd: case OP_psubb: case OP_psubd: case OP_psubq:
        break;
    default:
        return false;
    }
    int n = instr_num_srcs(in);
    if (n < 2)
        return false;
    opnd_t a = instr_get_src(in, n - 2), b = instr_get_src(in, n - 1);
    return opnd_is_reg(a) && opnd_is_reg(b) && opnd_get_reg(a) == opnd_get_reg(b);
}

static int slot_of(reg_id_t r)
{
    if (r == DR_REG_NULL)
        return -1;
    if (reg_is_gpr(r)) {
        reg_id_t p = reg_to_pointer_sized(r);
        return p >= DR_REG_RAX && p <= DR_REG_R15 ? (int)(p - DR_REG_RAX) : -1;
    }
    if (reg_is_strictly_xmm(r))
        return SLOT_VEC + (r - DR_REG_XMM0);
    if (reg_is_strictly_ymm(r))
        return SLOT_VEC + (r - DR_REG_YMM0);
    if (reg_is_strictly_zmm(r))
        return SLOT_VEC + (r - DR_REG_ZMM0);
    return -1;
}

/* The table being built for one block (one at a time: table_lock). */
typedef struct {
    Deps reg[REG_SLOTS];   /* what each slot holds now */
    int written[REG_SLOTS];  /* 1 + the last instruction writing it; 0 none */
    int insn;             /* the instruction being described */
    int nrefs, nlines;
    bool overflow;
    uint64 ref_word[MAX_TREFS];
    Deps ref_addr[MAX_TREFS], ref_data[MAX_TREFS];
    uint64 line[MAX_TLINES];
    uint64 last_line;
} table_t;

static void *table_lock;
static table_t table;
static uint64 table_words[MAX_TABLE_WORDS + 1];
static uint64 next_block_id;

static const Deps *reg_deps(table_t *t, reg_id_t r)
{
    int s = slot_of(r);
    return s < 0 ? NULL : &t->reg[s];
}

/* The registers an address is computed from. */
static void addr_deps(table_t *t, opnd_t m, Deps *out)
{
    if (!opnd_is_base_disp(m))
        return;
    deps_union(out, reg_deps(t, opnd_get_base(m)));
    deps_union(out, reg_deps(t, opnd_get_index(m)));
}

static void table_ref(void *arg, opnd_t ref, int kind)
{
    table_t *t = (table_t *)arg;
    if (t->nrefs >= MAX_TREFS) {
        t->overflow = true;
        return;
    }
    int i = t->nrefs++;
    t->ref_word[i] = (uint64)t->insn | (uint64)kind << 16;
    t->ref_addr[i].n = 0;
    t->ref_data[i].n = 0;
    addr_deps(t, ref, &t->ref_addr[i]);
}

/* The code lines instruction `t->insn` starts in and runs into, each
   line once in a row. */
static void table_lines(table_t *t, app_pc pc, int len)
{
    for (uint64 l = (uint64)pc >> 6; len > 0 && l <= ((uint64)pc + len - 1) >> 6; l++) {
        if (l == t->last_line)
            continue;
        t->last_line = l;
        if (t->nlines < MAX_TLINES)
            t->line[t->nlines++] = l << 16 | (uint64)t->insn;
    }
}

/* What instruction `in` does to the block's dataflow; its references
   are added in the stream's order. */
static void table_insn(void *dc, table_t *t, instr_t *in)
{
    static const byte none[NCLS];
    int opc = instr_get_opcode(in);
    Deps v = { .n = 0 };
    for (int i = 0; i < instr_num_srcs(in); i++) {
        opnd_t s = instr_get_src(in, i);
        if (opnd_is_reg(s)) {
            if (!steps(in, opnd_get_reg(s)))
                deps_union(&v, reg_deps(t, opnd_get_reg(s)));
        } else if (opnd_is_memory_reference(s) && !instr_reads_memory(in)) {
            /* lea: its operand's registers are plain inputs. */
            addr_deps(t, s, &v);
        }
    }
    uint eflags = instr_get_eflags(in, DR_QUERY_DEFAULT);
    if (eflags & EFLAGS_READ_ARITH)
        deps_union(&v, &t->reg[SLOT_FLAGS]);
    int first = t->nrefs;
    each_ref(in, table_ref, t);
    for (int i = first; i < t->nrefs; i++)
        if ((t->ref_word[i] >> 16 & 0xff) != K_STORE)
            deps_add(&v, (ushort)(FROM_REF + i), none);
    if (zero_idiom(in))
        v.n = 0;
    deps_op(&v, op_class(opc));
    /* What stores write: the result (a call's return address: nothing). */
    for (int i = first; i < t->nrefs; i++)
        if ((t->ref_word[i] >> 16 & 0xff) != K_LOAD && !instr_is_call(in))
            t->ref_data[i] = v;
    for (int i = 0; i < instr_num_dsts(in); i++) {
        opnd_t d = instr_get_dst(in, i);
        if (!opnd_is_reg(d))
            continue;
        reg_id_t r = opnd_get_reg(d);
        int s = slot_of(r);
        if (s < 0)
            continue;
        if (steps(in, r))
            deps_op(&t->reg[s], C_ALU);
        else if (reg_is_gpr(r) && opnd_size_in_bytes(reg_get_size(r)) <= 2)
            deps_union(&t->reg[s], &v); /* the rest of the register stays */
        else
            t->reg[s] = v;
        t->written[s] = t->insn + 1;
    }
    if (eflags & EFLAGS_WRITE_ARITH) {
        t->reg[SLOT_FLAGS] = v;
        t->written[SLOT_FLAGS] = t->insn + 1;
    }
    table_lines(t, instr_get_app_pc(in), instr_length(dc, in));
}

/* The setcc of a conditional jump on the flags (OP_INVALID: not one). */
static int setcc_of(instr_t *in)
{
    int opc = instr_get_opcode(in);
    if (opc >= OP_jo && opc <= OP_jnle)
        return OP_seto + (opc - OP_jo);
    if (opc >= OP_jo_short && opc <= OP_jnle_short)
        return OP_seto + (opc - OP_jo_short);
    return OP_INVALID;
}

/* Whether a block's instructions are a rep-string instruction expanded
   into a loop: drutil's added instructions share an address. */
static bool expanded_rep(instrlist_t *bb)
{
    app_pc last = NULL;
    bool string = false, repeated = false;
    for (instr_t *i = instrlist_first_app(bb); i != NULL; i = instr_get_next_app(i)) {
        if (instr_is_label(i))
            continue;
        if (instr_is_string_op(i))
            string = true;
        if (instr_get_app_pc(i) == last)
            repeated = true;
        last = instr_get_app_pc(i);
    }
    return string && repeated;
}

/* Whether the block's last instruction is a side exit: a conditional
   jump on the flags (the same answer when the block is recreated). */
static bool exits_at_end(instrlist_t *bb, bool expanded)
{
    instr_t *last = instrlist_last_app(bb);
    return !expanded && last != NULL && setcc_of(last) != OP_INVALID;
}

static void put_word_deps(uint64 **w, const Deps *d)
{
    for (int i = 0; i < d->n; i++)
        *(*w)++ = deps_word(d, i);
}

/* Describes block `bb` from instruction `from` (its first when NULL) and
   writes its table into the stream after what this thread buffered;
   returns its id. */
static uint64 table_block(void *dc, instrlist_t *bb, instr_t *from, bool expanded)
{
    static const byte none[NCLS];
    table_t *t = &table;
    dr_mutex_lock(table_lock);
    memset(t->written, 0, sizeof t->written);
    for (int s = 0; s < REG_SLOTS; s++) {
        t->reg[s].n = 0;
        deps_add(&t->reg[s], (ushort)s, none);
    }
    t->insn = 0;
    t->nrefs = t->nlines = 0;
    t->overflow = false;
    t->last_line = ~0ULL;
    app_pc first_pc = NULL, last_pc = NULL;
    instr_t *last = NULL;
    int last_first_ref = 0;
    for (instr_t *i = from != NULL ? from : instrlist_first_app(bb); i != NULL; i = instr_get_next_app(i)) {
        if (instr_is_label(i) || (expanded && !instr_is_string_op(i)))
            continue;
        if (first_pc == NULL)
            first_pc = instr_get_app_pc(i);
        last_pc = instr_get_app_pc(i);
        last = i;
        last_first_ref = t->nrefs;
        table_insn(dc, t, i);
        t->insn++;
    }
    if (t->insn == 0)
        t->insn = 1; /* the reader refuses a block of none */
    /* How it ends. */
    uint64 kind = 0, ret = 0;
    Deps end = { .n = 0 }, cond = { .n = 0 };
    bool exit = exits_at_end(bb, expanded);
    if (last != NULL && !expanded) {
        if (exit)
            cond = t->reg[SLOT_FLAGS];
        else if (instr_is_call(last)) {
            kind = instr_is_call_direct(last) ? 1 : 2;
            ret = (uint64)last_pc + instr_length(dc, last);
        } else if (instr_is_return(last))
            kind = 3;
        else if (instr_is_mbr(last))
            kind = 4;
        if (kind >= 2) {
            opnd_t target = kind == 3 ? opnd_create_null() : instr_get_target(last);
            if (kind == 3 || opnd_is_memory_reference(target)) {
                /* The loaded address: the instruction's first reference. */
                if (t->nrefs > last_first_ref)
                    deps_add(&end, (ushort)(FROM_REF + last_first_ref), none);
            } else if (opnd_is_reg(target))
                deps_union(&end, reg_deps(t, opnd_get_reg(target)));
        }
    }
    int nexits = exit ? 1 : 0, nputs = 0;
    for (int s = 0; s < REG_SLOTS; s++)
        nputs += t->written[s] != 0;
    int words = 6 + t->nrefs + 2 * nexits + nputs + t->nlines + cond.n + end.n;
    for (int i = 0; i < t->nrefs; i++)
        words += t->ref_addr[i].n + t->ref_data[i].n;
    for (int s = 0; s < REG_SLOTS; s++)
        if (t->written[s] != 0)
            words += t->reg[s].n;
    if (t->overflow || words > MAX_TABLE_WORDS) {
        /* Too large to describe: its instructions, ends and lines only;
           the reader places its references nowhere in particular. */
        words -= t->nrefs + 2 * nexits + nputs + cond.n;
        for (int i = 0; i < t->nrefs; i++)
            words -= t->ref_addr[i].n + t->ref_data[i].n;
        for (int s = 0; s < REG_SLOTS; s++)
            if (t->written[s] != 0)
                words -= t->reg[s].n;
        t->nrefs = nexits = nputs = 0;
        memset(t->written, 0, sizeof t->written);
    }
    uint64 *w = table_words;
    *w++ = W_BLOCK | (uint64)words << 8;
    w++; /* the id, given under the lock */
    *w++ = (uint64)first_pc;
    *w++ = (uint64)t->insn | (uint64)t->nrefs << 16 | (uint64)nexits << 32 | (uint64)nputs << 48;
    *w++ = (uint64)t->nlines | kind << 32 | (uint64)end.n << 40;
    *w++ = (uint64)last_pc;
    *w++ = ret;
    for (int i = 0; i < t->nrefs; i++)
        *w++ = t->ref_word[i] | (uint64)t->ref_addr[i].n << 24 | (uint64)t->ref_data[i].n << 32;
    if (nexits > 0) {
        *w++ = (uint64)last_pc;
        *w++ = (uint64)(t->insn - 1) | (uint64)cond.n << 16 | 1ULL << 24;
    }
    /* Every write is before the block's one side exit. */
    for (int s = 0; s < REG_SLOTS; s++)
        if (t->written[s] != 0)
            *w++ = (uint64)s | (uint64)(t->written[s] - 1) << 8 | (uint64)t->reg[s].n << 32;
    for (int i = 0; i < t->nlines; i++)
        *w++ = t->line[i];
    for (int i = 0; i < t->nrefs; i++) {
        put_word_deps(&w, &t->ref_addr[i]);
        put_word_deps(&w, &t->ref_data[i]);
    }
    if (nexits > 0)
        put_word_deps(&w, &cond);
    for (int s = 0; s < REG_SLOTS; s++)
        if (t->written[s] != 0)
            put_word_deps(&w, &t->reg[s]);
    put_word_deps(&w, &end);
    DR_ASSERT_MSG(w == table_words + 1 + words, "splabdr: a block table's words miscounted");
    /* The thread's words so far precede the table. */
    flush_thread(dc);
    dr_mutex_lock(lock);
    uint64 id = next_block_id++;
    table_words[1] = id;
    if ((ring != NULL || out_fd != INVALID_FILE) && !stopping) {
        append_whole(table_words, 1 + words);
    }
    dr_mutex_unlock(lock);
    dr_mutex_unlock(table_lock);
    return id;
}

/* The vDSO (clock_gettime, gettimeofday, time, getcpu): the kernel's
   code in the program's memory, which reads the clock the host keeps
   updating and reads it again when an update came in between, so how
   many of its blocks run differs from run to run. None of its blocks
   is written but for the return that leaves it, as a block of that one
   instruction: the return stack stays balanced, the stream repeats, and
   a vDSO call costs its call and return. (valgrind hides the vDSO, so
   the C library makes the system call itself; the simulator charges
   neither.) */
static app_pc vdso_start, vdso_end;

static bool in_vdso(void *tag)
{
    return (app_pc)tag >= vdso_start && (app_pc)tag < vdso_end;
}

static void find_vdso(void)
{
    dr_module_iterator_t *it = dr_module_iterator_start();
    vdso_start = vdso_end = NULL;
    while (dr_module_iterator_hasnext(it)) {
        module_data_t *m = dr_module_iterator_next(it);
        const char *name = dr_module_preferred_name(m);
        if (name != NULL && strstr(name, "vdso") != NULL) {
            vdso_start = m->start;
            vdso_end = m->end;
        }
        dr_free_module_data(m);
    }
    dr_module_iterator_stop(it);
}

/* user_data from bb_analysis to bb_insert: the block's id << 2 | whether
   it is the vDSO's return alone << 1 | whether it ends in a side exit;
   SKIP for a vDSO block that writes nothing. */
#define SKIP (~(ptr_uint_t)0)

static dr_emit_flags_t bb_analysis(void *dc, void *tag, instrlist_t *bb, bool for_trace, bool translating, void **user_data)
{
    if (in_vdso(tag)) {
        instr_t *last = instrlist_last_app(bb);
        if (last == NULL || !instr_is_return(last)) {
            *user_data = (void *)SKIP;
            return DR_EMIT_DEFAULT;
        }
        uint64 id = translating ? 0 : table_block(dc, bb, last, false);
        *user_data = (void *)(ptr_uint_t)(id << 2 | 2);
        return DR_EMIT_DEFAULT;
    }
    bool expanded = expanded_rep(bb);
    uint64 id = translating ? 0 : table_block(dc, bb, NULL, expanded);
    *user_data = (void *)(ptr_uint_t)(id << 2 | (exits_at_end(bb, expanded) ? 1 : 0));
    return DR_EMIT_DEFAULT;
}

/* The block's entry word, before `where`, which is the application
   instruction at `pc` or comes before the block's first. Nothing here
   writes the flags (drx_buf's pointer update is a lea on x86): they are
   not reserved. */
static void insert_enter(void *dc, instrlist_t *bb, instr_t *where, app_pc pc, uint64 id)
{
    reg_id_t rptr, rval;
    if (drreg_reserve_register(dc, bb, where, NULL, &rptr) != DRREG_SUCCESS ||
        drreg_reserve_register(dc, bb, where, NULL, &rval) != DRREG_SUCCESS)
        DR_ASSERT_MSG(false, "splabdr: no registers to reserve");
    /* A 10-byte mov whatever the id: a recreated block has the same code. */
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_mov_imm(dc, opnd_create_reg(rval), OPND_CREATE_INT64((int64)(W_ENTER | id << 8))));
    drx_buf_insert_load_buf_ptr(dc, buf, bb, where, rptr);
    buf_store(dc, bb, where, rptr, opnd_create_reg(rval), OPSZ_8, pc);
    drx_buf_insert_update_buf_ptr(dc, buf, bb, where, rptr, DR_REG_NULL, sizeof(uint64));
    drreg_unreserve_register(dc, bb, where, rval);
    drreg_unreserve_register(dc, bb, where, rptr);
}

/* The side-exit word before conditional jump `jcc` (at `where`), kept
   only when the jump is taken: the word is stored at the buffer's
   pointer in any case, and the pointer advances by 8 times the jump's
   condition (a setcc of the application's flags). Nothing here writes
   the flags, and they are not reserved.

   The flags are put in place statelessly: drreg's record of where it
   keeps them stays as it was. drreg_restore_app_aflags would not do
   (drreg 11.90, drreg_restore_aflags in drreg.c): where drreg keeps the
   flags in rax, it gives rax up without counting it among the
   registers it restores lazily, so the thread's count of those stays
   one short from then on (DynamoRIO's debug build stops on drreg's
   "should not go negative"), and with the count short a later
   reservation can take a register whose application value is still in
   its slot and spill the tool's value over it (drreg_reserve_reg_internal).
   `xz -6 -T2` crashed from it in most runs (docs/real-programs.md). */
static void insert_exit(void *dc, instrlist_t *bb, instr_t *jcc, instr_t *where)
{
    reg_id_t rptr, rtaken;
    if (drreg_statelessly_restore_app_value(dc, bb, DR_REG_NULL, where, where, NULL, NULL) != DRREG_SUCCESS)
        DR_ASSERT_MSG(false, "splabdr: cannot restore the flags");
    if (drreg_reserve_register(dc, bb, where, NULL, &rptr) != DRREG_SUCCESS ||
        drreg_reserve_register(dc, bb, where, NULL, &rtaken) != DRREG_SUCCESS)
        DR_ASSERT_MSG(false, "splabdr: no registers to reserve");
    reg_id_t taken8 = reg_resize_to_opsz(rtaken, OPSZ_1);
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_setcc(dc, setcc_of(jcc), opnd_create_reg(taken8)));
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_movzx(dc, opnd_create_reg(reg_resize_to_opsz(rtaken, OPSZ_4)), opnd_create_reg(taken8)));
    drx_buf_insert_load_buf_ptr(dc, buf, bb, where, rptr);
    buf_store(dc, bb, where, rptr, OPND_CREATE_INT32((int)W_EXIT), OPSZ_PTR, instr_get_app_pc(jcc));
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_lea(dc, opnd_create_reg(rptr), opnd_create_base_disp(rptr, rtaken, 8, 0, OPSZ_lea)));
    drx_buf_insert_update_buf_ptr(dc, buf, bb, where, rptr, DR_REG_NULL, 0);
    drreg_unreserve_register(dc, bb, where, rtaken);
    drreg_unreserve_register(dc, bb, where, rptr);
}

typedef struct {
    void *dc;
    instrlist_t *bb;
    instr_t *where;
    app_pc pc;
} insert_at_t;

static void insert_ref_at(void *arg, opnd_t ref, int kind)
{
    insert_at_t *at = (insert_at_t *)arg;
    insert_ref(at->dc, at->bb, at->where, at->pc, ref, kind);
}

/* The instrumentation of app instruction `inst` of a block whose
   bb_analysis gave `info`, inserted at `where`; `first` and `last`: the
   block's first and last instruction; `start`: the block's first
   application address. */
static dr_emit_flags_t insert_block(void *dc, instrlist_t *bb, instr_t *inst, instr_t *where, ptr_uint_t info, bool first, bool last,
                                    app_pc start)
{
    if (info == SKIP)
        return DR_EMIT_DEFAULT;
    bool ret_alone = (info & 2) != 0;
    if (ret_alone ? last : first)
        insert_enter(dc, bb, where, ret_alone ? instr_get_app_pc(inst) : start, info >> 2);
    if (!instr_is_app(inst) || (ret_alone && !last))
        return DR_EMIT_DEFAULT;
    insert_at_t at = { dc, bb, where, instr_get_app_pc(inst) };
    each_ref(inst, insert_ref_at, &at);
    if ((info & 1) != 0 && last)
        insert_exit(dc, bb, inst, where);
    return DR_EMIT_DEFAULT;
}

static dr_emit_flags_t bb_insert(void *dc, void *tag, instrlist_t *bb, instr_t *inst, bool for_trace, bool translating, void *user_data)
{
    return insert_block(dc, bb, inst, inst, (ptr_uint_t)user_data, drmgr_is_first_instr(dc, inst), drmgr_is_last_instr(dc, inst),
                        dr_fragment_app_pc(tag));
}

/* ---- sampling ----
   With --period=P (and --detail=D, --warm=W) the program runs under two
   instrumentations of every block, DynamoRIO's drbbdup switching between
   them at each block's entry by one word (`run_case`): FAST counts the
   block's references and instructions and writes nothing; DETAIL is the
   instrumentation above. Each process's references are counted from its
   start in periods of P: the first W of each period are written as
   functional warming (slots whose mode word is 1; through the line
   filter, "warming's line filter" below), the next D in detail
   (mode 0: the reader's measured window), the rest run in FAST. FAST
   counts down to the next switch at each block's entry and calls
   `switch_mode` when the count is spent (exact to a block); warming and
   detail count down by the words they write (`count_written`, exact to
   a thread buffer's flush). What FAST counted goes into the stream as
   the words of references left out (W_SKIP) and instructions (W_INSN)
   before the next words the process writes.

   What FAST leaves out of the model is the pages the program touched
   meanwhile: at the switch to warming, and before a fork, the client
   asks the kernel which of the process's pages are present
   (PAGEMAP_SCAN on /proc/self/pagemap, Linux 6.7) and writes one
   reference to each anonymous page it has not reported before (a store,
   or a load where the page is the shared zero page), in address order,
   so the model's faults, reservations and promotions follow what the
   program did; and before an unmap or a discard (munmap, mremap,
   madvise's DONTNEED, FREE and REMOVE), the pages of its range. File
   pages are left to the program's own references: which of them are
   present also depends on the page cache (the kernel's fault-around),
   which differs from run to run. The kernel's
   copies of system calls made in FAST are counted, not written. */

#include "drbbdup.h"
/* drbbdup.h bars drmgr's instruction tests, which the instrumentation
   without sampling uses: drbbdup's are used under it. */
#undef drmgr_is_first_instr
#undef drmgr_is_last_instr

/* The default case non-zero: drbbdup's quickest dispatch on x86. */
enum { CASE_DETAIL = 0, CASE_FAST = 1 };
enum { S_FAST, S_WARM, S_DETAIL };

static uint64 s_detail, s_period, s_warm;
/* What the next counted stretch runs beyond its share of the period: a
   process's first period has no warm-up (see sample_start), and its
   counted stretch is that much longer, so that later periods start
   every PERIOD references. */
static int64 s_extra;
static volatile ptr_uint_t run_case;
static int s_state;
/* The process's countdown to the next switch (signed: the block that
   spends it may take it below zero), and what FAST counted and has not
   written yet: instructions and references (the kernel's copies
   included). FAST blocks count in their thread's own slots (`T_*`, in
   DynamoRIO's raw thread-local storage: no lock, no lost update between
   threads) and hand them to these at `sync_thread`, every CHUNK
   references at most. */
static struct {
    int64 left;
    uint64 insns;
    uint64 refs;
} cd;
enum { T_LEFT, T_CHUNK, T_INSNS, T_SLOTS };
#define CHUNK (1 << 16)
static reg_id_t tls_seg;
static uint tls_offs;

static int64 *tls_slots(void)
{
    return (int64 *)((byte *)dr_get_dr_segment_base(tls_seg) + tls_offs);
}

static opnd_t tls_opnd(int k)
{
    return opnd_create_far_base_disp(tls_seg, DR_REG_NULL, DR_REG_NULL, 0, (int)(tls_offs + 8 * k), OPSZ_8);
}

/* The calling thread's counts into the process's (in FAST, off the
   countdown), and with `assign` its next chunk: what is left of the
   stretch, at most CHUNK (the caller holds the lock). */
static void sync_thread(bool assign)
{
    int64 *t = tls_slots();
    int64 used = t[T_CHUNK] - t[T_LEFT];
    cd.refs += (uint64)used;
    if (s_state == S_FAST)
        cd.left -= used;
    cd.insns += (uint64)t[T_INSNS];
    t[T_INSNS] = 0;
    int64 chunk = 0;
    if (assign)
        chunk = s_state != S_FAST ? CHUNK : cd.left < 1 ? 1 : cd.left < CHUNK ? cd.left : CHUNK;
    t[T_CHUNK] = t[T_LEFT] = chunk;
}

static bool scan_warned;

/* Pages reported, by page number + 1 (0: empty), open addressing. */
static uint64 *seen;
static size_t seen_cap, seen_n;

/* Where key `k` is in table `t` of `cap` (a power of two) entries, or
   the empty entry where it would go. */
static size_t seen_slot(const uint64 *t, size_t cap, uint64 k)
{
    size_t j = (size_t)(k * 0x9e3779b97f4a7c15ULL >> 20) & (cap - 1);
    while (t[j] != 0 && t[j] != k)
        j = (j + 1) & (cap - 1);
    return j;
}

static bool seen_add(uint64 page)
{
    if (2 * (seen_n + 1) > seen_cap) {
        size_t cap = seen_cap == 0 ? 1 << 14 : 2 * seen_cap;
        uint64 *t = (uint64 *)dr_global_alloc(cap * sizeof(uint64));
        memset(t, 0, cap * sizeof(uint64));
        for (size_t i = 0; i < seen_cap; i++)
            if (seen[i] != 0)
                t[seen_slot(t, cap, seen[i])] = seen[i];
        if (seen != NULL)
            dr_global_free(seen, seen_cap * sizeof(uint64));
        seen = t;
        seen_cap = cap;
    }
    size_t j = seen_slot(seen, seen_cap, page + 1);
    if (seen[j] != 0)
        return false;
    seen[j] = page + 1;
    seen_n++;
    return true;
}

/* PAGEMAP_SCAN (linux/fs.h of Linux 6.7, which Debian 12's headers
   predate). */
struct pm_scan_arg {
    uint64 size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64 category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region {
    uint64 start, end, categories;
};
#define PAGEMAP_SCAN 0xc0606610UL /* _IOWR('f', 16, struct pm_scan_arg) */
#define PAGE_IS_FILE    (1ULL << 2)
#define PAGE_IS_PRESENT (1ULL << 3)
#define PAGE_IS_PFNZERO (1ULL << 5)
#define SCAN_REGIONS 512

/* The process's pagemap and room for PAGEMAP_SCAN's answers. */
typedef struct {
    file_t pm;
    struct page_region *v;
} scan_t;

static bool scan_open(scan_t *s)
{
    s->pm = dr_open_file("/proc/self/pagemap", DR_FILE_READ);
    s->v = (struct page_region *)dr_global_alloc(SCAN_REGIONS * sizeof *s->v);
    return s->pm != INVALID_FILE;
}

static void scan_close(scan_t *s)
{
    dr_global_free(s->v, SCAN_REGIONS * sizeof *s->v);
    if (s->pm != INVALID_FILE)
        dr_close_file(s->pm);
}

/* Writes a reference to each anonymous page of [start, end) that is
   present and not reported yet (the caller holds the lock). */
static bool scan_range(scan_t *s, uint64 start, uint64 end)
{
    struct page_region *v = s->v;
    while (start < end) {
        struct pm_scan_arg a = { sizeof a, 0, start, end, 0, (uint64)v, SCAN_REGIONS, 0,
                                 0, PAGE_IS_PRESENT, 0, PAGE_IS_PRESENT | PAGE_IS_FILE | PAGE_IS_PFNZERO };
        long n = raw_syscall(SYS_ioctl, s->pm, (long)PAGEMAP_SCAN, (long)&a, 0);
        if (n < 0)
            return false;
        for (long i = 0; i < n; i++) {
            if ((v[i].categories & PAGE_IS_FILE) != 0)
                continue;
            int kind = (v[i].categories & PAGE_IS_PFNZERO) != 0 ? K_LOAD : K_STORE;
            for (uint64 pg = v[i].start; pg < v[i].end; pg += 4096)
                if (seen_add(pg >> 12)) {
                    uint64 w = pg << 8 | 3 << 2 | (uint64)kind;
                    append(&w, 1);
                }
        }
        if (a.walk_end <= start || n < SCAN_REGIONS)
            break;
        start = a.walk_end;
    }
    return true;
}

static uint64 hex(const char **p)
{
    uint64 v = 0;
    for (;; (*p)++) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return v;
        v = v << 4 | (uint64)d;
    }
}

/* The program's pages touched since the last scan, from the kernel: each
   mapping of /proc/self/maps that is the program's (not DynamoRIO's, the
   client's, the ring, or the kernel's vDSO and vvar), scanned (the
   caller holds the lock). */
static void scan_pages(void)
{
    file_t mf = dr_open_file("/proc/self/maps", DR_FILE_READ);
    scan_t sc;
    size_t cap = 1 << 16, len = 0;
    char *text = (char *)dr_global_alloc(cap);
    bool ok = scan_open(&sc) && mf != INVALID_FILE;
    while (ok) {
        if (len + 1 == cap) {
            char *t = (char *)dr_global_alloc(2 * cap);
            memcpy(t, text, len);
            dr_global_free(text, cap);
            text = t;
            cap *= 2;
        }
        ssize_t k = dr_read_file(mf, text + len, cap - 1 - len);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    text[len] = '\0';
    uint64 ring_lo = (uint64)ring, ring_hi = ring_lo + (RING_HEADER + (uint64)NSLOTS * SLOT_WORDS) * sizeof(uint64);
    for (const char *p = text; ok && *p != '\0';) {
        const char *line = p;
        uint64 start = hex(&p);
        p++;
        uint64 end = hex(&p);
        const char *eol = strchr(p, '\n');
        if (eol == NULL)
            eol = p + strlen(p);
        bool special = false;
        for (const char *q = p; q < eol; q++)
            if (*q == '[' && (strncmp(q, "[vvar", 5) == 0 || strncmp(q, "[vdso", 5) == 0 || strncmp(q, "[vsyscall", 9) == 0))
                special = true;
        bool ours = (start < ring_hi && end > ring_lo) || dr_memory_is_dr_internal((byte *)start) ||
            dr_memory_is_in_client((byte *)start);
        if (end > start && line[0] != '\0' && !special && !ours)
            ok = scan_range(&sc, start, end);
        p = *eol == '\n' ? eol + 1 : eol;
    }
    if (!ok && !scan_warned) {
        scan_warned = true;
        dr_fprintf(STDERR, "splabdr: cannot read the program's pages (PAGEMAP_SCAN needs Linux 6.7): pages first touched between windows reach the model at their next reference in a window\n");
    }
    scan_close(&sc);
    dr_global_free(text, cap);
    if (mf != INVALID_FILE)
        dr_close_file(mf);
}

/* Before the program unmaps or discards [start, start + len) in FAST:
   its pages there, which a later scan would not find (the caller holds
   the lock). */
static void scan_before_unmap(uint64 start, uint64 len)
{
    scan_t sc;
    if (scan_open(&sc))
        scan_range(&sc, start & ~4095ULL, (start + len + 4095) & ~4095ULL);
    scan_close(&sc);
}

/* What FAST counted, into the stream (the caller holds the lock). */
static void put_counts(void)
{
    if (cd.refs != 0) {
        uint64 w[2] = { W_SKIP, cd.refs };
        append_whole(w, 2);
        cd.refs = 0;
    }
    if (cd.insns != 0) {
        uint64 w[2] = { W_INSN, cd.insns };
        append_whole(w, 2);
        cd.insns = 0;
    }
}

/* Before words that order the process among others (a gate, a fork, an
   exec, the end): FAST's counts, and with `scan` (a fork: the child's
   simulated process inherits them; the end: the run's memory figures)
   the pages (the caller holds the lock). */
static void sample_sync(bool scan)
{
    if (!sampling || ring == NULL || s_state != S_FAST)
        return;
    if (dr_get_current_drcontext() != NULL)
        sync_thread(true);
    put_counts();
    if (scan)
        scan_pages();
}

/* Starts stretch `state` of the period: a new slot in its mode, the
   countdown to its end, and the case blocks run in from their next
   entry (the caller holds the lock). */
static void enter_state(int state)
{
    s_state = state;
    run_case = state == S_FAST ? CASE_FAST : CASE_DETAIL;
    slot_mode = state == S_DETAIL ? 0 : 1;
    if (state == S_WARM) {
        cd.left += (int64)s_warm;
        filter_empty();
    } else if (state == S_DETAIL)
        cd.left += (int64)s_detail;
    else {
        cd.left += (int64)(s_period - s_warm - s_detail) + s_extra;
        s_extra = 0;
    }
    if (ring != NULL) {
        ring_publish(false);
        ring_take_slot();
    }
}

/* The countdown is spent: on to the stretches of the period it reaches
   (the caller holds the lock). */
static void advance(void)
{
    while (cd.left <= 0) {
        if (s_state == S_FAST) {
            put_counts();
            if (ring != NULL)
                scan_pages();
            enter_state(s_warm > 0 ? S_WARM : S_DETAIL);
        } else if (s_state == S_WARM)
            enter_state(S_DETAIL);
        else
            enter_state(s_period > s_warm + s_detail ? S_FAST : (s_warm > 0 ? S_WARM : S_DETAIL));
    }
}

/* A process's first period starts with its first reference, and with
   its window: nothing was left out of the model before it (the model
   starts where the process does, as under valgrind, whose first window
   starts at the first reference), so there is nothing to warm, and a
   program shorter than the warm-up is measured too. It starts as at the
   end of a warm-up with nothing left (before its ring is open, so no
   slot and no scan). */
static void sample_start(void)
{
    cd.left = 0;
    cd.insns = cd.refs = 0;
    s_extra = (int64)s_warm;
    s_state = S_WARM;
    advance();
}

/* The FAST blocks' clean call. */
static void switch_mode(void)
{
    void *dc = dr_get_current_drcontext();
    flush_thread(dc);
    dr_mutex_lock(lock);
    sync_thread(false);
    advance();
    sync_thread(true);
    dr_mutex_unlock(lock);
}

/* In warming or detail: `n` words went into the stream; the references
   among them count down (the caller holds the lock). The switch is
   exact to a thread buffer's flush (8192 words). */
static void count_written_refs(int64 refs)
{
    if (!sampling || s_state == S_FAST)
        return;
    cd.left -= refs;
    advance();
}

/* ---- warming's line filter ----
   In warming, a load or store that a direct-mapped filter of
   `filter_sets` lines of `filter_line` bytes (--filter-sets and
   --filter-line, splab's warm_filter) finds is
   left out of the stream and counted in a W_SKIP word: the last
   reference of its thread to the filter's set was to the same line and,
   for a store, wrote it, so the line is the most recent of its
   first-level set on the thread's CPU and the access would change no
   cache's replacement state. The valgrind tool's filter, in the same
   order (its top comment; crates/trace/src/online/sample.rs says what
   stays approximate), applied here to a thread's buffer as it goes into
   the stream: the stream's order of the thread's references is the
   order the model takes them in. A filter of each thread (its CPU's
   first level), emptied when warming starts and at every map, unmap
   and fork (`filter_gen`: every thread's filter is empty from the next
   bump on). The references the filter finds still count down the
   warming: it lasts as many of the program's references as asked. */
typedef struct {
    uint64 gen;
    uint64 e[];
} filter_t;

static bool filtering(void)
{
    return sampling && filter_sets > 0 && s_state == S_WARM;
}

static void filter_empty(void)
{
    __atomic_add_fetch(&filter_gen, 1, __ATOMIC_SEQ_CST);
}

/* Compacts the `n` words at `w` to those the filter keeps, their count
   returned and the references left out added to `left`. */
static size_t filter_words(void *dc, uint64 *w, size_t n, int64 *left)
{
    filter_t *f = dc == NULL ? NULL : (filter_t *)drmgr_get_tls_field(dc, tls_filter);
    if (f == NULL)
        return n;
    uint64 gen = __atomic_load_n(&filter_gen, __ATOMIC_SEQ_CST);
    if (f->gen != gen) {
        memset(f->e, 0xff, filter_sets * sizeof(uint64));
        f->gen = gen;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        uint64 x = w[i];
        uint8_t low = (uint8_t)x;
        int kind = low & 3, code = low >> 2 & 7;
        if (low < 0x20 && code < 7 && kind != 0) {
            uint64 addr = x >> 8, size = 1ULL << code;
            uint64 *e = &f->e[(addr >> filter_shift) & (filter_sets - 1)];
            /* The key of the last byte's line as a store leaves it (line
               << 1 | 1): a reference across two lines looks up the first
               line's entry with the second's key, never found. */
            uint64 key1 = (addr + size - 1) >> (filter_shift - 1) | 1, old = *e;
            bool writes = kind != K_LOAD;
            bool hit = (writes ? old : old | 1) == key1;
            *e = writes ? key1 : hit ? old : key1 ^ 1;
            if (hit) {
                (*left)++;
                continue;
            }
        }
        w[j++] = x;
    }
    return j;
}

/* At the start of a FAST block: its instructions counted, the countdown
   by its references, and the switch when the countdown is spent. (In
   the detail case the countdown is kept by the words written,
   `count_written`: a countdown there, which needs the flags at the first
   instruction of drbbdup's first copy, broke the programs it ran.) */
static void insert_countdown(void *dc, instrlist_t *bb, instr_t *where, int refs, int insns)
{
    if (drreg_reserve_aflags(dc, bb, where) != DRREG_SUCCESS)
        DR_ASSERT_MSG(false, "splabdr: cannot reserve the flags");
    instr_t *done = INSTR_CREATE_label(dc);
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_add(dc, tls_opnd(T_INSNS), OPND_CREATE_INT32(insns)));
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_sub(dc, tls_opnd(T_LEFT), OPND_CREATE_INT32(refs)));
    instrlist_meta_preinsert(bb, where, INSTR_CREATE_jcc(dc, OP_jg, opnd_create_instr(done)));
    dr_insert_clean_call(dc, bb, where, (void *)switch_mode, false, 0);
    instrlist_meta_preinsert(bb, where, done);
    drreg_unreserve_aflags(dc, bb, where);
}

/* A block's references as the detail case writes them, and its
   instructions (a rep-string block: its one string instruction). */
static void block_counts(instrlist_t *bb, int *refs, int *insns)
{
    bool expanded = expanded_rep(bb);
    *refs = *insns = 0;
    for (instr_t *i = instrlist_first_app(bb); i != NULL; i = instr_get_next_app(i)) {
        if (instr_is_label(i) || (expanded && !instr_is_string_op(i)))
            continue;
        *refs += each_ref(i, NULL, NULL);
        (*insns)++;
    }
}

static uintptr_t dup_setup(void *ctx, void *dc, void *tag, instrlist_t *bb, bool *enable_dups, bool *dynamic, void *user_data)
{
    drbbdup_register_case_encoding(ctx, CASE_DETAIL);
    *enable_dups = true;
    *dynamic = false;
    return CASE_FAST;
}

/* Per case: DETAIL's user data as bb_analysis makes it, with the block's
   references; FAST's the references and instructions. */
typedef struct {
    ptr_uint_t info;
    int refs, insns;
} case_info_t;

static dr_emit_flags_t dup_analyze(void *dc, void *tag, instrlist_t *bb, bool for_trace, bool translating, uintptr_t encoding,
                                   void *user_data, void *orig, void **case_data)
{
    case_info_t *c = (case_info_t *)dr_thread_alloc(dc, sizeof *c);
    c->info = 0;
    block_counts(bb, &c->refs, &c->insns);
    if (in_vdso(tag)) {
        /* The return alone, as without sampling. */
        instr_t *last = instrlist_last_app(bb);
        bool ret = last != NULL && instr_is_return(last);
        c->refs = ret ? each_ref(last, NULL, NULL) : 0;
        c->insns = ret ? 1 : 0;
    }
    if (encoding == CASE_DETAIL) {
        void *info;
        bb_analysis(dc, tag, bb, for_trace, translating, &info);
        c->info = (ptr_uint_t)info;
    }
    *case_data = c;
    return DR_EMIT_DEFAULT;
}

static void dup_destroy(void *dc, uintptr_t encoding, void *user_data, void *orig, void *case_data)
{
    dr_thread_free(dc, case_data, sizeof(case_info_t));
}

static bool dup_first(void *dc, instr_t *inst)
{
    bool b = false;
    drbbdup_is_first_instr(dc, inst, &b);
    return b;
}

static bool dup_last(void *dc, instr_t *inst)
{
    bool b = false;
    drbbdup_is_last_instr(dc, inst, &b);
    return b;
}

static dr_emit_flags_t dup_instrument(void *dc, void *tag, instrlist_t *bb, instr_t *inst, instr_t *where, bool for_trace,
                                      bool translating, uintptr_t encoding, void *user_data, void *orig, void *case_data)
{
    case_info_t *c = (case_info_t *)case_data;
    bool first = dup_first(dc, inst);
    if (encoding == CASE_FAST) {
        if (first && c->refs + c->insns > 0)
            insert_countdown(dc, bb, where, c->refs, c->insns);
        return DR_EMIT_DEFAULT;
    }
    return insert_block(dc, bb, inst, where, c->info, first, dup_last(dc, inst), dr_fragment_app_pc(tag));
}

/* ---- the kernel's accesses to the program's memory ----
   A system call's copies into the program's memory (read filling a
   buffer, stat a structure) and out of it (write from a buffer, a path's
   string) touch the program's pages as its own stores and loads would,
   and the valgrind tool writes them (its "the kernel's accesses"): after
   the call, in the call's order, one 64-byte load or store word a line,
   outside any block. valgrind knows every system call's buffers; this
   client knows those of the calls below, the ones file, pipe and
   process work makes (reading and writing, paths, stat, directory
   entries, waits, signal masks), and writes nothing for the others. What
   the kernel reads is taken before the call (a path's length then), what
   it wrote after it, from the call's result. */

#define MAX_KRANGES 64
typedef struct {
    uint64 a, len;
    int kind;
} krange_t;

/* A thread's system call under way (and whether it is a fork or a
   clone: a thread's own, since a new thread's first calls may come
   before its parent's clone returns). */
typedef struct {
    int sysno;
    uint64 arg[6];
    int n;
    krange_t r[MAX_KRANGES];
    bool forking, cloning;
    /* Whether the last system call was gated (`gated`); where the thread
       stood at its gate or as it returned (`marked`, the thread's buffer
       pointer, its flushes so far and, sampling, its count-down), for
       `at_gate` below; and the thread's flushes. */
    bool gated, marked;
    uint64 *mark_ptr;
    int64 mark_left;
    uint64 mark_flushes, flushes;
} call_t;

static int tls_call;

static void count_flush(void *drcontext)
{
    call_t *c = drcontext == NULL ? NULL : (call_t *)drmgr_get_tls_field(drcontext, tls_call);
    if (c != NULL)
        c->flushes++;
}

/* Marks where the thread stands: at a gate, or as a gated call returns. */
static void mark_gate(void *dc, call_t *c)
{
    c->marked = true;
    c->mark_ptr = (uint64 *)drx_buf_get_buffer_ptr(dc, buf);
    c->mark_flushes = c->flushes;
    c->mark_left = sampling ? tls_slots()[T_LEFT] : 0;
}

/* Whether the thread has run no block since it was marked: every block
   writes its entry word or, sampling in FAST, counts down. */
static bool at_gate(void *dc, const call_t *c)
{
    return c->marked && c->mark_ptr == (uint64 *)drx_buf_get_buffer_ptr(dc, buf) && c->mark_flushes == c->flushes &&
        c->mark_left == (sampling ? tls_slots()[T_LEFT] : 0);
}

static void krange(call_t *c, uint64 a, uint64 len, int kind)
{
    if (a != 0 && len != 0 && c->n < MAX_KRANGES)
        c->r[c->n++] = (krange_t){ a, len, kind };
}

/* The length of the string at `a` with its terminator (at most 4096
   bytes; what cannot be read ends it). */
static uint64 str_len(uint64 a)
{
    char b[256];
    uint64 n = 0;
    while (a != 0 && n < 4096) {
        size_t chunk = 4096 - ((a + n) & 4095);
        if (chunk > sizeof b)
            chunk = sizeof b;
        size_t got = 0;
        if (!dr_safe_read((void *)(a + n), chunk, b, &got) || got == 0)
            return n;
        void *z = memchr(b, 0, got);
        if (z != NULL)
            return n + (uint64)((char *)z - b) + 1;
        n += got;
    }
    return n;
}

/* The iovecs at `iov` (`cnt` of them): the array read, and each buffer
   as `kind` up to `total` bytes in all. */
static void kiov(call_t *c, uint64 iov, uint64 cnt, uint64 total, int kind)
{
    krange(c, iov, cnt * sizeof(struct iovec), K_LOAD);
    for (uint64 i = 0; i < cnt && i < 1024 && total > 0; i++) {
        struct iovec v;
        if (!dr_safe_read((void *)(iov + i * sizeof v), sizeof v, &v, NULL))
            return;
        uint64 len = v.iov_len < total ? v.iov_len : total;
        krange(c, (uint64)v.iov_base, len, kind);
        total -= len;
    }
}

/* Before the call: its arguments, and what the kernel will read. */
static void call_begin(void *dc, int sysno)
{
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (c == NULL)
        return;
    c->sysno = sysno;
    c->n = 0;
    for (int i = 0; i < 6; i++)
        c->arg[i] = dr_syscall_get_param(dc, i);
    uint64 *a = c->arg;
    switch (sysno) {
    case SYS_write: case SYS_pwrite64: case SYS_sendto:
        krange(c, a[1], a[2], K_LOAD);
        break;
    case SYS_writev: case SYS_pwritev: case SYS_pwritev2:
        kiov(c, a[1], a[2], ~0ULL, K_LOAD);
        break;
    case SYS_open: case SYS_stat: case SYS_lstat: case SYS_access: case SYS_readlink:
    case SYS_unlink: case SYS_mkdir: case SYS_rmdir: case SYS_chdir: case SYS_truncate:
    case SYS_chmod: case SYS_creat:
        krange(c, a[0], str_len(a[0]), K_LOAD);
        break;
    case SYS_openat: case SYS_newfstatat: case SYS_statx: case SYS_faccessat: case 439 /* faccessat2 */:
    case SYS_readlinkat: case SYS_unlinkat: case SYS_mkdirat: case SYS_fchmodat: case SYS_utimensat:
        krange(c, a[1], str_len(a[1]), K_LOAD);
        break;
    case SYS_rename:
        krange(c, a[0], str_len(a[0]), K_LOAD);
        krange(c, a[1], str_len(a[1]), K_LOAD);
        break;
    case SYS_renameat: case SYS_renameat2:
        krange(c, a[1], str_len(a[1]), K_LOAD);
        krange(c, a[3], str_len(a[3]), K_LOAD);
        break;
    case SYS_nanosleep:
        krange(c, a[0], 16, K_LOAD);
        break;
    case SYS_clock_nanosleep:
        krange(c, a[2], 16, K_LOAD);
        break;
    case SYS_poll: case SYS_ppoll:
        krange(c, a[0], a[1] * 8, K_LOAD);
        break;
    case SYS_rt_sigprocmask:
        krange(c, a[1], a[3], K_LOAD);
        break;
    case SYS_rt_sigaction:
        krange(c, a[1], 32, K_LOAD);
        break;
    case SYS_prlimit64:
        krange(c, a[2], 16, K_LOAD);
        break;
    default:
        break;
    }
}

/* After the call: what the kernel wrote, by its result `res` (a
   negative errno on failure). */
static void call_wrote(call_t *c, long res)
{
    uint64 *a = c->arg;
    if (res < 0)
        return;
    switch (c->sysno) {
    case SYS_read: case SYS_pread64: case SYS_recvfrom: case SYS_getdents64: case SYS_getrandom:
        krange(c, a[1], (uint64)res, K_STORE);
        break;
    case SYS_readv: case SYS_preadv: case SYS_preadv2:
        kiov(c, a[1], a[2], (uint64)res, K_STORE);
        break;
    case SYS_readlink: case SYS_getcwd:
        krange(c, c->sysno == SYS_getcwd ? a[0] : a[1], (uint64)res, K_STORE);
        break;
    case SYS_readlinkat:
        krange(c, a[2], (uint64)res, K_STORE);
        break;
    case SYS_stat: case SYS_lstat: case SYS_fstat:
        krange(c, a[1], 144, K_STORE);
        break;
    case SYS_newfstatat:
        krange(c, a[2], 144, K_STORE);
        break;
    case SYS_statx:
        krange(c, a[4], 256, K_STORE);
        break;
    case SYS_statfs: case SYS_fstatfs:
        krange(c, a[1], 120, K_STORE);
        break;
    case SYS_pipe: case SYS_pipe2:
        krange(c, a[0], 8, K_STORE);
        break;
    case SYS_uname:
        krange(c, a[0], 390, K_STORE);
        break;
    case SYS_wait4:
        krange(c, a[1], 4, K_STORE);
        krange(c, a[3], 144, K_STORE);
        break;
    case SYS_poll: case SYS_ppoll:
        krange(c, a[0], a[1] * 8, K_STORE);
        break;
    case SYS_epoll_wait: case SYS_epoll_pwait:
        krange(c, a[1], (uint64)res * 12, K_STORE);
        break;
    case SYS_rt_sigprocmask:
        krange(c, a[2], a[3], K_STORE);
        break;
    case SYS_rt_sigaction:
        krange(c, a[2], 32, K_STORE);
        break;
    case SYS_prlimit64:
        krange(c, a[3], 16, K_STORE);
        break;
    case SYS_sched_getaffinity:
        krange(c, a[2], (uint64)res, K_STORE);
        break;
    case SYS_sysinfo:
        krange(c, a[0], 112, K_STORE);
        break;
    case SYS_clock_gettime:
        krange(c, a[1], 16, K_STORE);
        break;
    default:
        break;
    }
}

/* A wait that can end on a timer and did: nanosleep, or a poll, select
   or epoll_wait given a timeout that returned nothing. */
static bool timed_out(const call_t *c, long res)
{
    const uint64 *a = c->arg;
    if (c->sysno == SYS_nanosleep || c->sysno == SYS_clock_nanosleep)
        return true;
    if (res != 0)
        return false;
    switch (c->sysno) {
    case SYS_poll: return (int)a[2] > 0;
    case SYS_epoll_wait: case SYS_epoll_pwait: return (int)a[3] > 0;
    case SYS_ppoll: return a[2] != 0;
    case SYS_select: case SYS_pselect6: return a[4] != 0;
    default: return false;
    }
}

/* Linux's EAGAIN (asm-generic/errno-base.h). */
#define LINUX_EAGAIN 11

/* After the call: the kernel's accesses, then a read or write that
   would have blocked or a wait a timer ended (the valgrind tool's words
   for them, which say when a run depends on the host's timing). */
static void call_end(void *dc, long res)
{
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (c == NULL)
        return;
    call_wrote(c, res);
    int s = c->sysno;
    bool again = ring != NULL && res == -LINUX_EAGAIN &&
        (s == SYS_read || s == SYS_readv || s == SYS_write || s == SYS_writev);
    bool timed = ring != NULL && !again && in_lockstep() && timed_out(c, res);
    if (c->n == 0 && !again && !timed)
        return;
    flush_thread(dc);
    dr_mutex_lock(lock);
    if (ring != NULL || out_fd != INVALID_FILE) {
        /* Between sampled windows the copies are counted, not written. */
        bool fast = sampling && s_state == S_FAST;
        for (int i = 0; i < c->n; i++) {
            uint64 first = c->r[i].a & ~63ULL, last = (c->r[i].a + c->r[i].len - 1) & ~63ULL;
            if (fast) {
                cd.refs += (last - first) / 64 + 1;
                continue;
            }
            for (uint64 l = first;; l += 64) {
                uint64 w = l << 8 | (uint64)(c->r[i].kind | 6 << 2);
                append(&w, 1);
                if (l == last)
                    break;
            }
        }
        if (again) {
            uint64 w = W_AGAIN | (in_lockstep() ? AGAIN_IN_LOCKSTEP : 0);
            append(&w, 1);
        } else if (timed) {
            uint64 w = W_TIMED;
            append(&w, 1);
        }
    }
    dr_mutex_unlock(lock);
    c->n = 0;
}

static void thread_init(void *dc)
{
    if (sampling)
        memset(tls_slots(), 0, T_SLOTS * sizeof(int64));
    call_t *c = (call_t *)dr_thread_alloc(dc, sizeof(call_t));
    memset(c, 0, sizeof *c);
    drmgr_set_tls_field(dc, tls_call, c);
    if (filter_sets > 0) {
        filter_t *f = (filter_t *)dr_thread_alloc(dc, sizeof(filter_t) + filter_sets * sizeof(uint64));
        f->gen = 0;
        drmgr_set_tls_field(dc, tls_filter, f);
    }
}

static void thread_exit(void *dc)
{
    if (sampling && !stopping) {
        /* What it counted in FAST stays the process's. */
        dr_mutex_lock(lock);
        sync_thread(false);
        dr_mutex_unlock(lock);
    }
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (c != NULL)
        dr_thread_free(dc, c, sizeof(call_t));
    drmgr_set_tls_field(dc, tls_call, NULL);
    filter_t *f = (filter_t *)drmgr_get_tls_field(dc, tls_filter);
    if (f != NULL) {
        /* (drx_buf may hand over the thread's last words after this:
           they then go out unfiltered.) */
        drmgr_set_tls_field(dc, tls_filter, NULL);
        dr_thread_free(dc, f, sizeof(filter_t) + filter_sets * sizeof(uint64));
    }
}

/* ---- processes ---- */

static bool filter_syscall(void *dc, int sysnum)
{
    return true;
}

/* System calls that touch nothing outside the process (the list the
   valgrind tool keeps too, tools/vgtrace/local_syscalls.h). */
static bool is_local(int sysno)
{
    switch (sysno) {
#define LOCAL_SYSCALL(name) case SYS_##name:
#include "local_syscalls.h"
#undef LOCAL_SYSCALL
    case 334: /* rseq */
        return true;
    default:
        return false;
    }
}

static uint64 clone_flags(void *dc, int sysno)
{
    if (sysno == SYS_clone)
        return dr_syscall_get_param(dc, 0);
    if (sysno == 435 /* clone3 */) {
        uint64 *args = (uint64 *)dr_syscall_get_param(dc, 0);
        uint64 f = 0;
        if (args != NULL && dr_safe_read(args, sizeof f, &f, NULL))
            return f;
    }
    return 0;
}

static bool is_fork(void *dc, int sysno, uint64 flags)
{
    if (sysno == SYS_fork || sysno == SYS_vfork)
        return true;
    if (sysno == SYS_clone || sysno == 435)
        return (flags & CLONE_VM) == 0 || (flags & CLONE_VFORK) != 0;
    return false;
}

/* A vfork (or a clone that shares the address space until the child
   execs) becomes a fork, as valgrind runs it: the child gets its own
   memory, so its references until the exec are its own stream, not the
   parent's. */
static void vfork_as_fork(void *dc, int sysno, uint64 flags)
{
    uint64 plain = flags & ~(uint64)(CLONE_VM | CLONE_VFORK);
    if (sysno == SYS_vfork)
        dr_syscall_set_sysnum(dc, SYS_fork);
    else if (sysno == SYS_clone && (flags & CLONE_VFORK) != 0)
        dr_syscall_set_param(dc, 0, plain);
    else if (sysno == 435 && (flags & CLONE_VFORK) != 0) {
        uint64 *args = (uint64 *)dr_syscall_get_param(dc, 0);
        dr_safe_write(args, sizeof plain, &plain, NULL);
    }
}

/* The end of an --out stream: what is buffered, then the end word. */
static void out_end(void *dc)
{
    flush_thread(dc);
    dr_mutex_lock(lock);
    if (out_fd != INVALID_FILE) {
        uint64 w = W_END;
        out_write(&w, 1);
        dr_close_file(out_fd);
        out_fd = INVALID_FILE;
    }
    dr_mutex_unlock(lock);
}

static void note_self_signal(void *dc, int sysno, const call_t *c);

/* A call that maps, unmaps or moves memory (or forks): a line's
   address may name another line after it. */
static bool changes_map(int sysno)
{
    switch (sysno) {
    case SYS_mmap: case SYS_munmap: case SYS_mremap: case SYS_mprotect: case SYS_madvise:
    case SYS_brk: case SYS_shmat: case SYS_shmdt: case SYS_fork: case SYS_vfork: case SYS_clone:
    case 435: /* clone3 */
        return true;
    default:
        return false;
    }
}

static bool pre_syscall(void *dc, int sysno)
{
    if (filtering() && changes_map(sysno)) {
        /* The references before the call go through the filter as it
           was; those after it through an empty one. */
        flush_thread(dc);
        filter_empty();
    }
    if (sampling && ring != NULL && s_state == S_FAST) {
        /* MADV_DONTNEED, MADV_FREE, MADV_REMOVE discard pages. */
        uint64 advice = sysno == SYS_madvise ? (uint64)dr_syscall_get_param(dc, 2) : 0;
        if (sysno == SYS_munmap || sysno == SYS_mremap || advice == 4 || advice == 8 || advice == 9) {
            flush_thread(dc);
            dr_mutex_lock(lock);
            scan_before_unmap((uint64)dr_syscall_get_param(dc, 0), (uint64)dr_syscall_get_param(dc, 1));
            dr_mutex_unlock(lock);
        }
    }
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (c != NULL)
        c->gated = c->marked = false;
    if (ring != NULL || out_fd != INVALID_FILE)
        call_begin(dc, sysno);
    if (ring != NULL && c != NULL)
        note_self_signal(dc, sysno, c);
    if (out_fd != INVALID_FILE) {
        /* The program an exec starts runs without the client
           (-no_follow_children): the stream ends here. */
        if (sysno == SYS_execve || sysno == SYS_execveat)
            out_end(dc);
        return true;
    }
    if (ring == NULL)
        return true;
    if (sysno == SYS_execve || sysno == SYS_execveat) {
        publish_all(dc, false);
        return true;
    }
    if (c != NULL && (sysno == SYS_fork || sysno == SYS_vfork || sysno == SYS_clone || sysno == 435)) {
        uint64 flags = clone_flags(dc, sysno);
        c->forking = is_fork(dc, sysno, flags);
        c->cloning = true;
        if (c->forking) {
            vfork_as_fork(dc, sysno, flags);
            /* The parent's references so far precede the fork word. */
            publish_all(dc, true);
            c->gated = true;
            mark_gate(dc, c);
            return true;
        }
    }
    if (!is_local(sysno) && in_lockstep()) {
        publish_all(dc, false);
        __atomic_store_n(&ring[R_IN_CALL], 1, __ATOMIC_SEQ_CST);
        if (c != NULL) {
            c->gated = true;
            mark_gate(dc, c);
        }
    }
    return true;
}

static void post_call(void *dc, int sysno, call_t *c)
{
    if (ring != NULL)
        __atomic_store_n(&ring[R_IN_CALL], 0, __ATOMIC_SEQ_CST);
    dr_syscall_result_info_t r = { sizeof r, };
    r.use_high = false;
    r.use_errno = false;
    bool got = dr_syscall_get_result_ex(dc, &r);
    call_end(dc, got ? (long)r.value : -1);
    if (ring == NULL || c == NULL || !c->cloning)
        return;
    c->cloning = false;
    if (!got || !r.succeeded || r.value == 0)
        return;
    flush_thread(dc);
    dr_mutex_lock(lock);
    if (c->forking) {
        uint64 w[2] = { W_FORK, (uint64)r.value };
        append_whole(w, 2);
        /* From here on the parent runs gate by gate too. */
        lockstep = true;
        ring_publish(false);
        ring_take_slot();
    } else {
        uint64 w = W_THREAD;
        append(&w, 1);
    }
    dr_mutex_unlock(lock);
}

static void post_syscall(void *dc, int sysno)
{
    if (ring == NULL && out_fd == INVALID_FILE)
        return;
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    post_call(dc, sysno, c);
    if (c != NULL && c->gated)
        mark_gate(dc, c);
}

/* ---- signals ----
   A signal the process's own instructions raise (a fault, SIGPIPE from
   its write, a signal it sends itself) is delivered at the same point of
   its stream on every run. One from outside it (another process's kill,
   a child's exit) that is delivered before the receiver runs another
   block after standing at a gate or returning from a gated call
   (`at_gate`) arrived while the receiver waited there or in the call,
   the other processes running meanwhile in the model's order: the same
   on every run, as under the valgrind tool. One delivered anywhere else,
   and a timer's, lands where the receiver happens to be when it arrives
   (DynamoRIO delivers it at the next block boundary): it writes a
   W_SIGNAL word, and the reader says the run is not deterministic. */

/* Signals the process sent itself (kill, tgkill, rt_sigqueueinfo,
   rt_tgsigqueueinfo naming its own id; tkill naming the calling thread)
   and not yet delivered: bit n - 1 for signal n. One it sent itself and
   ignored stays marked. */
static uint64 self_sent;

/* (Its arguments are call_begin's, taken before the call.) */
static void note_self_signal(void *dc, int sysno, const call_t *c)
{
    long sig = sig_sent_to_self(sysno, (long)c->arg[0], (long)c->arg[1], (long)c->arg[2], (long)dr_get_process_id(),
                                (long)dr_get_thread_id(dc));
    __atomic_fetch_or(&self_sent, sig_bit(sig), __ATOMIC_RELAXED);
}

static bool from_own_instructions(int sig)
{
    uint64 bit = sig_bit(sig);
    return sig_own_kind(sig) || (bit != 0 && (__atomic_fetch_and(&self_sent, ~bit, __ATOMIC_RELAXED) & bit) != 0);
}

static dr_signal_action_t signal_event(void *dc, dr_siginfo_t *info)
{
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (ring != NULL && !stopping && !from_own_instructions(info->sig) &&
        !(c != NULL && c->gated && !sig_timer(info->sig) && at_gate(dc, c))) {
        uint64 w = W_SIGNAL | (uint64)info->sig << 8;
        dr_mutex_lock(lock);
        append(&w, 1);
        dr_mutex_unlock(lock);
    }
    return DR_SIGNAL_DELIVER;
}

static void fork_init(void *dc)
{
    if (out_path[0] != '\0') {
        /* With --out a forked child writes nothing (its descriptor was
           closed at the fork). */
        out_fd = INVALID_FILE;
        drx_buf_set_buffer_ptr(dc, buf, drx_buf_get_buffer_base(dc, buf));
        return;
    }
    /* The parent's ring stays the parent's: the child writes its own, in
       lockstep from its first gate. */
    ring = NULL;
    lockstep = true;
    /* A child starts with no signal pending. */
    self_sent = 0;
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (c != NULL)
        c->cloning = false;
    drx_buf_set_buffer_ptr(dc, buf, drx_buf_get_buffer_base(dc, buf));
    /* Its references are counted from its start, as the valgrind tool
       counts them; the pages reported are the parent's, which its
       simulated process inherits. */
    if (sampling) {
        memset(tls_slots(), 0, T_SLOTS * sizeof(int64));
        sample_start();
    }
    ring_open('F');
}

/* Every thread's buffer was flushed at its exit (drx_buf calls full_cb). */
static void at_exit(void)
{
    if (!stopping && out_fd != INVALID_FILE)
        out_end(NULL);
    if (!stopping) {
        dr_mutex_lock(lock);
        if (ring != NULL) {
            sample_sync(true);
            if (sampling && s_state != S_FAST && (cd.refs != 0 || cd.insns != 0)) {
                /* Other threads' counts handed over during the last
                   window: in a slot of warming, so that no window
                   takes them as its own. */
                slot_mode = 1;
                ring_publish(false);
                ring_take_slot();
                put_counts();
            }
            uint64 w = W_END;
            append(&w, 1);
            ring_publish(true);
            ring = NULL;
        }
        dr_mutex_unlock(lock);
    }
    drx_buf_free(buf);
    if (seen != NULL)
        dr_global_free(seen, seen_cap * sizeof(uint64));
    seen = NULL;
    dr_mutex_destroy(lock);
    dr_mutex_destroy(table_lock);
    if (sampling) {
        drbbdup_exit();
        dr_raw_tls_cfree(tls_offs, T_SLOTS);
    }
    drutil_exit();
    drreg_exit();
    drx_exit();
    drmgr_exit();
}

DR_EXPORT void dr_client_main(client_id_t id, int argc, const char *argv[])
{
    dr_set_client_name("splab reference stream", "");
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--ring=", 7) == 0)
            dr_snprintf(ring_dir, sizeof ring_dir, "%s", argv[i] + 7);
        else if (strncmp(argv[i], "--reader=", 9) == 0)
            reader_pid = strtol(argv[i] + 9, NULL, 10);
        else if (strncmp(argv[i], "--out=", 6) == 0)
            dr_snprintf(out_path, sizeof out_path, "%s", argv[i] + 6);
        else if (strncmp(argv[i], "--detail=", 9) == 0)
            s_detail = strtoull(argv[i] + 9, NULL, 10);
        else if (strncmp(argv[i], "--period=", 9) == 0)
            s_period = strtoull(argv[i] + 9, NULL, 10);
        else if (strncmp(argv[i], "--warm=", 7) == 0)
            s_warm = strtoull(argv[i] + 7, NULL, 10);
        else if (strncmp(argv[i], "--filter-sets=", 14) == 0)
            filter_sets = strtoull(argv[i] + 14, NULL, 10);
        else if (strncmp(argv[i], "--filter-line=", 14) == 0)
            filter_line = strtoull(argv[i] + 14, NULL, 10);
        else {
            dr_fprintf(STDERR, "splabdr: unknown option %s (expected --ring=DIR, --reader=PID, --out=PATH, --detail=N, --period=N, --warm=N, --filter-sets=N or --filter-line=N)\n", argv[i]);
            dr_abort_with_code(2);
        }
    }
    if ((ring_dir[0] == '\0') == (out_path[0] == '\0')) {
        dr_fprintf(STDERR, "splabdr: one of --ring=DIR and --out=PATH is required\n");
        dr_abort_with_code(2);
    }
    sampling = s_period > 0;
    if (filter_sets > 4096 || (filter_sets & (filter_sets - 1)) != 0) {
        dr_fprintf(STDERR, "splabdr: --filter-sets must be a power of two up to 4096\n");
        dr_abort_with_code(2);
    }
    if (filter_line < 16 || filter_line > 4096 || (filter_line & (filter_line - 1)) != 0) {
        dr_fprintf(STDERR, "splabdr: --filter-line must be a power of two from 16 to 4096\n");
        dr_abort_with_code(2);
    }
    filter_shift = 0;
    while ((1ULL << filter_shift) < filter_line)
        filter_shift++;
    if (!sampling)
        filter_sets = 0;
    if (sampling && (ring_dir[0] == '\0' || s_detail == 0 || s_warm + s_detail > s_period)) {
        dr_fprintf(STDERR, "splabdr: sampling needs --ring, --detail=N > 0 and --warm plus --detail at most --period\n");
        dr_abort_with_code(2);
    }
    drreg_options_t ops = { sizeof(ops), 3, false };
    if (!drmgr_init() || !drx_init() || !drutil_init() || drreg_init(&ops) != DRREG_SUCCESS) {
        dr_fprintf(STDERR, "splabdr: cannot initialise DynamoRIO's extensions\n");
        dr_abort_with_code(3);
    }
    lock = dr_mutex_create();
    table_lock = dr_mutex_create();
    buf = drx_buf_create_trace_buffer(BUF_BYTES, full_cb);
    tls_call = drmgr_register_tls_field();
    tls_filter = drmgr_register_tls_field();
    if (tls_call < 0 || tls_filter < 0) {
        dr_fprintf(STDERR, "splabdr: no thread-local field\n");
        dr_abort_with_code(3);
    }
    drmgr_register_thread_init_event(thread_init);
    drmgr_register_thread_exit_event(thread_exit);
    dr_register_exit_event(at_exit);
    dr_register_fork_init_event(fork_init);
    dr_register_filter_syscall_event(filter_syscall);
    drmgr_register_pre_syscall_event(pre_syscall);
    drmgr_register_post_syscall_event(post_syscall);
    drmgr_register_signal_event(signal_event);
    find_vdso();
    drmgr_register_bb_app2app_event(bb_app2app, NULL);
    if (sampling) {
        drbbdup_options_t o = { sizeof o, };
        o.set_up_bb_dups = dup_setup;
        o.analyze_case_ex = dup_analyze;
        o.destroy_case_analysis = dup_destroy;
        o.instrument_instr_ex = dup_instrument;
        o.runtime_case_opnd = OPND_CREATE_ABSMEM((void *)&run_case, OPSZ_PTR);
        o.non_default_case_limit = 1;
        o.max_case_encoding = CASE_FAST;
        o.never_enable_dynamic_handling = true;
        if (!dr_raw_tls_calloc(&tls_seg, &tls_offs, T_SLOTS, 0)) {
            dr_fprintf(STDERR, "splabdr: no thread-local slots\n");
            dr_abort_with_code(3);
        }
        if (drbbdup_init(&o) != DRBBDUP_SUCCESS) {
            dr_fprintf(STDERR, "splabdr: cannot initialise drbbdup\n");
            dr_abort_with_code(3);
        }
        sample_start();
    } else
        drmgr_register_bb_instrumentation_event(bb_analysis, bb_insert, NULL);
    if (out_path[0] != '\0') {
        /* The reader holds the FIFO open for reading. */
        out_fd = dr_open_file(out_path, DR_FILE_WRITE_ONLY | DR_FILE_CLOSE_ON_FORK);
        if (out_fd == INVALID_FILE) {
            dr_fprintf(STDERR, "splabdr: cannot open %s\n", out_path);
            dr_abort_with_code(3);
        }
        uint64 magic;
        memcpy(&magic, "SPLVT001", sizeof magic);
        out_write(&magic, 1);
    } else {
        ring_open('S');
    }
}
