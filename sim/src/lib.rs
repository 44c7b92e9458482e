//! # mlx5-sim
//!
//! The strict device model of the ConnectX firmware. Lands with issue #3;
//! today it is empty.
