//! # mlx5-driver
//!
//! Register-level, `no_std`, heap-free driver for ConnectX (mlx5) NICs.
//! The command interface, bring-up, EQ/CQ/SRQ and the verbs facade land in
//! this crate through issues #4, #5 and #6; today it is empty.
#![no_std]

pub mod cq;
pub mod srq;
