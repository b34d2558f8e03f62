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
   the end (the program exited). The stream starts with "SPLVT001".

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

/* ---- options ---- */

static const HChar* opt_out = NULL;
static Bool opt_ifetch = False;

static Bool vt_option(const HChar* arg)
{
   if VG_STR_CLO(arg, "--out", opt_out) {}
   else if VG_BOOL_CLO(arg, "--ifetch", opt_ifetch) {}
   else return False;
   return True;
}

static void vt_usage(void)
{
   VG_(printf)(
"    --out=PATH       where the reference stream goes (a file or FIFO) [none]\n"
"    --ifetch=no|yes  record instruction fetches too [no]\n");
}

static void vt_debug_usage(void) {}

/* ---- the buffer ---- */

#define BUF_WORDS (1u << 21)     /* 16 MiB */

static ULong* buf_start;
static ULong* buf_next;          /* loaded and stored by the inline code */
static ULong* buf_end;
static Int out_fd = -1;
static Bool in_child = False;    /* a forked child writes nothing */

#define W_MAP   0x80ULL
#define W_UNMAP 0x81ULL
#define W_END   0xfeULL
#define W_NOP   0xffULL

enum { K_FETCH = 0, K_LOAD = 1, K_STORE = 2, K_MODIFY = 3 };
enum { O_UNKNOWN = 0, O_ANON = 1, O_FILE = 2, O_BRK = 3, O_STACK = 4, O_IMAGE = 5 };

static void ensure_buf(void)
{
   if (buf_start == NULL) {
      buf_start = VG_(malloc)("splabtrace.buf", BUF_WORDS * sizeof(ULong));
      buf_next = buf_start;
      buf_end = buf_start + BUF_WORDS;
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

/* Called by the inline code (guarded) and by the event hooks. */
static void vt_flush(void)
{
   if (!in_child && out_fd >= 0)
      write_all((const UChar*)buf_start, (UChar*)buf_next - (UChar*)buf_start);
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

static void vt_child(ThreadId tid)
{
   in_child = True;
   out_fd = -1;
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
   addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, slot(c, c->k), rec));
   c->k++;
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

static void store_next(Ctx* c)
{
   IRAtom* p = slot(c, c->k);
   addStmtToIRSB(c->sb, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&buf_next), p));
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
   if (need == 0) {
      for (; i < in->stmts_used; i++)
         addStmtToIRSB(sb, in->stmts[i]);
      return sb;
   }
   tl_assert(need < (Int)BUF_WORDS / 2);
   ensure_buf();

   /* Room check: when the buffer cannot take `need` more words, write it
      out; the block then starts at the buffer's beginning. */
   Ctx c = { sb, IRTemp_INVALID, 0, False, NULL, 0 };
   IRAtom* cur = assign(sb, Ity_I64, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&buf_next)));
   IRAtom* full = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpLT64U, mkIRExpr_HWord((HWord)(buf_end - need)), cur));
   IRDirty* d = unsafeIRDirty_0_N(0, "vt_flush", VG_(fnptr_to_fnentry)(&vt_flush), mkIRExprVec_0());
   d->guard = full;
   d->mFx = Ifx_Modify;
   d->mAddr = mkIRExpr_HWord((HWord)&buf_next);
   d->mSize = 8;
   addStmtToIRSB(sb, IRStmt_Dirty(d));
   c.base = newIRTemp(sb->tyenv, Ity_I64);
   addStmtToIRSB(sb, IRStmt_WrTmp(c.base, IRExpr_ITE(full, mkIRExpr_HWord((HWord)buf_start), cur)));

   for (; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      if (st == NULL)
         continue;
      switch (st->tag) {
         case Ist_IMark:
            flush_pending(&c);
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
            break;
         default:
            break;
      }
      addStmtToIRSB(sb, st);
   }
   flush_pending(&c);
   store_next(&c);
   tl_assert(c.k <= need);
   return sb;
}

/* ---- start and end ---- */

static void vt_post_clo_init(void)
{
   ensure_buf();
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

   VG_(track_new_mem_startup)(vt_startup);
   VG_(track_new_mem_mmap)(vt_mmap);
   VG_(track_new_mem_brk)(vt_brk_grow);
   VG_(track_copy_mem_remap)(vt_remap);
   VG_(track_die_mem_munmap)(vt_unmap);
   VG_(track_die_mem_brk)(vt_unmap);
}

VG_DETERMINE_INTERFACE_VERSION(vt_pre_clo_init)
