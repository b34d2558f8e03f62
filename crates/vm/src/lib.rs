//! The machine-independent virtual memory system.
//!
//! One module per mechanism, as in FreeBSD's sys/vm: `phys` (buddy
//! allocator, vm_phys.c), `reserv` (superpage reservations, vm_reserv.c),
//! `physalloc` (vm_page_alloc and friends), `page` (the page array),
//! `object` (vm_object.c), `map` (vm_map.c), `mmap` (the memory syscalls,
//! vm_mmap.c),
//! `fault` (vm_fault.c), `pageout` (the page daemon, vm_pageout.c),
//! `swap` (the swap device and pager, swap_pager.c), `pmap` (the
//! interface every architecture's page-table code implements), and the
//! superpage policies (`policy`: FreeBSD's, Shimizu's, Linux THP) with the
//! mechanisms they share (`superpage`). Nothing here knows a descriptor
//! bit.

pub mod bittree;
pub mod fault;
pub mod kernel;
pub mod map;
pub mod mmap;
pub mod object;
pub mod page;
pub mod pageout;
pub mod phys;
pub mod physalloc;
pub mod pmap;
pub mod policy;
pub mod reserv;
pub mod superpage;
pub mod swap;
pub mod sysctl;

pub use fault::FaultError;
pub use kernel::{Kernel, OomKill, Pid};
pub use map::{Backing, Errno, MmapReq};
pub use pmap::{prot, Advice, Pmap, PmapEnv, PmapId, Prot};
