//! The benchmarks' own checks: what a benchmark times does what the driver
//! does (same bytes, same completions). One test binary (`cargo test -p
//! mlx5-bench --test integration`), one module per file of this folder.

// The receive blocks of the facade benchmarks return the same completions.
mod facade_blocks;
// The raw send baseline writes the same ring bytes as the driver.
mod raw_send;
