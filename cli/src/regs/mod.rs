//! Firmware commands built and read by field name, from the mlx5-regs
//! layouts: discovery (`cmd --list`, `--show-fields`), field assignments
//! (`name[i].sub=value`) and what the tool fills in for the commands that
//! point at memory.

pub mod discover;
pub mod fields;
pub mod fill;
