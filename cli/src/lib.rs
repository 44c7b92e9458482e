//! # mlx5-cli
//!
//! The `mlx5` command-line tool of the mlx5 driver (the binary target; see
//! `docs/cli.md`). This library target holds no code: it compiles the
//! code examples of the workspace README as doc tests, so the README's
//! library example keeps building against the real API.

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
