//! The integration tests of `mlx5-regs`: one test binary (`cargo test -p
//! mlx5-regs --test integration`), one module per file of this folder.
//! `data/` holds the kernel-derived layout tables `csv_layouts` checks
//! against; `tests/README.md` at the top of the repository says what to run
//! for what.

// The typed accessors, the decoder and the hexdump.
mod accessors;
// Every layout against the kernel-derived CSVs.
mod csv_layouts;
// The queue-pair, memory-key and vport commands at Linux's byte offsets.
mod qp_layouts;
