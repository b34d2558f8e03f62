/* System calls that touch nothing outside the process that makes them,
   so that the front ends run them without waiting at a lockstep gate:
   one LOCAL_SYSCALL(name) each, for the includer to define (the
   valgrind tool, tools/vgtrace/vt_main.c, as __NR_name; the DynamoRIO
   client, crates/drclient/client/ring.c, as SYS_name). rseq (334 on
   x86-64), which valgrind's headers may not name, each adds itself. */
LOCAL_SYSCALL(mmap) LOCAL_SYSCALL(munmap) LOCAL_SYSCALL(mprotect)
LOCAL_SYSCALL(madvise) LOCAL_SYSCALL(brk) LOCAL_SYSCALL(mremap)
LOCAL_SYSCALL(rt_sigprocmask) LOCAL_SYSCALL(rt_sigaction)
LOCAL_SYSCALL(sigaltstack) LOCAL_SYSCALL(getpid) LOCAL_SYSCALL(gettid)
LOCAL_SYSCALL(getuid) LOCAL_SYSCALL(geteuid) LOCAL_SYSCALL(getgid)
LOCAL_SYSCALL(getegid) LOCAL_SYSCALL(arch_prctl)
LOCAL_SYSCALL(set_tid_address) LOCAL_SYSCALL(set_robust_list)
LOCAL_SYSCALL(prlimit64) LOCAL_SYSCALL(getrandom) LOCAL_SYSCALL(uname)
LOCAL_SYSCALL(clock_gettime) LOCAL_SYSCALL(gettimeofday)
LOCAL_SYSCALL(clock_getres) LOCAL_SYSCALL(sched_getaffinity)
LOCAL_SYSCALL(fstat) LOCAL_SYSCALL(lseek) LOCAL_SYSCALL(getcwd)
