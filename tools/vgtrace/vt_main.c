/* splabtrace: a valgrind tool that writes a program's memory references
   and address-space changes as a stream of fixed-width words, for
   `splab trace record` (crates/trace/src/vgraw.rs reads the stream and
   documents it; the two must agree).

   Speed is the point. Each load, store (and, with --ifetch=yes,
   instruction fetch) becomes a few inline IR statements that store one
   64-bit word into a large buffer; no helper is called per reference.
   At the start of every superblock one compare checks that the buffer has
   room for everything the block can write; if not, a guarded helper
   writes the buffer out and the block starts again at its beginning. The
   buffer pointer is stored back before every side exit and at the end.

   The word of a reference (little-endian u64):
     low byte: kind (bits 0-1: 0 fetch, 1 load, 2 store, 3 modify) |
               size code << 2 (bits 2-4)
     code < 7: size 1 << code, address = word >> 8 (arithmetic shift)
     code = 7: size = bits 8-15 + 1, address = word >> 16 (arithmetic)
   Canonical amd64 addresses are sign-extended from bit 47, so both
   shifts give them back exactly. After a system call returns come the
   kernel's accesses to the program's memory during it: a 64-byte load
   or store word for each line it read or wrote ("the kernel's accesses"
   below).
   Other words: 0x80 map (then start, length, prot | origin << 8 |
   name length << 16, the name padded to 8 bytes), 0x81 unmap (then start,
   length), 0xff nothing (a guarded access whose guard was false), 0xfe
   the end (the program exited), 0x82 instructions (then the number of
   guest instructions executed since the last such word), 0x83 fork (then
   the child's pid: the program forked a process that shares nothing with
   it but a copy of its memory), 0x84 references left out (then how many
   since the last such word), 0x85 the slot's mode (then 0 detail, 1
   warming), 0x89 a thread created (with --ring only: valgrind runs the
   program's threads one at a time in one stream, in an order the host's
   scheduling decides, so splab marks the run not deterministic), 0x8a a
   read or write that would have blocked (EAGAIN, with --ring only; bit 8
   set when the process ran in lockstep, where it happens at the same
   point on every run; without it, a process alone polls what comes from
   outside as often as the host's timing makes it, and splab marks the
   run), 0x8b a wait a timer ended (a sleep, or a poll or select that
   timed out, with --ring in lockstep only: it ends among the other
   processes' steps where the host says; splab marks the run). The
   stream starts with "SPLVT001".

   Sampling (--detail=N --period=N --filter-sets=S [--filter-line=B],
   with --ring only):
   each process's references are counted; at the first slot that starts
   at or past the start of a period a window opens, and its slots are in
   detail until N references have gone; the others are warming. Every
   slot begins with its mode word. While warming, a reference is
   left out (counted in the 0x84 words, not written) when a direct-mapped
   filter of S lines of B bytes (64 unless given) finds it: the last
   reference to the filter's set was to the same line and, for a store,
   wrote it. splab chooses B as the machine's cache line and S as the
   first-level data cache's sets, at most a page's lines, so such a
   reference would change no cache's replacement state
   (crates/trace/src/online/sample.rs says what stays approximate). The filter
   is emptied when warming starts and at every map, unmap and fork. Each
   filtered reference is a few more inline statements: the line, its
   filter entry, a compare, and the buffer pointer advanced by 0 or 8.

   Two ways out. --out=PATH writes the stream into a file or FIFO (the
   `splab trace record` path; a forked child writes nothing). --ring=DIR
   (for `splab sim -- PROG`, crates/trace/src/online/) writes it into
   shared memory: each process (the first, every forked child, every
   program a process execs, with --trace-children=yes) creates its own
   ring file DIR/r.PID.N, maps it shared and announces it with one line
   (one atomic write) on the FIFO DIR/ctl. The ring holds NSLOTS slots of
   SLOT_WORDS words; the tool fills one slot through the inline code,
   publishes it by advancing a counter in the ring's header and takes the
   next; when all slots are full it sleeps on a futex until the reader
   frees one. So the stream crosses with one counter update per slot (two
   megabytes), no copy and no system call per reference. Several
   processes run in lockstep, one at a time as the reader grants them
   (the ring header's comment below). The header is documented beside
   RING_* below; online/ring.rs must agree.

   Build: see crates/trace/build.rs (or tools/vgtrace/Makefile). */

#include "pub_tool_basics.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_options.h"
#include "pub_tool_machine.h"
#include "pub_tool_aspacemgr.h"
#include "pub_tool_vki.h"
#include "pub_tool_vkiscnums.h"

/* ---- options ---- */

static const HChar* opt_out = NULL;
static const HChar* opt_ring = NULL;
static Long opt_reader = 0;
static Bool opt_ifetch = False;
static Bool opt_icount = True;
static Bool opt_blocks = True;
static Long opt_detail = 0;
static Long opt_period = 0;
static Long opt_filter_sets = 0;
static Long opt_filter_line = 64;
static Int filter_shift = 6;         /* log2 of opt_filter_line */

static Bool vt_option(const HChar* arg)
{
   if VG_STR_CLO(arg, "--out", opt_out) {}
   else if VG_STR_CLO(arg, "--ring", opt_ring) {}
   else if VG_INT_CLO(arg, "--reader", opt_reader) {}
   else if VG_BOOL_CLO(arg, "--ifetch", opt_ifetch) {}
   else if VG_BOOL_CLO(arg, "--icount", opt_icount) {}
   else if VG_BOOL_CLO(arg, "--blocks", opt_blocks) {}
   else if VG_INT_CLO(arg, "--detail", opt_detail) {}
   else if VG_INT_CLO(arg, "--period", opt_period) {}
   else if VG_INT_CLO(arg, "--filter-sets", opt_filter_sets) {}
   else if VG_INT_CLO(arg, "--filter-line", opt_filter_line) {}
   else return False;
   return True;
}

static void vt_usage(void)
{
   VG_(printf)(
"    --out=PATH       where the reference stream goes (a file or FIFO) [none]\n"
"    --ring=DIR       write it into shared-memory rings announced on DIR/ctl\n"
"    --reader=PID     the process reading the rings (stop when it is gone)\n"
"    --ifetch=no|yes  record instruction fetches too [no]\n"
"    --icount=no|yes  count guest instructions between references [yes]\n"
"    --blocks=no|yes  each block's table, entry and exit words (instead of\n"
"                     counts of instructions) [yes]\n"
"    --detail=N --period=N --filter-sets=S  with --ring: sample (above) [off]\n"
"    --filter-line=B  the filter's line, bytes (a power of two, 16 to 4096) [64]\n");
}

/* Core functions the tool headers do not declare (libcoregrind has them). */
extern SysRes VG_(am_shared_mmap_file_float_valgrind)(SizeT length, UInt prot, Int fd, Off64T offset);
extern SysRes VG_(do_syscall)(UWord sysno, UWord a1, UWord a2, UWord a3, UWord a4, UWord a5, UWord a6, UWord a7, UWord a8);
#define SYSCALL4(n, a, b, c, d) VG_(do_syscall)((n), (UWord)(a), (UWord)(b), (UWord)(c), (UWord)(d), 0, 0, 0, 0)

static void vt_debug_usage(void) {}

/* ---- the buffer ---- */

#define BUF_WORDS (1u << 21)     /* 16 MiB, with --out */
/* Words kept free at the end of every buffer for the instruction count,
   the count of references left out and an event's words written when it
   is published. */
#define TAIL_WORDS 6

static ULong* buf_start;
static ULong* buf_next;          /* loaded and stored by the inline code */
static ULong* buf_end;           /* loaded by the inline code */
static ULong icount;             /* instructions since the last count word */
static Int out_fd = -1;
static Bool in_child = False;    /* with --out, a forked child writes nothing */
static ULong self_sent;          /* see "signals" below */

/* The ring's format and the words both front ends write; the valgrind
   tool's own words below. */
#include "ring_format.h"
#include "signals.h"
#define W_MAP   0x80ULL
#define W_UNMAP 0x81ULL
#define W_NOP   0xffULL

/* ---- the shared ring (--ring) ----
   The ring file: a header page of 64-bit words, then NSLOTS slots of
   SLOT_WORDS words.
     [0] magic "SPLRING2"   [1] NSLOTS   [2] SLOT_WORDS   [3] the pid
     [4] published: slots filled so far (the tool advances it)
     [5] consumed: slots the reader is done with (the reader advances it)
     [6] the tool sleeps on consumed (set before it waits)
     [7] ended: 1 once the end word is published
     [8] granted: the gates the tool may pass (the reader writes it; all
         ones: every gate, while the process is alone)
     [9] the gate the tool is at (gates passed on this ring before it)
     [10] 1 while the tool waits at that gate for the go-ahead
     [11] 1 while the process is in a system call it passed a gate for
     [16 + i] words in slot i (written before [4] moves past it)
   The futexes are the low halves of [4], [5], [8] and [10]
   (little-endian).

   Lockstep: a gate is a point in the process's own stream where it stops
   until the reader lets it go on: before every slot it fills and, once
   the process runs beside others, before every system call that can
   touch another process (each such gate publishes what came before).
   The reader grants one process at a time, and only when every other is
   at a gate or asleep in the kernel, so the real processes run one at a
   time in an order the reader takes from their streams alone
   (crates/trace/src/online/procs.rs says which). A process alone gets every
   gate at once and pays nothing; it runs in lockstep from its first
   fork on (parent and child), and a program exec'd into a process in
   lockstep is granted gate by gate from its first. */

static volatile ULong* ring;     /* the mapped ring file, or NULL */
static ULong ring_published;
static ULong ring_gates;         /* gates passed on this ring */
static Bool lockstep = False;    /* forked or a forked child: gate by gate */

/* ---- sampling ---- */
#define MAX_FILTER_SETS 4096
/* The bias the inline code xors into its probe: with FILTER_OFF no entry
   can match (a line key is below 2^59), so nothing is left out. */
#define FILTER_OFF (1ULL << 62)
static ULong filt[MAX_FILTER_SETS];   /* line << 1 | wrote, ~0 empty */
static ULong filt_bias = FILTER_OFF;  /* loaded by the inline code */
static ULong skipped;                 /* left out since the last 0x84 word */
static ULong seen;                    /* references so far (approximately) */
static Bool warming = False;
static ULong next_start;              /* where the next window may open */
static ULong detail_end;              /* where the open window ends */

static Bool sampling(void)
{
   return opt_period > 0 && opt_filter_sets > 0 && opt_ring != NULL;
}

static void filter_clear(void)
{
   if (sampling())
      VG_(memset)(filt, 0xff, sizeof filt);
}

enum { K_FETCH = 0, K_LOAD = 1, K_STORE = 2, K_MODIFY = 3 };
enum { O_UNKNOWN = 0, O_ANON = 1, O_FILE = 2, O_BRK = 3, O_STACK = 4, O_IMAGE = 5 };

static void ensure_buf(void)
{
   if (buf_start == NULL) {
      /* With --ring, the buffer before the ring is mapped (the startup
         events) is this one too; they are copied into the first slot. */
      buf_start = VG_(malloc)("splabtrace.buf", BUF_WORDS * sizeof(ULong));
      buf_next = buf_start;
      buf_end = buf_start + BUF_WORDS - TAIL_WORDS;
   }
}

static Bool reader_gone(void)
{
   if (opt_reader <= 0)
      return False;
   SysRes r = SYSCALL4(__NR_kill, opt_reader, 0, 0, 0);
   return sr_isError(r) && sr_Err(r) == VKI_ESRCH;
}

static ULong* slot_at(ULong n)
{
   return (ULong*)(ring + RING_HEADER) + (n % NSLOTS) * SLOT_WORDS;
}

/* Whether this process runs gate by gate (the header's comment). */
static Bool in_lockstep(void)
{
   return ring != NULL && (lockstep || __atomic_load_n(&ring[R_GRANTED], __ATOMIC_ACQUIRE) != ALL_GATES);
}

/* Waits at the next gate until the reader grants it. */
static void ring_gate(void)
{
   ULong g = ring_gates;
   for (;;) {
      ULong granted = __atomic_load_n(&ring[R_GRANTED], __ATOMIC_ACQUIRE);
      if (granted == ALL_GATES ? !lockstep : granted > g)
         break;
      ring[R_GATE] = g;
      __atomic_store_n(&ring[R_AT_GATE], 1, __ATOMIC_SEQ_CST);
      SYSCALL4(__NR_futex, &ring[R_AT_GATE], VKI_FUTEX_WAKE, 1, 0);
      if (__atomic_load_n(&ring[R_GRANTED], __ATOMIC_SEQ_CST) == granted) {
         struct vki_timespec ts = { 0, 100 * 1000 * 1000 };
         SYSCALL4(__NR_futex, &ring[R_GRANTED], VKI_FUTEX_WAIT, (UInt)granted, &ts);
      }
      if (reader_gone()) {
         VG_(umsg)("splabtrace: the reader of the reference stream is gone; stopping\n");
         VG_(exit)(3);
      }
   }
   __atomic_store_n(&ring[R_AT_GATE], 0, __ATOMIC_RELEASE);
   ring_gates++;
}

/* Waits until the reader has freed the slot `ring_published` will use,
   then at the gate before it. */
static void ring_take_slot(void)
{
   for (;;) {
      ULong consumed = __atomic_load_n(&ring[R_CONSUMED], __ATOMIC_ACQUIRE);
      if (ring_published - consumed < NSLOTS)
         break;
      __atomic_store_n(&ring[R_TOOL_WAITS], 1, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(&ring[R_CONSUMED], __ATOMIC_SEQ_CST) == consumed) {
         struct vki_timespec ts = { 0, 100 * 1000 * 1000 };
         SYSCALL4(__NR_futex, &ring[R_CONSUMED], VKI_FUTEX_WAIT, (UInt)consumed, &ts);
      }
      __atomic_store_n(&ring[R_TOOL_WAITS], 0, __ATOMIC_RELAXED);
      if (reader_gone()) {
         VG_(umsg)("splabtrace: the reader of the reference stream is gone; stopping\n");
         VG_(exit)(3);
      }
   }
   ring_gate();
   buf_start = slot_at(ring_published);
   buf_next = buf_start;
   buf_end = buf_start + SLOT_WORDS - TAIL_WORDS;
   if (sampling()) {
      /* A window opens at the first slot at or past the next period's
         start and stays open for --detail references. */
      if (seen >= detail_end && seen >= next_start) {
         detail_end = seen + (ULong)opt_detail;
         while (next_start <= seen)
            next_start += (ULong)opt_period;
      }
      Bool warm = seen >= detail_end;
      if (warm && !warming)
         filter_clear();
      warming = warm;
      filt_bias = warm ? 0 : FILTER_OFF;
      *buf_next++ = W_MODE;
      *buf_next++ = warm ? 1 : 0;
   }
}

static void ring_publish(Bool ended)
{
   ULong n = buf_next - buf_start;
   seen += n;
   ring[R_LENS + ring_published % NSLOTS] = n;
   ring_published++;
   if (ended)
      ring[R_ENDED] = 1;
   __atomic_store_n(&ring[R_PUBLISHED], ring_published, __ATOMIC_RELEASE);
}

/* Creates DIR/r.PID.N, maps it, and announces it on DIR/ctl with `how`
   ('S' a new program, 'F' a forked child). Startup events already in the
   private buffer move into the first slot. */
static void ring_open(HChar how)
{
   Int pid = VG_(getpid)();
   SizeT bytes = (RING_HEADER + (SizeT)NSLOTS * SLOT_WORDS) * sizeof(ULong);
   HChar path[4096];
   Int fd = -1, n = 0;
   for (n = 0; n < 1000 && fd < 0; n++) {
      VG_(snprintf)(path, sizeof path, "%s/r.%d.%d", opt_ring, pid, n);
      fd = VG_(fd_open)(path, VKI_O_RDWR | VKI_O_CREAT | VKI_O_EXCL, 0600);
   }
   n--;
   if (fd < 0) {
      VG_(umsg)("splabtrace: cannot create a ring in %s\n", opt_ring);
      VG_(exit)(3);
   }
   SysRes r = SYSCALL4(__NR_ftruncate, fd, bytes, 0, 0);
   if (sr_isError(r)) {
      VG_(umsg)("splabtrace: cannot size the ring %s\n", path);
      VG_(exit)(3);
   }
   r = VG_(am_shared_mmap_file_float_valgrind)(bytes, VKI_PROT_READ | VKI_PROT_WRITE, fd, 0);
   VG_(close)(fd);
   if (sr_isError(r)) {
      VG_(umsg)("splabtrace: cannot map the ring %s\n", path);
      VG_(exit)(3);
   }
   ULong* old_start = buf_start;
   ULong* old_next = buf_next;
   ring = (volatile ULong*)sr_Res(r);
   ring[1] = NSLOTS;
   ring[2] = SLOT_WORDS;
   ring[3] = pid;
   ring_published = 0;
   ring_gates = 0;
   ring[0] = RING_MAGIC;
   HChar ctl[4096], line[64];
   VG_(snprintf)(ctl, sizeof ctl, "%s/ctl", opt_ring);
   /* Non-blocking: with no reader (splab gone) the open fails at once
      instead of waiting for one forever. */
   Int cfd = VG_(fd_open)(ctl, VKI_O_WRONLY | VKI_O_NONBLOCK, 0);
   if (cfd < 0) {
      VG_(umsg)("splabtrace: cannot open %s (the reader is gone?); stopping\n", ctl);
      VG_(exit)(3);
   }
   /* A fixed-width line: one write below PIPE_BUF is atomic among the
      processes that share the FIFO. */
   VG_(memset)(line, ' ', sizeof line);
   Int len = VG_(snprintf)(line, sizeof line, "%c %d %d %d", how, pid, VG_(getppid)(), n);
   line[len] = ' ';
   line[sizeof line - 1] = '\n';
   VG_(write)(cfd, line, sizeof line);
   VG_(close)(cfd);
   /* Announced before the first gate: the reader grants it. */
   ring_take_slot();
   if (old_start != NULL && how == 'S') {
      SizeT k = old_next - old_start;
      VG_(memcpy)(buf_next, old_start, k * sizeof(ULong));
      buf_next += k;
   }
}

static void write_all(const UChar* p, SizeT n)
{
   while (n > 0 && out_fd >= 0) {
      Int chunk = n > (1u << 30) ? (1 << 30) : (Int)n;
      Int w = VG_(write)(out_fd, p, chunk);
      if (w <= 0) {
         VG_(umsg)("splabtrace: cannot write the reference stream (the reader is gone?); stopping\n");
         VG_(exit)(3);
      }
      p += w;
      n -= w;
   }
}

/* The instructions counted since the last count word, as a count word
   (TAIL_WORDS keeps room for it). */
static void put_icount(void)
{
   if (icount != 0) {
      buf_next[0] = W_INSN;
      buf_next[1] = icount;
      buf_next += 2;
      icount = 0;
   }
}

/* The references left out since the last count (TAIL_WORDS keeps room). */
static void put_skipped(void)
{
   if (skipped != 0) {
      buf_next[0] = W_SKIP;
      buf_next[1] = skipped;
      buf_next += 2;
      seen += skipped;
      skipped = 0;
   }
}

/* Called by the inline code (guarded) and by the event hooks. */
static void vt_flush(void)
{
   if (ring != NULL) {
      put_icount();
      put_skipped();
      ring_publish(False);
      ring_take_slot();
      return;
   }
   if (!in_child && out_fd >= 0) {
      put_icount();
      write_all((const UChar*)buf_start, (UChar*)buf_next - (UChar*)buf_start);
   }
   icount = 0;
   buf_next = buf_start;
}

static void room_for(SizeT words)
{
   ensure_buf();
   if (buf_next + words > buf_end)
      vt_flush();
}

static void put(ULong w) { *buf_next++ = w; }

/* ---- address-space events ---- */

static void put_map(Addr a, SizeT len, Bool r, Bool w, Bool x, UInt origin, const HChar* name)
{
   SizeT nlen = name ? VG_(strlen)(name) : 0;
   if (nlen > 4096)
      nlen = 4096;
   SizeT nwords = (nlen + 7) / 8;
   if (len == 0)
      return;
   filter_clear();
   room_for(4 + nwords);
   put(W_MAP);
   put(a);
   put(len);
   put((r ? 1 : 0) | (w ? 2 : 0) | (x ? 4 : 0) | ((ULong)origin << 8) | ((ULong)nlen << 16));
   if (nwords > 0) {
      buf_next[nwords - 1] = 0;
      VG_(memcpy)(buf_next, name, nlen);
      buf_next += nwords;
   }
}

static void put_unmap(Addr a, SizeT len)
{
   if (len == 0)
      return;
   filter_clear();
   room_for(3);
   put(W_UNMAP);
   put(a);
   put(len);
}

/* The name and origin of the client segment at `a`. */
static void describe(Addr a, Bool startup, UInt* origin, const HChar** name)
{
   const NSegment* s = VG_(am_find_nsegment)(a);
   *origin = O_ANON;
   *name = NULL;
   if (s == NULL)
      return;
   if (s->kind == SkFileC) {
      *origin = startup ? O_IMAGE : O_FILE;
      *name = VG_(am_get_filename)(s);
   } else if (s->isCH) {
      *origin = O_BRK;
      *name = "[heap]";
   } else if (startup && s->start > 0) {
      /* The client stack: an anonymous segment with its growth
         reservation just below it. */
      const NSegment* below = VG_(am_find_nsegment)(s->start - 1);
      if (below != NULL && below->kind == SkResvn) {
         *origin = O_STACK;
         *name = "[stack]";
      }
   }
}

static void vt_startup(Addr a, SizeT len, Bool r, Bool w, Bool x, ULong di)
{
   UInt origin;
   const HChar* name;
   /* valgrind also announces pieces of its own memory the client may
      touch (the signal-return trampoline in the tool's text); they are
      not the program's layout; nor is a piece smaller than a page. */
   const NSegment* s = VG_(am_find_nsegment)(a);
   if (s == NULL || !(s->kind == SkAnonC || s->kind == SkFileC || s->kind == SkShmC))
      return;
   if ((a & (VKI_PAGE_SIZE - 1)) != 0 || (len & (VKI_PAGE_SIZE - 1)) != 0)
      return;
   /* The trampoline's page is a client mapping of the tool's own file. */
   const NSegment* tool = VG_(am_find_nsegment)((Addr)&vt_startup);
   if (s->kind == SkFileC && tool != NULL && tool->dev == s->dev && tool->ino == s->ino)
      return;
   describe(a, True, &origin, &name);
   put_map(a, len, r, w, x, origin, name);
}

static void vt_mmap(Addr a, SizeT len, Bool r, Bool w, Bool x, ULong di)
{
   UInt origin;
   const HChar* name;
   describe(a, False, &origin, &name);
   put_map(a, len, r, w, x, origin, name);
}

static void vt_brk_grow(Addr a, SizeT len, ThreadId tid)
{
   put_map(a, len, True, True, False, O_BRK, "[heap]");
}

static void vt_remap(Addr from, Addr to, SizeT len)
{
   if (from == to)
      return;
   const NSegment* s = VG_(am_find_nsegment)(to);
   UInt origin;
   const HChar* name;
   describe(to, False, &origin, &name);
   put_map(to, len, s ? s->hasR : True, s ? s->hasW : True, s ? s->hasX : False, origin, name);
}

static void vt_unmap(Addr a, SizeT len)
{
   put_unmap(a, len);
}

/* The ranges of the program's memory the kernel reads and writes in the
   system call under way ("the kernel's accesses" below). */
typedef struct { Addr a; SizeT len; Int kind; } KRange;
static KRange* kranges;
static SizeT nkranges, kranges_cap;

/* Before a fork: everything so far goes out, so that the reader sees the
   parent's references before the fork word (written after the fork, with
   the child's pid, by vt_post_syscall). */
static void vt_pre_fork(ThreadId tid)
{
   if (ring != NULL)
      vt_flush();
}

static void vt_child(ThreadId tid)
{
   /* What the kernel read for the fork itself is the parent's. */
   nkranges = 0;
   if (ring != NULL) {
      /* The parent's ring stays the parent's: the child writes its own,
         in lockstep from its first gate. */
      ring = NULL;
      lockstep = True;
      /* A child starts with no signal pending. */
      self_sent = 0;
      buf_start = NULL;
      icount = 0;
      skipped = 0;
      seen = 0;
      next_start = detail_end = 0;
      warming = False;
      filter_clear();
      ensure_buf();
      ring_open('F');
      return;
   }
   in_child = True;
   out_fd = -1;
}

static Bool is_fork(UInt sysno, UWord* args)
{
   if (sysno == __NR_fork || sysno == __NR_vfork)
      return True;
   /* clone without a shared address space (valgrind runs a vfork-style
      clone as a fork); clone3 takes its flags in a structure. */
   if (sysno == __NR_clone)
      return (args[0] & VKI_CLONE_VM) == 0 || (args[0] & VKI_CLONE_VFORK) != 0;
   if (sysno == 435 && args[0] != 0) {
      ULong flags = *(ULong*)args[0];
      return (flags & VKI_CLONE_VM) == 0 || (flags & VKI_CLONE_VFORK) != 0;
   }
   return False;
}

/* System calls that touch nothing outside the process: no gate before
   them in lockstep. */
static Bool is_local(UInt sysno)
{
   switch (sysno) {
#define LOCAL_SYSCALL(name) case __NR_##name:
#include "local_syscalls.h"
#undef LOCAL_SYSCALL
      case 334: /* rseq */
         return True;
      default:
         return False;
   }
}

/* ---- signals ----
   A signal the program's own instructions raise (a fault, SIGPIPE from
   its write, a signal it sends itself) is delivered at the same point of
   its stream on every run. valgrind runs client code with signals
   blocked and lets them in during blocking system calls and at its
   scheduler's polls (every timeslice of blocks, after some calls). One
   from another process that arrives during a gated call (the others ran
   meanwhile, in the model's order) is delivered as that call ends, the
   same on every run; one that arrives while the program runs waits for
   the next poll, and which poll that is is the host's timing, as it is
   for a timer's (SIGALRM, SIGVTALRM, SIGPROF). Those write a W_SIGNAL
   word, and the reader says the run is not deterministic (the DynamoRIO
   client does the same, crates/drclient/client/ring.c). */

#define SIG_THREADS 512
/* Per thread: whether its last system call let the other processes run
   (it was gated), and then where it returned to (`sig_at_call`). */
static Addr after_call[SIG_THREADS];
static Bool waited_call[SIG_THREADS];
/* self_sent (above): signals the process sent itself and that were not
   delivered yet, bit n - 1 for signal n (one it sent itself and ignored
   stays marked). */

static void note_self_signal(ThreadId tid, UInt sysno, UWord* args)
{
   self_sent |= sig_bit(sig_sent_to_self(sysno, (Long)args[0], (Long)args[1], (Long)args[2], VG_(getpid)(), VG_(gettid)()));
}

static Bool from_own_instructions(Int sig)
{
   ULong bit = sig_bit(sig);
   Bool own = sig_own_kind(sig) || (self_sent & bit) != 0;
   self_sent &= ~bit;
   return own;
}

static void vt_pre_deliver(ThreadId tid, Int sig, Bool alt_stack)
{
   if (ring == NULL || from_own_instructions(sig))
      return;
   if (!sig_timer(sig) && tid < SIG_THREADS && waited_call[tid] && sig_at_call(VG_(get_IP)(tid), after_call[tid]))
      return;
   room_for(1);
   put(W_SIGNAL | (ULong)sig << 8);
}

static void vt_pre_syscall(ThreadId tid, UInt sysno, UWord* args, UInt nargs)
{
   if (ring != NULL)
      note_self_signal(tid, sysno, args);
   /* An exec replaces this tool instance without calling vt_fini: what is
      buffered goes out now; the new program's instance announces itself
      with the same pid. In lockstep every call that can touch another
      process waits at a gate first (the ring header's comment). */
   if (ring != NULL && (sysno == __NR_execve || sysno == __NR_execveat)) {
      vt_flush();
      return;
   }
   if (ring != NULL && !is_local(sysno) && in_lockstep()) {
      vt_flush();
      __atomic_store_n(&ring[R_IN_CALL], 1, __ATOMIC_SEQ_CST);
   }
}

/* A clone that shares the address space and is no vfork: a thread. */
static Bool is_thread(UInt sysno, UWord* args)
{
   if (sysno == __NR_clone)
      return (args[0] & VKI_CLONE_VM) != 0 && (args[0] & VKI_CLONE_VFORK) == 0;
   if (sysno == 435 && args[0] != 0) {
      ULong flags = *(ULong*)args[0];
      return (flags & VKI_CLONE_VM) != 0 && (flags & VKI_CLONE_VFORK) == 0;
   }
   return False;
}

/* ---- the kernel's accesses to the program's memory ----
   A system call's copies into the program's memory (read, pread,
   recvmsg, getdents, stat and the like fill its buffers) and out of it
   (write, a path's string, a structure passed by pointer) touch the
   program's pages as its own stores and loads would: they fault pages
   in, fill reservations and go through the TLB and caches. valgrind
   names each such range (before the call for what the kernel reads,
   after it for what it wrote); the tool keeps them and writes them when
   the call has returned (vt_post_syscall: writing can wait at a gate,
   which must not happen inside the call), in the call's order, as one
   64-byte reference a line, outside any block. */

static void keep_krange(Addr a, SizeT len, Int kind)
{
   if (len == 0 || (ring == NULL && out_fd < 0))
      return;
   if (nkranges == kranges_cap) {
      kranges_cap = kranges_cap ? 2 * kranges_cap : 16;
      kranges = VG_(realloc)("splabtrace.kranges", kranges, kranges_cap * sizeof(KRange));
   }
   kranges[nkranges++] = (KRange){ a, len, kind };
}

static void vt_kernel_read(CorePart part, ThreadId tid, const HChar* s, Addr a, SizeT len)
{
   if (part == Vg_CoreSysCall || part == Vg_CoreSysCallArgInMem)
      keep_krange(a, len, K_LOAD);
}

static void vt_kernel_read_string(CorePart part, ThreadId tid, const HChar* s, Addr a)
{
   if (part == Vg_CoreSysCall)
      keep_krange(a, VG_(strlen)((const HChar*)a) + 1, K_LOAD);
}

static void vt_kernel_write(CorePart part, ThreadId tid, Addr a, SizeT len)
{
   if (part == Vg_CoreSysCall)
      keep_krange(a, len, K_STORE);
}

/* The kept ranges, a reference word a line (size code 6: 64 bytes). */
static void put_kernel_refs(void)
{
   for (SizeT i = 0; i < nkranges; i++) {
      Addr first = kranges[i].a & ~(Addr)63;
      Addr last = (kranges[i].a + kranges[i].len - 1) & ~(Addr)63;
      for (Addr l = first;; l += 64) {
         room_for(1);
         put((ULong)l << 8 | (ULong)(kranges[i].kind | 6 << 2));
         if (l == last)
            break;
      }
   }
   if (nkranges > 0)
      filter_clear();
   nkranges = 0;
}

/* Linux's EAGAIN (asm-generic/errno-base.h). */
#define LINUX_EAGAIN 11

/* A wait that can end on a timer: nanosleep, or a poll, select or
   epoll_wait given a timeout that returned nothing. */
static Bool timed_out(UInt sysno, UWord* args, SysRes res)
{
   if (sysno == __NR_nanosleep || sysno == __NR_clock_nanosleep)
      return True;
   if (sr_isError(res) || sr_Res(res) != 0)
      return False;
   switch (sysno) {
      case __NR_poll: return (Int)args[2] > 0;
      case __NR_epoll_wait: case __NR_epoll_pwait: return (Int)args[3] > 0;
      case __NR_ppoll: return args[2] != 0;
      case __NR_select: case __NR_pselect6: return args[4] != 0;
      default: return False;
   }
}

static void vt_post_syscall(ThreadId tid, UInt sysno, UWord* args, UInt nargs, SysRes res)
{
   if (ring != NULL)
      __atomic_store_n(&ring[R_IN_CALL], 0, __ATOMIC_SEQ_CST);
   if (ring != NULL && tid < SIG_THREADS) {
      waited_call[tid] = !is_local(sysno) && in_lockstep();
      after_call[tid] = waited_call[tid] ? VG_(get_IP)(tid) : 0;
   }
   put_kernel_refs();
   if (ring != NULL && sr_isError(res) && sr_Err(res) == LINUX_EAGAIN
       && (sysno == __NR_read || sysno == __NR_readv || sysno == __NR_write || sysno == __NR_writev)) {
      room_for(1);
      put(W_AGAIN | (in_lockstep() ? AGAIN_IN_LOCKSTEP : 0));
      return;
   }
   if (ring != NULL && in_lockstep() && timed_out(sysno, args, res)) {
      room_for(1);
      put(W_TIMED);
      return;
   }
   if (ring == NULL || sr_isError(res) || sr_Res(res) == 0)
      return;
   if (is_thread(sysno, args)) {
      room_for(1);
      put(W_THREAD);
      return;
   }
   if (!is_fork(sysno, args))
      return;
   filter_clear();
   room_for(2);
   put(W_FORK);
   put(sr_Res(res));
   /* The child's stream must not wait for the parent's next slot; from
      here on the parent runs gate by gate too. */
   lockstep = True;
   vt_flush();
}

/* ---- the block table ----
   Every superblock the tool instruments gets an id and a table, written
   into the stream once, before any word that names it (W_BLOCK, then the
   table's words; crates/trace/src/block.rs reads them). At run time the
   block's first word says it was entered (W_ENTER | id << 8) and a side
   exit taken writes W_EXIT | k << 8 (k the exit's index): the simulator's
   core places each reference in its block and knows every branch's
   outcome. The table is the block's dataflow as the interval core needs
   it: for each reference (in the order the stream has them), each side
   exit's condition and each guest register the block writes, the
   sources it depends on: a register as the block found it (its guest
   state offset / 8, REG_SLOTS of them), a value a reference of the block
   loaded, or nothing but the instruction's dispatch; and the operations
   on the longest path from each, counted by class (alu, mul, div,
   fp_add, fp_mul, fp_div). Its words, after the header word
   W_BLOCK | n << 8 (n the words that follow):
     id; the first instruction's address;
     instructions | refs << 16 | side exits << 32 | writes << 48;
     code lines | inner calls << 16 | end kind << 32 | end sources << 40;
     the last instruction's address; a call's return address (or 0);
     per reference: instruction | kind << 16 | address sources << 24 |
       data sources << 32;
     per side exit: its instruction's address, then instruction |
       condition sources << 16 | branch << 24 (1 a conditional branch);
     per write: slot | instruction << 8 | side exits before << 24 |
       sources << 32;
     per inner call (a call valgrind followed into its callee within the
       block): instruction, return address;
     per code line: (line address >> 6) << 16 | first instruction;
     then every source in that order: slot or FROM_REF + reference or
       FROM_DISPATCH, | counts << 16 (a byte a class).
   End kinds: 0 a jump or fall-through, 1 a call, 2 an indirect call,
   3 a return, 4 an indirect jump. */

#include "block_deps.h"

#define REG_SLOTS 128

static Int op_class(IROp op)
{
   switch (op) {
      case Iop_Mul8: case Iop_Mul16: case Iop_Mul32: case Iop_Mul64:
      case Iop_MullS8: case Iop_MullS16: case Iop_MullS32: case Iop_MullS64:
      case Iop_MullU8: case Iop_MullU16: case Iop_MullU32: case Iop_MullU64:
         return C_MUL;
      case Iop_DivU32: case Iop_DivS32: case Iop_DivU64: case Iop_DivS64:
      case Iop_DivU32E: case Iop_DivS32E: case Iop_DivU64E: case Iop_DivS64E:
      case Iop_DivModU64to32: case Iop_DivModS64to32: case Iop_DivModU128to64: case Iop_DivModS128to64:
      case Iop_DivModS64to64: case Iop_DivModU64to64: case Iop_DivModS32to32: case Iop_DivModU32to32:
         return C_DIV;
      case Iop_AddF64: case Iop_SubF64: case Iop_AddF32: case Iop_SubF32:
      case Iop_AddF64r32: case Iop_SubF64r32:
      case Iop_Add32Fx4: case Iop_Sub32Fx4: case Iop_Add32F0x4: case Iop_Sub32F0x4:
      case Iop_Add64Fx2: case Iop_Sub64Fx2: case Iop_Add64F0x2: case Iop_Sub64F0x2:
      case Iop_Add64Fx4: case Iop_Sub64Fx4: case Iop_Add32Fx8: case Iop_Sub32Fx8:
      case Iop_F64toI64S: case Iop_I64StoF64: case Iop_F64toI32S: case Iop_I32StoF64:
         return C_FADD;
      case Iop_MulF64: case Iop_MulF32: case Iop_MulF64r32:
      case Iop_Mul32Fx4: case Iop_Mul32F0x4: case Iop_Mul64Fx2: case Iop_Mul64F0x2:
      case Iop_Mul64Fx4: case Iop_Mul32Fx8:
      case Iop_MAddF64: case Iop_MSubF64: case Iop_MAddF32: case Iop_MSubF32:
         return C_FMUL;
      case Iop_DivF64: case Iop_DivF32: case Iop_DivF64r32:
      case Iop_Div32Fx4: case Iop_Div32F0x4: case Iop_Div64Fx2: case Iop_Div64F0x2:
      case Iop_Div64Fx4: case Iop_Div32Fx8:
      case Iop_SqrtF64: case Iop_SqrtF32: case Iop_Sqrt64Fx2: case Iop_Sqrt64F0x2: case Iop_Sqrt32Fx4: case Iop_Sqrt32F0x4:
         return C_FDIV;
      /* Register views: widening, narrowing, halves, reinterpretation. */
      case Iop_8Uto16: case Iop_8Uto32: case Iop_8Uto64: case Iop_16Uto32: case Iop_16Uto64: case Iop_32Uto64:
      case Iop_8Sto16: case Iop_8Sto32: case Iop_8Sto64: case Iop_16Sto32: case Iop_16Sto64: case Iop_32Sto64:
      case Iop_64to8: case Iop_32to8: case Iop_64to16: case Iop_16to8: case Iop_32to16: case Iop_64to32:
      case Iop_16HIto8: case Iop_32HIto16: case Iop_64HIto32: case Iop_128to64: case Iop_128HIto64:
      case Iop_8HLto16: case Iop_16HLto32: case Iop_32HLto64: case Iop_64HLto128:
      case Iop_32to1: case Iop_64to1: case Iop_1Uto8: case Iop_1Uto32: case Iop_1Uto64:
      case Iop_ReinterpF64asI64: case Iop_ReinterpI64asF64: case Iop_ReinterpF32asI32: case Iop_ReinterpI32asF32:
      case Iop_V128to64: case Iop_V128HIto64: case Iop_64HLtoV128: case Iop_64UtoV128: case Iop_32UtoV128:
      case Iop_V128to32: case Iop_SetV128lo64: case Iop_V256toV128_0: case Iop_V256toV128_1: case Iop_V128HLtoV256:
         return C_FREE;
      default:
         return C_ALU;
   }
}

static Int slot_of(Int offset)
{
   Int s = offset / 8;
   return s < REG_SLOTS - 1 ? s : REG_SLOTS - 1;
}

/* The table being built for one superblock. */
#define MAX_TREFS 512
#define MAX_TEXITS 64
#define MAX_TPUTS 256
#define MAX_TCALLS 16
#define MAX_TLINES 64
typedef struct {
   Deps* tmp;                 /* per IRTemp */
   Deps reg[REG_SLOTS];       /* what each slot holds now */
   Int insn;                  /* the current instruction (-1 before the first) */
   Addr insn_addr;
   Int insn_len;
   Addr first_addr;
   ULong id;
   Int nrefs, nexits, nputs, ncalls, nlines;
   ULong ref_word[MAX_TREFS];
   Deps ref_addr[MAX_TREFS], ref_data[MAX_TREFS];
   ULong exit_pc[MAX_TEXITS], exit_word[MAX_TEXITS];
   Deps exit_cond[MAX_TEXITS];
   Int put_slot[MAX_TPUTS], put_insn[MAX_TPUTS], put_exits[MAX_TPUTS];
   Deps put_deps[MAX_TPUTS];
   ULong call_insn[MAX_TCALLS], call_ret[MAX_TCALLS];
   ULong line[MAX_TLINES];
   Addr last_line;
   /* The reference being emitted now: its sources. */
   Deps cur_addr, cur_data;
   Bool overflow;
} Table;

static Table* tb;             /* one, reused: instrumentation is single-threaded */
static ULong next_block_id;

static void deps_of(const IRExpr* e, Deps* out);

static void deps_of_atom(const IRExpr* e, Deps* out)
{
   if (e == NULL)
      return;
   if (e->tag == Iex_RdTmp)
      deps_union(out, &tb->tmp[e->Iex.RdTmp.tmp]);
   /* A constant adds nothing: it is there at dispatch. */
}

static void deps_of(const IRExpr* e, Deps* out)
{
   out->n = 0;
   if (e == NULL)
      return;
   switch (e->tag) {
      case Iex_RdTmp:
      case Iex_Const:
         deps_of_atom(e, out);
         break;
      case Iex_Get:
         *out = tb->reg[slot_of(e->Iex.Get.offset)];
         break;
      case Iex_GetI:
         *out = tb->reg[REG_SLOTS - 1];
         deps_of_atom(e->Iex.GetI.ix, out);
         break;
      case Iex_Unop:
         deps_of_atom(e->Iex.Unop.arg, out);
         deps_op(out, op_class(e->Iex.Unop.op));
         break;
      case Iex_Binop:
         deps_of_atom(e->Iex.Binop.arg1, out);
         deps_of_atom(e->Iex.Binop.arg2, out);
         deps_op(out, op_class(e->Iex.Binop.op));
         break;
      case Iex_Triop:
         deps_of_atom(e->Iex.Triop.details->arg2, out);
         deps_of_atom(e->Iex.Triop.details->arg3, out);
         deps_op(out, op_class(e->Iex.Triop.details->op));
         break;
      case Iex_Qop:
         deps_of_atom(e->Iex.Qop.details->arg2, out);
         deps_of_atom(e->Iex.Qop.details->arg3, out);
         deps_of_atom(e->Iex.Qop.details->arg4, out);
         deps_op(out, op_class(e->Iex.Qop.details->op));
         break;
      case Iex_ITE:
         deps_of_atom(e->Iex.ITE.cond, out);
         deps_of_atom(e->Iex.ITE.iftrue, out);
         deps_of_atom(e->Iex.ITE.iffalse, out);
         deps_op(out, C_ALU);
         break;
      case Iex_CCall:
         for (Int i = 0; e->Iex.CCall.args[i] != NULL; i++)
            deps_of_atom(e->Iex.CCall.args[i], out);
         deps_op(out, C_ALU);
         break;
      default:
         break;
   }
}

static void table_start(IRSB* in)
{
   if (tb == NULL)
      tb = VG_(malloc)("splabtrace.table", sizeof(Table));
   Int temps = in->tyenv->types_used;
   tb->tmp = VG_(calloc)("splabtrace.tmpdeps", temps > 0 ? temps : 1, sizeof(Deps));
   static const UChar none[NCLS] = { 0 };
   for (Int s = 0; s < REG_SLOTS; s++) {
      tb->reg[s].n = 0;
      deps_add(&tb->reg[s], (UShort)s, none);
   }
   tb->insn = -1;
   tb->insn_addr = 0;
   tb->insn_len = 0;
   tb->nrefs = tb->nexits = tb->nputs = tb->ncalls = tb->nlines = 0;
   tb->last_line = (Addr)-1;
   tb->first_addr = 0;
   tb->cur_addr.n = tb->cur_data.n = 0;
   tb->overflow = False;
   tb->id = next_block_id++;
}

/* One word the stream will carry for this block, a reference of `kind`
   with the sources set in cur_addr and cur_data. */
static void table_ref(Int kind)
{
   if (tb->nrefs >= MAX_TREFS) {
      tb->overflow = True;
      return;
   }
   Int i = tb->nrefs++;
   tb->ref_word[i] = (ULong)(tb->insn < 0 ? 0 : tb->insn) | (ULong)kind << 16;
   tb->ref_addr[i] = tb->cur_addr;
   tb->ref_data[i] = kind == K_LOAD ? (Deps){ .n = 0 } : tb->cur_data;
}

static void table_imark(Addr a, Int len)
{
   if (tb->insn < 0)
      tb->first_addr = a;
   tb->insn++;
   tb->insn_addr = a;
   tb->insn_len = len;
   for (Addr l = a >> 6; len > 0 && l <= (a + len - 1) >> 6; l++) {
      if (l == tb->last_line)
         continue;
      tb->last_line = l;
      if (tb->nlines < MAX_TLINES)
         tb->line[tb->nlines++] = (ULong)l << 16 | (ULong)tb->insn;
   }
}

static void table_put(Int offset, const IRExpr* data)
{
   Int s = slot_of(offset);
   Deps d;
   deps_of(data, &d);
   tb->reg[s] = d;
   /* The instruction pointer, the flag thunk's operation and its extra
      operand, and the direction flag are written all the time and feed no
      address or condition the core times: left out (amd64 offsets). */
   if (offset == 144 || (offset >= 168 && offset < 192))
      return;
   /* A later write to the slot with no exit between replaces this one. */
   for (Int i = tb->nputs - 1; i >= 0 && tb->put_exits[i] == tb->nexits; i--) {
      if (tb->put_slot[i] == s) {
         tb->put_insn[i] = tb->insn < 0 ? 0 : tb->insn;
         tb->put_deps[i] = d;
         return;
      }
   }
   if (tb->nputs >= MAX_TPUTS) {
      tb->overflow = True;
      return;
   }
   Int i = tb->nputs++;
   tb->put_slot[i] = s;
   tb->put_insn[i] = tb->insn < 0 ? 0 : tb->insn;
   tb->put_exits[i] = tb->nexits;
   tb->put_deps[i] = d;
}

/* What a statement does to the dataflow, before its words are emitted:
   a temporary's sources, a register written; the sources of the
   reference it makes go to cur_addr and cur_data. */
static void table_stmt(IRStmt* st, Bool pending)
{
   /* A load's value is the word the stream gives it next: after the
      load still pending, if there is one. */
   UShort next_ref = (UShort)(FROM_REF + tb->nrefs + (pending ? 1 : 0));
   static const UChar none[NCLS] = { 0 };
   switch (st->tag) {
      case Ist_IMark:
         table_imark((Addr)st->Ist.IMark.addr, st->Ist.IMark.len);
         break;
      case Ist_AbiHint:
         /* A call valgrind followed into its callee: its return address
            goes on the return stack where the block gets that far. */
         if (st->Ist.AbiHint.nia->tag == Iex_Const && tb->ncalls < MAX_TCALLS && tb->insn >= 0) {
            tb->call_insn[tb->ncalls] = tb->insn;
            tb->call_ret[tb->ncalls] = tb->insn_addr + tb->insn_len;
            tb->ncalls++;
         }
         break;
      case Ist_Put:
         table_put(st->Ist.Put.offset, st->Ist.Put.data);
         break;
      case Ist_PutI: {
         Deps d;
         deps_of(st->Ist.PutI.details->data, &d);
         tb->reg[REG_SLOTS - 1] = d;
         break;
      }
      case Ist_WrTmp: {
         IRTemp t = st->Ist.WrTmp.tmp;
         IRExpr* e = st->Ist.WrTmp.data;
         if (e->tag == Iex_Load) {
            deps_of(e->Iex.Load.addr, &tb->cur_addr);
            tb->cur_data.n = 0;
            tb->tmp[t].n = 0;
            /* Its value: the word the stream gives it next. */
            deps_add(&tb->tmp[t], next_ref, none);
         } else {
            deps_of(e, &tb->tmp[t]);
         }
         break;
      }
      case Ist_Store:
         deps_of(st->Ist.Store.addr, &tb->cur_addr);
         deps_of(st->Ist.Store.data, &tb->cur_data);
         break;
      case Ist_StoreG:
         deps_of(st->Ist.StoreG.details->addr, &tb->cur_addr);
         deps_of(st->Ist.StoreG.details->data, &tb->cur_data);
         break;
      case Ist_LoadG: {
         IRLoadG* g = st->Ist.LoadG.details;
         deps_of(g->addr, &tb->cur_addr);
         tb->cur_data.n = 0;
         tb->tmp[g->dst].n = 0;
         deps_add(&tb->tmp[g->dst], next_ref, none);
         deps_of_atom(g->alt, &tb->tmp[g->dst]);
         break;
      }
      case Ist_CAS: {
         IRCAS* c = st->Ist.CAS.details;
         deps_of(c->addr, &tb->cur_addr);
         deps_of(c->dataLo, &tb->cur_data);
         tb->tmp[c->oldLo].n = 0;
         deps_add(&tb->tmp[c->oldLo], next_ref, none);
         if (c->oldHi != IRTemp_INVALID)
            tb->tmp[c->oldHi] = tb->tmp[c->oldLo];
         break;
      }
      case Ist_LLSC:
         deps_of(st->Ist.LLSC.addr, &tb->cur_addr);
         if (st->Ist.LLSC.storedata == NULL) {
            tb->cur_data.n = 0;
            tb->tmp[st->Ist.LLSC.result].n = 0;
            deps_add(&tb->tmp[st->Ist.LLSC.result], next_ref, none);
         } else {
            deps_of(st->Ist.LLSC.storedata, &tb->cur_data);
            tb->tmp[st->Ist.LLSC.result].n = 0;
         }
         break;
      case Ist_Dirty: {
         IRDirty* d = st->Ist.Dirty.details;
         Deps args = { .n = 0 };
         for (Int i = 0; d->args[i] != NULL; i++)
            if (d->args[i]->tag == Iex_RdTmp || d->args[i]->tag == Iex_Const)
               deps_of_atom(d->args[i], &args);
         deps_of(d->mAddr, &tb->cur_addr);
         tb->cur_data = args;
         if (d->tmp != IRTemp_INVALID) {
            tb->tmp[d->tmp] = args;
            deps_op(&tb->tmp[d->tmp], C_ALU);
         }
         break;
      }
      case Ist_Exit:
         if (tb->nexits >= MAX_TEXITS) {
            tb->overflow = True;
            break;
         }
         deps_of(st->Ist.Exit.guard, &tb->exit_cond[tb->nexits]);
         tb->exit_pc[tb->nexits] = tb->insn_addr;
         tb->exit_word[tb->nexits] = (ULong)(tb->insn < 0 ? 0 : tb->insn)
            | (ULong)(st->Ist.Exit.jk == Ijk_Boring ? 1 : 0) << 24;
         tb->nexits++;
         break;
      default:
         break;
   }
}

static Int deps_words(const Deps* d)
{
   return d->n;
}

static void put_deps(const Deps* d)
{
   for (Int i = 0; i < d->n; i++)
      put(deps_word(d, i));
}

/* Writes the table of the block just instrumented (whose end is `in`'s
   jump kind and next) into the stream. A block too large for the table's
   arrays is written with no references, exits or writes: the simulator
   then places its references nowhere in particular. */
static void table_emit(IRSB* in)
{
   Int kind = 0;
   ULong ret = 0;
   Deps end = { .n = 0 };
   Bool direct = in->next->tag == Iex_Const;
   if (in->jumpkind == Ijk_Call) {
      kind = direct ? 1 : 2;
      ret = tb->insn_addr + tb->insn_len;
      /* VEX writes an AbiHint for every call, also the one that ends the
         block: that call is the block's end, not one followed inside it,
         and its return address goes on the return stack once. */
      if (tb->ncalls > 0 && tb->call_insn[tb->ncalls - 1] == tb->insn)
         tb->ncalls--;
   } else if (in->jumpkind == Ijk_Ret) {
      kind = 3;
   } else if (in->jumpkind == Ijk_Boring && !direct) {
      kind = 4;
   }
   if (kind >= 2)
      deps_of(in->next, &end);
   if (tb->overflow)
      tb->nrefs = tb->nexits = tb->nputs = tb->ncalls = 0;
   Int words = 6 + tb->nrefs + 2 * tb->nexits + tb->nputs + 2 * tb->ncalls + tb->nlines + deps_words(&end);
   for (Int i = 0; i < tb->nrefs; i++)
      words += deps_words(&tb->ref_addr[i]) + deps_words(&tb->ref_data[i]);
   for (Int i = 0; i < tb->nexits; i++)
      words += deps_words(&tb->exit_cond[i]);
   for (Int i = 0; i < tb->nputs; i++)
      words += deps_words(&tb->put_deps[i]);
   room_for(1 + words);
   put(W_BLOCK | (ULong)words << 8);
   put(tb->id);
   put(tb->first_addr);
   put((ULong)(tb->insn + 1) | (ULong)tb->nrefs << 16 | (ULong)tb->nexits << 32 | (ULong)tb->nputs << 48);
   put((ULong)tb->nlines | (ULong)tb->ncalls << 16 | (ULong)kind << 32 | (ULong)end.n << 40);
   put(tb->insn_addr);
   put(ret);
   for (Int i = 0; i < tb->nrefs; i++)
      put(tb->ref_word[i] | (ULong)tb->ref_addr[i].n << 24 | (ULong)tb->ref_data[i].n << 32);
   for (Int i = 0; i < tb->nexits; i++) {
      put(tb->exit_pc[i]);
      put(tb->exit_word[i] | (ULong)tb->exit_cond[i].n << 16);
   }
   for (Int i = 0; i < tb->nputs; i++)
      put((ULong)tb->put_slot[i] | (ULong)tb->put_insn[i] << 8 | (ULong)tb->put_exits[i] << 24 | (ULong)tb->put_deps[i].n << 32);
   for (Int i = 0; i < tb->ncalls; i++) {
      put(tb->call_insn[i]);
      put(tb->call_ret[i]);
   }
   for (Int i = 0; i < tb->nlines; i++)
      put(tb->line[i]);
   for (Int i = 0; i < tb->nrefs; i++) {
      put_deps(&tb->ref_addr[i]);
      put_deps(&tb->ref_data[i]);
   }
   for (Int i = 0; i < tb->nexits; i++)
      put_deps(&tb->exit_cond[i]);
   for (Int i = 0; i < tb->nputs; i++)
      put_deps(&tb->put_deps[i]);
   put_deps(&end);
   VG_(free)(tb->tmp);
   tb->tmp = NULL;
}

/* ---- instrumentation ---- */

typedef IRExpr IRAtom;   /* an IRExpr that is a temporary or a constant */

typedef struct {
   IRSB* sb;
   IRTemp base;      /* the buffer pointer at the block's start */
   Int k;            /* words written so far in this block */
   Bool pending;     /* a load not yet written (it may become a modify) */
   IRAtom* p_addr;
   Int p_size;
   Deps p_deps;      /* its address's sources (for the block table) */
   Int insns;        /* instructions not yet added to icount */
   /* Sampling: the words go where `cur` points, not at fixed offsets. */
   Bool filt;
   IRAtom* cur;      /* the buffer pointer now */
   IRAtom* bias;     /* filt_bias, loaded at the block's start */
   IRAtom* mark;     /* the pointer when `skipped` was last brought up */
   Int mark_k;       /* and `k` then */
} Ctx;

static IRAtom* assign(IRSB* sb, IRType ty, IRExpr* e)
{
   IRTemp t = newIRTemp(sb->tyenv, ty);
   addStmtToIRSB(sb, IRStmt_WrTmp(t, e));
   return IRExpr_RdTmp(t);
}

static IRAtom* slot(Ctx* c, Int k)
{
   if (k == 0)
      return IRExpr_RdTmp(c->base);
   return assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(c->base), mkIRExpr_HWord(8 * (HWord)k)));
}

/* How many words one reference of `size` bytes takes. */
static Int words_for(Int size)
{
   if (size <= 256)
      return 1;
   return (size + 255) / 256;
}

static Bool small_pow2(Int size)
{
   return size > 0 && size <= 64 && (size & (size - 1)) == 0;
}

static Int log2i(Int size)
{
   Int c = 0;
   while ((1 << c) < size)
      c++;
   return c;
}

/* While warming: `rec`, the word of a load or store of `size` bytes at
   `addr`, goes out unless the filter finds its line (see the top). */
static void emit_filtered(Ctx* c, IRAtom* addr, Int size, Int kind, IRAtom* rec)
{
   IRSB* sb = c->sb;
   Bool writes = kind != K_LOAD;
   /* The entry of the first byte's line, at filt + (addr >> (shift - 3))
      with the low three bits masked: (line & (sets - 1)) * 8. */
   IRAtom* a3 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Shr64, addr, IRExpr_Const(IRConst_U8(filter_shift - 3))));
   IRAtom* off = assign(sb, Ity_I64, IRExpr_Binop(Iop_And64, a3, mkIRExpr_HWord(((HWord)opt_filter_sets - 1) << 3)));
   IRAtom* ea = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, off, mkIRExpr_HWord((HWord)filt)));
   IRAtom* old = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, ea));
   /* The key of the last byte's line as a store would leave it:
      (addr + size - 1) >> (shift - 1) | 1 is line << 1 | 1. A reference across two
      lines looks up the first line's entry with the second line's key,
      which no entry of that set can hold: never left out. */
   IRAtom* last = size > 1 ? assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, addr, mkIRExpr_HWord(size - 1))) : addr;
   IRAtom* l5 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Shr64, last, IRExpr_Const(IRConst_U8(filter_shift - 1))));
   IRAtom* key1 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Or64, l5, mkIRExpr_HWord(1)));
   /* A load finds a line loaded or stored; a store only one stored. */
   IRAtom* have = writes ? old : assign(sb, Ity_I64, IRExpr_Binop(Iop_Or64, old, mkIRExpr_HWord(1)));
   IRAtom* probe = assign(sb, Ity_I64, IRExpr_Binop(Iop_Xor64, key1, c->bias));
   IRAtom* hit = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpEQ64, have, probe));
   IRAtom* entry = key1;
   if (!writes) {
      IRAtom* key0 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Xor64, key1, mkIRExpr_HWord(1)));
      entry = assign(sb, Ity_I64, IRExpr_ITE(hit, old, key0));
   }
   addStmtToIRSB(sb, IRStmt_Store(Iend_LE, ea, entry));
   addStmtToIRSB(sb, IRStmt_Store(Iend_LE, c->cur, rec));
   IRAtom* step = assign(sb, Ity_I64, IRExpr_ITE(hit, mkIRExpr_HWord(0), mkIRExpr_HWord(8)));
   c->cur = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, c->cur, step));
}

/* One word: kind, size (1..256) at `addr` (an atom). */
static void emit_one(Ctx* c, IRAtom* addr, Int size, Int kind, IRAtom* guard)
{
   ULong low;
   Int shift;
   if (small_pow2(size)) {
      low = kind | (log2i(size) << 2);
      shift = 8;
   } else {
      low = kind | (7 << 2) | ((ULong)(size - 1) << 8);
      shift = 16;
   }
   IRAtom* rec;
   if (addr->tag == Iex_Const) {
      rec = mkIRExpr_HWord((addr->Iex.Const.con->Ico.U64 << shift) | low);
   } else {
      IRAtom* sh = assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Shl64, addr, IRExpr_Const(IRConst_U8(shift))));
      rec = assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Or64, sh, mkIRExpr_HWord(low)));
   }
   if (guard != NULL)
      rec = assign(c->sb, Ity_I64, IRExpr_ITE(guard, rec, mkIRExpr_HWord(W_NOP)));
   if (opt_blocks && kind != K_FETCH)
      table_ref(kind);
   c->k++;
   if (!c->filt) {
      addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, slot(c, c->k - 1), rec));
   } else if (guard == NULL && small_pow2(size) && kind != K_FETCH && addr->tag != Iex_Const) {
      emit_filtered(c, addr, size, kind, rec);
   } else {
      addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, c->cur, rec));
      c->cur = assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Add64, c->cur, mkIRExpr_HWord(8)));
   }
}

static void emit(Ctx* c, IRAtom* addr, Int size, Int kind, IRAtom* guard)
{
   if (size <= 0)
      return;
   if (size <= 256) {
      emit_one(c, addr, size, kind, guard);
      return;
   }
   for (Int off = 0; off < size; off += 256) {
      IRAtom* a = off == 0 ? addr : assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Add64, addr, mkIRExpr_HWord(off)));
      emit_one(c, a, size - off < 256 ? size - off : 256, kind, guard);
   }
}

static void flush_pending(Ctx* c)
{
   if (c->pending) {
      c->pending = False;
      if (opt_blocks) {
         /* The load's own sources, not the statement's at hand. */
         Deps a = tb->cur_addr, d = tb->cur_data;
         tb->cur_addr = c->p_deps;
         emit(c, c->p_addr, c->p_size, K_LOAD, NULL);
         tb->cur_addr = a;
         tb->cur_data = d;
         return;
      }
      emit(c, c->p_addr, c->p_size, K_LOAD, NULL);
   }
}

static void add_load(Ctx* c, IRAtom* addr, Int size)
{
   flush_pending(c);
   c->pending = True;
   c->p_addr = addr;
   c->p_size = size;
   if (opt_blocks)
      c->p_deps = tb->cur_addr;
}

/* A store right after a load of the same bytes is one modify, as lackey
   counts it. */
static void add_store(Ctx* c, IRAtom* addr, Int size)
{
   if (c->pending && c->p_size == size && eqIRAtom(c->p_addr, addr)) {
      c->pending = False;
      emit(c, addr, size, K_MODIFY, NULL);
      return;
   }
   flush_pending(c);
   emit(c, addr, size, K_STORE, NULL);
}

/* icount += the instructions since the last addition. */
static void add_icount(Ctx* c)
{
   if (!opt_icount || opt_blocks || c->insns == 0)
      return;
   IRAtom* old = assign(c->sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&icount)));
   IRAtom* sum = assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Add64, old, mkIRExpr_HWord(c->insns)));
   addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&icount), sum));
   c->insns = 0;
}

static void store_next(Ctx* c)
{
   IRAtom* p = c->filt ? c->cur : slot(c, c->k);
   addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&buf_next), p));
}

/* skipped += the words the filter left out since the last addition: those
   the block would have written less those it wrote. */
static void add_skipped(Ctx* c)
{
   if (!c->filt || c->k == c->mark_k)
      return;
   IRSB* sb = c->sb;
   IRAtom* bytes = assign(sb, Ity_I64, IRExpr_Binop(Iop_Sub64, c->cur, c->mark));
   IRAtom* wrote = assign(sb, Ity_I64, IRExpr_Binop(Iop_Shr64, bytes, IRExpr_Const(IRConst_U8(3))));
   IRAtom* left = assign(sb, Ity_I64, IRExpr_Binop(Iop_Sub64, mkIRExpr_HWord(c->k - c->mark_k), wrote));
   IRAtom* old = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&skipped)));
   IRAtom* sum = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, old, left));
   addStmtToIRSB(sb, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&skipped), sum));
   c->mark = c->cur;
   c->mark_k = c->k;
}

static Int cas_size(IRSB* sb, IRCAS* cas)
{
   Int s = sizeofIRType(typeOfIRExpr(sb->tyenv, cas->dataLo));
   return cas->dataHi != NULL ? 2 * s : s;
}

/* At most how many words the statements from `first` on can write. */
static Int max_words(IRSB* in, Int first)
{
   Int n = 0;
   for (Int i = first; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      switch (st->tag) {
         case Ist_IMark:
            if (opt_ifetch)
               n += 1;
            break;
         case Ist_WrTmp:
            if (st->Ist.WrTmp.data->tag == Iex_Load)
               n += words_for(sizeofIRType(st->Ist.WrTmp.data->Iex.Load.ty));
            break;
         case Ist_Store:
            n += words_for(sizeofIRType(typeOfIRExpr(in->tyenv, st->Ist.Store.data)));
            break;
         case Ist_StoreG:
         case Ist_LoadG:
         case Ist_LLSC:
            n += 2;
            break;
         case Ist_CAS:
            n += 2 * words_for(cas_size(in, st->Ist.CAS.details));
            break;
         case Ist_Dirty:
            if (st->Ist.Dirty.details->mFx != Ifx_None)
               n += 2 * words_for(st->Ist.Dirty.details->mSize);
            break;
         default:
            break;
      }
   }
   return n;
}

/* The word of a block's entry or side exit at the buffer's current
   position: an entry takes its place; a side exit's is written where the
   next word would go and counted only if the exit is taken (the pointer
   stored before the exit includes it; past the exit the next word
   overwrites it). */
static void put_marker(Ctx* c, ULong w, Bool advance)
{
   IRAtom* at = c->filt ? c->cur : slot(c, c->k);
   addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, at, mkIRExpr_HWord(w)));
   if (advance) {
      if (c->filt)
         c->cur = assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Add64, c->cur, mkIRExpr_HWord(8)));
      c->k++;
      return;
   }
   IRAtom* after = assign(c->sb, Ity_I64, IRExpr_Binop(Iop_Add64, at, mkIRExpr_HWord(8)));
   addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&buf_next), after));
}

static IRSB* vt_instrument(VgCallbackClosure* closure, IRSB* in, const VexGuestLayout* layout,
                           const VexGuestExtents* vge, const VexArchInfo* archinfo_host,
                           IRType gWordTy, IRType hWordTy)
{
   if (gWordTy != Ity_I64 || hWordTy != Ity_I64)
      VG_(tool_panic)("splabtrace supports 64-bit guests only");
   IRSB* sb = deepCopyIRSBExceptStmts(in);
   Int i = 0;
   while (i < in->stmts_used && in->stmts[i]->tag != Ist_IMark) {
      addStmtToIRSB(sb, in->stmts[i]);
      i++;
   }
   /* The block's entry word and at most one exit word beside its
      references. */
   Int need = max_words(in, i) + (opt_blocks ? 2 : 0);
   Ctx c = { sb, IRTemp_INVALID, 0, False, NULL, 0, { .n = 0 }, 0, sampling(), NULL, NULL, NULL, 0 };
   if (need == 0) {
      for (; i < in->stmts_used; i++) {
         IRStmt* st = in->stmts[i];
         if (st->tag == Ist_IMark)
            c.insns++;
         else if (st->tag == Ist_Exit)
            add_icount(&c);
         addStmtToIRSB(sb, st);
      }
      add_icount(&c);
      return sb;
   }
   tl_assert(need < (Int)SLOT_WORDS / 2);
   ensure_buf();
   if (opt_blocks)
      table_start(in);

   /* Room check: when the buffer cannot take `need` more words, write it
      out (or publish the slot and take the next); the block then starts
      at the new buffer's beginning. The buffer moves with --ring, so its
      bounds are loaded, not constants. */
   IRAtom* cur = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&buf_next)));
   IRAtom* end = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&buf_end)));
   IRAtom* after = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, cur, mkIRExpr_HWord(8 * (HWord)need)));
   IRAtom* full = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpLT64U, end, after));
   IRDirty* d = unsafeIRDirty_0_N(0, "vt_flush", VG_(fnptr_to_fnentry)(&vt_flush), mkIRExprVec_0());
   d->guard = full;
   d->mFx = Ifx_Modify;
   d->mAddr = mkIRExpr_HWord((HWord)&buf_next);
   d->mSize = 8;
   addStmtToIRSB(sb, IRStmt_Dirty(d));
   c.base = newIRTemp(sb->tyenv, Ity_I64);
   addStmtToIRSB(sb, IRStmt_WrTmp(c.base, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&buf_next))));
   if (c.filt) {
      c.cur = c.mark = IRExpr_RdTmp(c.base);
      c.bias = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&filt_bias)));
   }
   if (opt_blocks)
      put_marker(&c, W_ENTER | tb->id << 8, True);

   Int exits = 0;
   for (; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      if (st == NULL)
         continue;
      if (opt_blocks)
         table_stmt(st, c.pending);
      switch (st->tag) {
         case Ist_IMark:
            flush_pending(&c);
            c.insns++;
            if (opt_ifetch && st->Ist.IMark.len > 0)
               emit(&c, mkIRExpr_HWord((HWord)st->Ist.IMark.addr), st->Ist.IMark.len, K_FETCH, NULL);
            break;
         case Ist_WrTmp: {
            IRExpr* e = st->Ist.WrTmp.data;
            if (e->tag == Iex_Load)
               add_load(&c, e->Iex.Load.addr, sizeofIRType(e->Iex.Load.ty));
            break;
         }
         case Ist_Store:
            add_store(&c, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(in->tyenv, st->Ist.Store.data)));
            break;
         case Ist_StoreG: {
            IRStoreG* g = st->Ist.StoreG.details;
            flush_pending(&c);
            emit(&c, g->addr, sizeofIRType(typeOfIRExpr(in->tyenv, g->data)), K_STORE, g->guard);
            break;
         }
         case Ist_LoadG: {
            IRLoadG* g = st->Ist.LoadG.details;
            IRType wide = Ity_INVALID, narrow = Ity_INVALID;
            typeOfIRLoadGOp(g->cvt, &wide, &narrow);
            flush_pending(&c);
            emit(&c, g->addr, sizeofIRType(narrow), K_LOAD, g->guard);
            break;
         }
         case Ist_CAS: {
            IRCAS* cas = st->Ist.CAS.details;
            Int s = cas_size(in, cas);
            add_load(&c, cas->addr, s);
            add_store(&c, cas->addr, s);
            break;
         }
         case Ist_LLSC:
            if (st->Ist.LLSC.storedata == NULL)
               add_load(&c, st->Ist.LLSC.addr, sizeofIRType(typeOfIRTemp(in->tyenv, st->Ist.LLSC.result)));
            else
               add_store(&c, st->Ist.LLSC.addr, sizeofIRType(typeOfIRExpr(in->tyenv, st->Ist.LLSC.storedata)));
            break;
         case Ist_Dirty: {
            IRDirty* dd = st->Ist.Dirty.details;
            if (dd->mFx == Ifx_Read || dd->mFx == Ifx_Modify)
               add_load(&c, dd->mAddr, dd->mSize);
            if (dd->mFx == Ifx_Write || dd->mFx == Ifx_Modify)
               add_store(&c, dd->mAddr, dd->mSize);
            break;
         }
         case Ist_Exit:
            flush_pending(&c);
            store_next(&c);
            add_skipped(&c);
            add_icount(&c);
            /* The exit's word last: the pointer it stores counts it. */
            if (opt_blocks)
               put_marker(&c, W_EXIT | (ULong)exits << 8, False);
            exits++;
            break;
         default:
            break;
      }
      addStmtToIRSB(sb, st);
   }
   flush_pending(&c);
   store_next(&c);
   add_skipped(&c);
   add_icount(&c);
   tl_assert(c.k <= need);
   if (opt_blocks)
      table_emit(in);
   return sb;
}

/* ---- start and end ---- */

static void vt_post_clo_init(void)
{
   if (opt_period > 0 || opt_filter_sets > 0) {
      Long f = opt_filter_sets, b = opt_filter_line;
      if (opt_ring == NULL || f < 1 || f > MAX_FILTER_SETS || (f & (f - 1)) != 0 || b < 16 || b > 4096 || (b & (b - 1)) != 0 || opt_detail < 1 || opt_detail >= opt_period) {
         VG_(umsg)("splabtrace: sampling needs --ring, --filter-sets a power of two up to %d, --filter-line a power of two from 16 to 4096, and 0 < --detail < --period\n", MAX_FILTER_SETS);
         VG_(exit)(2);
      }
      filter_shift = 0;
      while ((1L << filter_shift) < b)
         filter_shift++;
      filter_clear();
   }
   ensure_buf();
   if (opt_ring != NULL) {
      ring_open('S');
      VG_(atfork)(vt_pre_fork, NULL, vt_child);
      return;
   }
   if (opt_out == NULL) {
      VG_(umsg)("splabtrace: no --out=PATH given; the references are dropped\n");
      return;
   }
   out_fd = VG_(fd_open)(opt_out, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC, 0600);
   if (out_fd < 0) {
      VG_(umsg)("splabtrace: cannot open --out=%s\n", opt_out);
      VG_(exit)(3);
   }
   /* The magic goes first; startup events already buffered follow it. */
   static const HChar magic[8] = { 'S', 'P', 'L', 'V', 'T', '0', '0', '1' };
   write_all((const UChar*)magic, 8);
   VG_(atfork)(NULL, NULL, vt_child);
}

static void vt_fini(Int exitcode)
{
   if (ring != NULL) {
      room_for(1);
      put_icount();
      put_skipped();
      put(W_END);
      ring_publish(True);
      ring = NULL;
      return;
   }
   if (in_child)
      return;
   room_for(1);
   put(W_END);
   vt_flush();
   if (out_fd >= 0)
      VG_(close)(out_fd);
   out_fd = -1;
}

static void vt_pre_clo_init(void)
{
   VG_(details_name)("splabtrace");
   VG_(details_version)(NULL);
   VG_(details_description)("memory references for splab, as a binary stream");
   VG_(details_copyright_author)("splab");
   VG_(details_bug_reports_to)("the splab repository");
   VG_(details_avg_translation_sizeB)(400);

   VG_(basic_tool_funcs)(vt_post_clo_init, vt_instrument, vt_fini);
   VG_(needs_command_line_options)(vt_option, vt_usage, vt_debug_usage);
   VG_(needs_syscall_wrapper)(vt_pre_syscall, vt_post_syscall);

   VG_(track_new_mem_startup)(vt_startup);
   VG_(track_new_mem_mmap)(vt_mmap);
   VG_(track_new_mem_brk)(vt_brk_grow);
   VG_(track_copy_mem_remap)(vt_remap);
   VG_(track_die_mem_munmap)(vt_unmap);
   VG_(track_die_mem_brk)(vt_unmap);
   VG_(track_pre_mem_read)(vt_kernel_read);
   VG_(track_pre_mem_read_asciiz)(vt_kernel_read_string);
   VG_(track_post_mem_write)(vt_kernel_write);
   VG_(track_pre_deliver_signal)(vt_pre_deliver);
}

VG_DETERMINE_INTERFACE_VERSION(vt_pre_clo_init)
