//! The simulated system and the tools that drive it: the access path and
//! timing (`system`), and the randomized checker against a reference model
//! (`check`).

pub mod access;
pub mod block;
pub mod core;
pub mod check;
pub mod refmodel;
pub mod system;
pub mod timing;

pub use access::{AccessError, Op};
pub use system::{Config, System, ThreadBalance};
