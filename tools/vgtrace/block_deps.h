/* The dependence lists of the block tables both front ends write (the
   valgrind tool, tools/vgtrace/vt_main.c, "the block table", documents
   the words; the DynamoRIO client, crates/drclient/client/ring.c, writes
   the same): a value's sources, each with the operations on the longest
   path from it counted by class, and the codes the table's words use.
   Plain C with no library calls: the valgrind tool has no libc. */

#define W_BLOCK 0x86ULL
#define W_ENTER 0x87ULL
#define W_EXIT  0x88ULL

#define FROM_REF 0x8000
#define FROM_DISPATCH 0xffff
#define MAXD 6        /* sources kept per value */
#define NCLS 6        /* operation classes */
/* The classes, and C_FREE for an operation that costs nothing. */
enum { C_ALU, C_MUL, C_DIV, C_FADD, C_FMUL, C_FDIV, C_FREE };

typedef struct {
   unsigned short src[MAXD];
   unsigned char ops[MAXD][NCLS];
   int n;
} Deps;

/* The canonical weight of a path, to choose the longer of two from one
   source and the ones to keep when there are too many: latencies of a
   typical core. */
static int weight(const unsigned char* ops)
{
   static const int w[NCLS] = { 1, 3, 20, 4, 4, 15 };
   int t = 0;
   for (int c = 0; c < NCLS; c++)
      t += w[c] * ops[c];
   return t;
}

static void ops_copy(unsigned char* to, const unsigned char* from)
{
   for (int c = 0; c < NCLS; c++)
      to[c] = from[c];
}

static void deps_add(Deps* d, unsigned short src, const unsigned char* ops)
{
   for (int i = 0; i < d->n; i++) {
      if (d->src[i] == src) {
         if (weight(ops) > weight(d->ops[i]))
            ops_copy(d->ops[i], ops);
         return;
      }
   }
   if (d->n < MAXD) {
      d->src[d->n] = src;
      ops_copy(d->ops[d->n], ops);
      d->n++;
      return;
   }
   /* Full: replace the lightest if this one is heavier. */
   int lo = 0;
   for (int i = 1; i < d->n; i++)
      if (weight(d->ops[i]) < weight(d->ops[lo]))
         lo = i;
   if (weight(ops) > weight(d->ops[lo])) {
      d->src[lo] = src;
      ops_copy(d->ops[lo], ops);
   }
}

/* `o`'s sources added to `d` (none when `o` is NULL). */
static void deps_union(Deps* d, const Deps* o)
{
   for (int i = 0; o != NULL && i < o->n; i++)
      deps_add(d, o->src[i], o->ops[i]);
}

/* Every path one operation of class `c` longer. */
static void deps_op(Deps* d, int c)
{
   if (c == C_FREE)
      return;
   for (int i = 0; i < d->n; i++)
      if (d->ops[i][c] < 255)
         d->ops[i][c]++;
}

/* Source `i` of `d` as the table's word: the source | counts << 16. */
static unsigned long long deps_word(const Deps* d, int i)
{
   unsigned long long w = d->src[i];
   for (int c = 0; c < NCLS; c++)
      w |= (unsigned long long)d->ops[i][c] << (16 + 8 * c);
   return w;
}
