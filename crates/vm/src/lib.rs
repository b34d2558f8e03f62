pub mod bittree;
pub mod phys;
