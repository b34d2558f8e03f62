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
   shifts give them back exactly.
   Other words: 0x80 map (then start, length, prot | origin << 8 |
   name length << 16, the name padded to 8 bytes), 0x81 unmap (then start,
   length), 0xff nothing (a guarded access whose guard was false), 0xfe
   the end (the program exited), 0x82 instructions (then the number of
   guest instructions executed since the last such word), 0x83 fork (then
   the child's pid: the program forked a process that shares nothing with
   it but a copy of its memory), 0x84 references left out (then how many
   since the last such word), 0x85 the slot's mode (then 0 detail, 1
   warming). The stream starts with "SPLVT001".

   Sampling (--detail=N --period=N --filter-sets=S, with --ring only):
   each process's references are counted; at the first slot that starts
   at or past the start of a period a window opens, and its slots are in
   detail until N references have gone; the others are warming. Every
   slot begins with its mode word. While warming, a reference is
   left out (counted in the 0x84 words, not written) when a direct-mapped
   filter of S lines finds it: the last reference to the filter's set was
   to the same line and, for a store, wrote it. splab chooses S as the
   first-level data cache's sets, at most a page's lines, so such a
   reference would change no cache's replacement state
   (crates/trace/src/online.rs says what stays approximate). The filter
   is emptied when warming starts and at every map, unmap and fork. Each
   filtered reference is a few more inline statements: the line, its
   filter entry, a compare, and the buffer pointer advanced by 0 or 8.

   Two ways out. --out=PATH writes the stream into a file or FIFO (the
   `splab trace record` path; a forked child writes nothing). --ring=DIR
   (for `splab sim -- PROG`, crates/trace/src/online.rs) writes it into
   shared memory: each process (the first, every forked child, every
   program a process execs, with --trace-children=yes) creates its own
   ring file DIR/r.PID.N, maps it shared and announces it with one line
   (one atomic write) on the FIFO DIR/ctl. The ring holds NSLOTS slots of
   SLOT_WORDS words; the tool fills one slot through the inline code,
   publishes it by advancing a counter in the ring's header and takes the
   next; when all slots are full it sleeps on a futex until the reader
   frees one. So the stream crosses with one counter update per slot (two
   megabytes), no copy and no system call per reference. The header is
   documented beside RING_* below; online.rs must agree.

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
static Long opt_detail = 0;
static Long opt_period = 0;
static Long opt_filter_sets = 0;

static Bool vt_option(const HChar* arg)
{
   if VG_STR_CLO(arg, "--out", opt_out) {}
   else if VG_STR_CLO(arg, "--ring", opt_ring) {}
   else if VG_INT_CLO(arg, "--reader", opt_reader) {}
   else if VG_BOOL_CLO(arg, "--ifetch", opt_ifetch) {}
   else if VG_BOOL_CLO(arg, "--icount", opt_icount) {}
   else if VG_INT_CLO(arg, "--detail", opt_detail) {}
   else if VG_INT_CLO(arg, "--period", opt_period) {}
   else if VG_INT_CLO(arg, "--filter-sets", opt_filter_sets) {}
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
"    --detail=N --period=N --filter-sets=S  with --ring: sample (above) [off]\n");
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

#define W_MAP   0x80ULL
#define W_UNMAP 0x81ULL
#define W_INSN  0x82ULL
#define W_FORK  0x83ULL
#define W_SKIP  0x84ULL
#define W_MODE  0x85ULL
#define W_END   0xfeULL
#define W_NOP   0xffULL

/* ---- the shared ring (--ring) ----
   The ring file: a header page of 64-bit words, then NSLOTS slots of
   SLOT_WORDS words.
     [0] magic "SPLRING1"   [1] NSLOTS   [2] SLOT_WORDS   [3] the pid
     [4] published: slots filled so far (the tool advances it)
     [5] consumed: slots the reader is done with (the reader advances it)
     [6] the tool sleeps on consumed (set before it waits)
     [7] ended: 1 once the end word is published
     [8 + i] words in slot i (written before [4] moves past it)
   The futexes are the low halves of [4] and [5] (little-endian). */
#define NSLOTS     32
#define SLOT_WORDS (1u << 18)    /* 2 MiB */
#define RING_MAGIC 0x31474e49524c5053ULL   /* "SPLRING1" */
#define R_PUBLISHED 4
#define R_CONSUMED  5
#define R_TOOL_WAITS 6
#define R_ENDED     7
#define R_LENS      8
#define RING_HEADER 512          /* words: one 4 KiB page */

static volatile ULong* ring;     /* the mapped ring file, or NULL */
static ULong ring_published;

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

/* Waits until the reader has freed the slot `ring_published` will use. */
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
   ring[0] = RING_MAGIC;
   ring_take_slot();
   if (old_start != NULL && how == 'S') {
      SizeT k = old_next - old_start;
      VG_(memcpy)(buf_next, old_start, k * sizeof(ULong));
      buf_next += k;
   }
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
   if (ring != NULL) {
      /* The parent's ring stays the parent's: the child writes its own. */
      ring = NULL;
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

static void vt_pre_syscall(ThreadId tid, UInt sysno, UWord* args, UInt nargs)
{
   /* An exec replaces this tool instance without calling vt_fini: what is
      buffered goes out now; the new program's instance announces itself
      with the same pid. */
   if (ring != NULL && (sysno == __NR_execve || sysno == __NR_execveat))
      vt_flush();
}

static void vt_post_syscall(ThreadId tid, UInt sysno, UWord* args, UInt nargs, SysRes res)
{
   if (ring == NULL || sr_isError(res) || !is_fork(sysno, args) || sr_Res(res) == 0)
      return;
   filter_clear();
   room_for(2);
   put(W_FORK);
   put(sr_Res(res));
   /* The child's stream must not wait for the parent's next slot. */
   vt_flush();
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
   /* The entry of the first byte's line, at filt + (addr >> 3) with the
      low three bits masked: (line & (sets - 1)) * 8. */
   IRAtom* a3 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Shr64, addr, IRExpr_Const(IRConst_U8(3))));
   IRAtom* off = assign(sb, Ity_I64, IRExpr_Binop(Iop_And64, a3, mkIRExpr_HWord(((HWord)opt_filter_sets - 1) << 3)));
   IRAtom* ea = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, off, mkIRExpr_HWord((HWord)filt)));
   IRAtom* old = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, ea));
   /* The key of the last byte's line as a store would leave it:
      (addr + size - 1) >> 5 | 1 is line << 1 | 1. A reference across two
      lines looks up the first line's entry with the second line's key,
      which no entry of that set can hold: never left out. */
   IRAtom* last = size > 1 ? assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, addr, mkIRExpr_HWord(size - 1))) : addr;
   IRAtom* l5 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Shr64, last, IRExpr_Const(IRConst_U8(5))));
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
      emit(c, c->p_addr, c->p_size, K_LOAD, NULL);
   }
}

static void add_load(Ctx* c, IRAtom* addr, Int size)
{
   flush_pending(c);
   c->pending = True;
   c->p_addr = addr;
   c->p_size = size;
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
   if (!opt_icount || c->insns == 0)
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
   Int need = max_words(in, i);
   Ctx c = { sb, IRTemp_INVALID, 0, False, NULL, 0, 0, sampling(), NULL, NULL, NULL, 0 };
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

   for (; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      if (st == NULL)
         continue;
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
   return sb;
}

/* ---- start and end ---- */

static void vt_post_clo_init(void)
{
   if (opt_period > 0 || opt_filter_sets > 0) {
      Long f = opt_filter_sets;
      if (opt_ring == NULL || f < 1 || f > MAX_FILTER_SETS || (f & (f - 1)) != 0 || opt_detail < 1 || opt_detail >= opt_period) {
         VG_(umsg)("splabtrace: sampling needs --ring, --filter-sets a power of two up to %d, and 0 < --detail < --period\n", MAX_FILTER_SETS);
         VG_(exit)(2);
      }
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
}

VG_DETERMINE_INTERFACE_VERSION(vt_pre_clo_init)
