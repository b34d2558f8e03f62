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
   publishing slots as they fill. Instructions are counted per basic
   block by one inline counter update at its entry, and the count goes
   into the stream as a count word (0x82) at each flush.

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

   What this client does not write (the valgrind tool does): block
   tables, entry and exit words (the core is given counts of instructions
   instead), and the startup layout and map events (the reader maps 2 MB
   blocks where memory is touched outside any mapping). Threads share
   the stream, each thread's buffer copied in whole at its flush. */

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

/* Words kept free at a slot's end for the count word and the end. */
#define TAIL_WORDS 4

#define BUF_BYTES (64 * 1024)

enum { K_LOAD = 1, K_STORE = 2, K_MODIFY = 3 };

static char ring_dir[4096];
static char out_path[4096];
static file_t out_fd = INVALID_FILE;
static long reader_pid;
static drx_buf_t *buf;
static void *lock;
static uint64 icount;     /* updated inline at every block's entry */
static uint64 icount_put; /* the count at the last count word */

static volatile uint64 *ring;
static uint64 ring_published;
static uint64 ring_gates;
static bool lockstep;
static uint64 *slot_start, *slot_next, *slot_end;

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

static void put_icount(void)
{
    uint64 n = icount - icount_put;
    if (n != 0) {
        uint64 w[2] = { W_INSN, n };
        if (out_fd != INVALID_FILE) {
            out_write(w, 2);
        } else {
            slot_next[0] = w[0];
            slot_next[1] = w[1];
            slot_next += 2;
        }
        icount_put += n;
    }
}

static void ring_publish(bool ended)
{
    put_icount();
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
    /* The reader holds the FIFO open for reading: this open does not wait. */
    file_t cfd = dr_open_file(ctl, DR_FILE_WRITE_APPEND | DR_FILE_WRITE_ONLY);
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

static void full_cb(void *drcontext, void *base, size_t size)
{
    if (stopping)
        return;
    dr_mutex_lock(lock);
    if (ring != NULL || out_fd != INVALID_FILE)
        append((const uint64 *)base, size / sizeof(uint64));
    dr_mutex_unlock(lock);
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

/* Publishes everything so far (the caller's thread buffer included). */
static void publish_all(void *drcontext)
{
    flush_thread(drcontext);
    dr_mutex_lock(lock);
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

static void insert_ref(void *dc, instrlist_t *bb, instr_t *where, opnd_t ref, int kind)
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
    drx_buf_insert_buf_store(dc, buf, bb, where, rptr, DR_REG_NULL, opnd_create_reg(raddr), OPSZ_8, 0);
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

/* The references bb_insert writes for `inst` (a modify is one). */
static int refs_of(instr_t *inst)
{
    bool reads = instr_reads_memory(inst), writes = instr_writes_memory(inst);
    int n = 0;
    if (reads)
        for (int i = 0; i < instr_num_srcs(inst); i++)
            if (opnd_is_memory_reference(instr_get_src(inst, i)))
                n++;
    if (writes)
        for (int j = 0; j < instr_num_dsts(inst); j++) {
            opnd_t d = instr_get_dst(inst, j);
            if (opnd_is_memory_reference(d) && !(reads && also_read(inst, d)))
                n++;
        }
    return n;
}

/* The block's guest instructions. A rep-string instruction expanded
   into a loop (drutil_expand_rep_string) is a block of its own entered
   once per iteration, where valgrind (and DynamoRIO running it whole)
   counts one instruction for the whole repetition: such a block counts
   nothing, an undercount of one instruction per rep-string execution.
   The count word carries the instructions beyond one per reference: the
   reader's core advances one instruction at every reference of a stream
   without block tables, as for valgrind's tool with --blocks=no. */
static dr_emit_flags_t bb_analysis(void *dc, void *tag, instrlist_t *bb, bool for_trace, bool translating, void **user_data)
{
    int n = 0, refs = 0;
    app_pc last = NULL;
    bool expanded = false;
    for (instr_t *i = instrlist_first_app(bb); i != NULL; i = instr_get_next_app(i)) {
        app_pc pc = instr_get_app_pc(i);
        if (instr_is_label(i))
            continue;
        if (pc == last)
            expanded = true;
        else
            n++;
        last = pc;
        refs += refs_of(i);
    }
    n = expanded || refs >= n ? 0 : n - refs;
    *user_data = (void *)(ptr_uint_t)n;
    return DR_EMIT_DEFAULT;
}

static dr_emit_flags_t bb_insert(void *dc, void *tag, instrlist_t *bb, instr_t *inst, bool for_trace, bool translating, void *user_data)
{
    if (drmgr_is_first_instr(dc, inst)) {
        uint n = (uint)(ptr_uint_t)user_data;
        if (n > 0)
            drx_insert_counter_update(dc, bb, inst, SPILL_SLOT_MAX + 1, &icount, (int)n, DRX_COUNTER_64BIT);
    }
    if (!instr_is_app(inst))
        return DR_EMIT_DEFAULT;
    bool reads = instr_reads_memory(inst), writes = instr_writes_memory(inst);
    if (!reads && !writes)
        return DR_EMIT_DEFAULT;
    /* A memory operand both read and written (add [m], r) is one modify,
       as valgrind's tool writes it. */
    if (reads) {
        for (int i = 0; i < instr_num_srcs(inst); i++) {
            opnd_t s = instr_get_src(inst, i);
            if (!opnd_is_memory_reference(s))
                continue;
            bool modify = false;
            if (writes)
                for (int j = 0; j < instr_num_dsts(inst); j++)
                    if (opnd_same(s, instr_get_dst(inst, j)))
                        modify = true;
            insert_ref(dc, bb, inst, s, modify ? K_MODIFY : K_LOAD);
        }
    }
    if (writes) {
        for (int j = 0; j < instr_num_dsts(inst); j++) {
            opnd_t d = instr_get_dst(inst, j);
            if (opnd_is_memory_reference(d) && !(reads && also_read(inst, d)))
                insert_ref(dc, bb, inst, d, K_STORE);
        }
    }
    return DR_EMIT_DEFAULT;
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

/* A thread's system call under way. */
typedef struct {
    int sysno;
    uint64 arg[6];
    int n;
    krange_t r[MAX_KRANGES];
} call_t;

static int tls_call;

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
        for (int i = 0; i < c->n; i++) {
            uint64 first = c->r[i].a & ~63ULL, last = (c->r[i].a + c->r[i].len - 1) & ~63ULL;
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
    call_t *c = (call_t *)dr_thread_alloc(dc, sizeof(call_t));
    memset(c, 0, sizeof *c);
    drmgr_set_tls_field(dc, tls_call, c);
}

static void thread_exit(void *dc)
{
    call_t *c = (call_t *)drmgr_get_tls_field(dc, tls_call);
    if (c != NULL)
        dr_thread_free(dc, c, sizeof(call_t));
    drmgr_set_tls_field(dc, tls_call, NULL);
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

/* Of the fork or clone in progress (one at a time: the lock is not
   needed, a process forks from one thread at a time in practice). */
static bool forking, cloning;

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

/* The end of an --out stream: what is buffered, the count, the end word. */
static void out_end(void *dc)
{
    flush_thread(dc);
    dr_mutex_lock(lock);
    if (out_fd != INVALID_FILE) {
        uint64 w = W_END;
        put_icount();
        out_write(&w, 1);
        dr_close_file(out_fd);
        out_fd = INVALID_FILE;
    }
    dr_mutex_unlock(lock);
}

static bool pre_syscall(void *dc, int sysno)
{
    if (ring != NULL || out_fd != INVALID_FILE)
        call_begin(dc, sysno);
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
        publish_all(dc);
        return true;
    }
    if (sysno == SYS_fork || sysno == SYS_vfork || sysno == SYS_clone || sysno == 435) {
        uint64 flags = clone_flags(dc, sysno);
        forking = is_fork(dc, sysno, flags);
        cloning = true;
        if (forking) {
            vfork_as_fork(dc, sysno, flags);
            /* The parent's references so far precede the fork word. */
            publish_all(dc);
            return true;
        }
    }
    if (!is_local(sysno) && in_lockstep()) {
        publish_all(dc);
        __atomic_store_n(&ring[R_IN_CALL], 1, __ATOMIC_SEQ_CST);
    }
    return true;
}

static void post_syscall(void *dc, int sysno)
{
    if (ring == NULL && out_fd == INVALID_FILE)
        return;
    if (ring != NULL)
        __atomic_store_n(&ring[R_IN_CALL], 0, __ATOMIC_SEQ_CST);
    dr_syscall_result_info_t r = { sizeof r, };
    r.use_high = false;
    r.use_errno = false;
    bool got = dr_syscall_get_result_ex(dc, &r);
    call_end(dc, got ? (long)r.value : -1);
    if (ring == NULL || !cloning)
        return;
    cloning = false;
    if (!got || !r.succeeded || r.value == 0)
        return;
    flush_thread(dc);
    dr_mutex_lock(lock);
    if (forking) {
        uint64 w[2] = { W_FORK, (uint64)r.value };
        append(w, 2);
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
    cloning = false;
    icount_put = icount;
    drx_buf_set_buffer_ptr(dc, buf, drx_buf_get_buffer_base(dc, buf));
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
            uint64 w = W_END;
            put_icount();
            append(&w, 1);
            ring_publish(true);
            ring = NULL;
        }
        dr_mutex_unlock(lock);
    }
    drx_buf_free(buf);
    dr_mutex_destroy(lock);
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
        else {
            dr_fprintf(STDERR, "splabdr: unknown option %s (expected --ring=DIR, --reader=PID or --out=PATH)\n", argv[i]);
            dr_abort_with_code(2);
        }
    }
    if ((ring_dir[0] == '\0') == (out_path[0] == '\0')) {
        dr_fprintf(STDERR, "splabdr: one of --ring=DIR and --out=PATH is required\n");
        dr_abort_with_code(2);
    }
    drreg_options_t ops = { sizeof(ops), 3, false };
    if (!drmgr_init() || !drx_init() || !drutil_init() || drreg_init(&ops) != DRREG_SUCCESS) {
        dr_fprintf(STDERR, "splabdr: cannot initialise DynamoRIO's extensions\n");
        dr_abort_with_code(3);
    }
    lock = dr_mutex_create();
    buf = drx_buf_create_trace_buffer(BUF_BYTES, full_cb);
    tls_call = drmgr_register_tls_field();
    if (tls_call < 0) {
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
    drmgr_register_bb_app2app_event(bb_app2app, NULL);
    drmgr_register_bb_instrumentation_event(bb_analysis, bb_insert, NULL);
    if (out_path[0] != '\0') {
        /* The reader holds the FIFO open for reading. */
        out_fd = dr_open_file(out_path, DR_FILE_WRITE_APPEND | DR_FILE_WRITE_ONLY | DR_FILE_CLOSE_ON_FORK);
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
