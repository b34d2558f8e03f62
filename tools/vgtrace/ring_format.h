/* The shared-memory ring the front ends write a program's references
   into and splab reads (crates/trace/src/online/ring.rs holds the same
   numbers): its slots, the header's words, and the codes of the words
   both front ends write. Included by the valgrind tool
   (tools/vgtrace/vt_main.c) and the DynamoRIO client
   (crates/drclient/client/ring.c). */
#define W_INSN   0x82ULL
#define W_FORK   0x83ULL
#define W_SKIP   0x84ULL
#define W_MODE   0x85ULL
#define W_THREAD 0x89ULL
#define W_AGAIN  0x8aULL
#define W_TIMED  0x8bULL
#define W_SIGNAL 0x8cULL
#define W_END    0xfeULL
/* Set in a W_AGAIN word written in lockstep. */
#define AGAIN_IN_LOCKSTEP (1ULL << 8)

#define NSLOTS     32
#define SLOT_WORDS (1u << 18)    /* 2 MiB */
#define RING_MAGIC 0x32474e49524c5053ULL   /* "SPLRING2" */
#define R_PUBLISHED 4
#define R_CONSUMED  5
#define R_TOOL_WAITS 6
#define R_ENDED     7
#define R_GRANTED   8
#define R_GATE      9
#define R_AT_GATE   10
#define R_IN_CALL   11
#define R_LENS      16
#define RING_HEADER 512          /* words: one 4 KiB page */
#define ALL_GATES   (~0ULL)
