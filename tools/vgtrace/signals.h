/* Which signals a program's own instructions raise, which are a timer's,
   and which system calls send one to the caller itself: what both front
   ends (the valgrind tool, tools/vgtrace/vt_main.c, and the DynamoRIO
   client, crates/drclient/client/ring.c) tell apart to say whether a
   signal's delivery depends on the host's timing. x86-64 Linux numbers
   (neither front end runs elsewhere). */

/* A fault (SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV, SIGSYS) or what a
   write raises (SIGPIPE, SIGXFSZ). */
static inline int sig_own_kind(int sig)
{
   switch (sig) {
      case 4: case 5: case 7: case 8: case 11: case 13: case 25: case 31:
         return 1;
      default:
         return 0;
   }
}

/* SIGALRM, SIGVTALRM, SIGPROF. */
static inline int sig_timer(int sig)
{
   return sig == 14 || sig == 26 || sig == 27;
}

/* The signal system call `sysno` with arguments `a0` to `a2` sends the
   calling process `pid` (thread `tid`) itself, or 0: kill naming it (or
   0, its group), tkill naming the thread, tgkill, rt_sigqueueinfo and
   rt_tgsigqueueinfo naming it. */
static inline long sig_sent_to_self(long sysno, long a0, long a1, long a2, long pid, long tid)
{
   switch (sysno) {
      case 62: return (a0 == 0 || a0 == pid) ? a1 : 0;
      case 200: return a0 == tid ? a1 : 0;
      case 234: return a0 == pid ? a2 : 0;
      case 129: return a0 == pid ? a1 : 0;
      case 297: return a0 == pid ? a2 : 0;
      default: return 0;
   }
}

/* (The valgrind tool's.) Whether a thread resumes at `ip` from the
   system call that returned to `after`: at that address, or, where the call is restarted after a
   handler, at the call's own `syscall` instruction, two bytes before. */
static inline int sig_at_call(unsigned long ip, unsigned long after)
{
   return after != 0 && (ip == after || ip + 2 == after);
}

/* Signal `sig`'s bit in a set of signals (bit n - 1 for signal n), 0 for
   no signal. */
static inline unsigned long long sig_bit(long sig)
{
   return sig >= 1 && sig <= 64 ? 1ULL << (sig - 1) : 0;
}
