//! What the promotion monitor relies on in this kernel, checked in a
//! forked child so that nothing it sets stays on the test process:
//! MADV_COLLAPSE works on memory that was never advised MADV_HUGEPAGE
//! (under every THP mode), PR_SET_THP_DISABLE makes it fail with EINVAL
//! (so `promote` must not use it), and its "except advised" flag (Linux
//! 6.18) leaves collapses allowed. It fails, naming the kernel it needs,
//! where the kernel lacks a feature.

use splab_native::program::PR_THP_DISABLE_EXCEPT_ADVISED;
use splab_native::promote::MADV_COLLAPSE;

const LEN: usize = 4 << 20;

/// In a forked child: optionally PR_SET_THP_DISABLE with `flags`, then an
/// aligned 4 MB of base pages, touched and collapsed. The child's exit
/// code: 0 collapsed, 1 EINVAL, 2 another error, 3 setup failed, 4 the
/// prctl was refused.
fn collapse_in_child(prctl: Option<libc::c_ulong>) -> i32 {
    // SAFETY: the child makes only system calls (no allocation, no locks)
    // and leaves with _exit; the parent waits for it.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            if let Some(f) = prctl {
                if libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, f, 0 as libc::c_ulong, 0 as libc::c_ulong) != 0 {
                    libc::_exit(4);
                }
            }
            let p = libc::mmap(std::ptr::null_mut(), LEN * 2, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            if p == libc::MAP_FAILED {
                libc::_exit(3);
            }
            let a = ((p as usize).div_ceil(2 << 20) * (2 << 20)) as *mut u8;
            // Nothing advised. (Under mode always the stores may fault 2 MB
            // pages already, and the collapse then succeeds with nothing
            // to do; under madvise or never they fault base pages.)
            let mut off = 0;
            while off < LEN {
                std::ptr::write_volatile(a.add(off), 1);
                off += 4096;
            }
            let r = libc::madvise(a.cast(), LEN, MADV_COLLAPSE);
            let e = *libc::__errno_location();
            libc::_exit(if r == 0 {
                0
            } else if e == libc::EINVAL {
                1
            } else {
                2
            });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WEXITSTATUS(status)
    }
}

#[test]
fn collapse_needs_no_advice_and_thp_disable_blocks_it() {
    let thp = "/sys/kernel/mm/transparent_hugepage/enabled";
    assert!(std::path::Path::new(thp).exists(), "this test needs a kernel with transparent huge pages ({thp} is missing)");
    match collapse_in_child(None) {
        0 => {}
        1 => panic!("MADV_COLLAPSE is not supported by this kernel (EINVAL): the promotion monitor needs Linux 6.1 or later"),
        c => panic!("MADV_COLLAPSE of touched, unadvised memory failed (child status {c})"),
    }
    assert_eq!(collapse_in_child(Some(0)), 1, "PR_SET_THP_DISABLE makes MADV_COLLAPSE fail with EINVAL");
    match collapse_in_child(Some(PR_THP_DISABLE_EXCEPT_ADVISED)) {
        4 => panic!("PR_SET_THP_DISABLE's except-advised flag is not supported by this kernel: promote under THP mode always needs Linux 6.18 or later"),
        c => assert_eq!(c, 0, "with the except-advised flag a collapse is still allowed"),
    }
}
