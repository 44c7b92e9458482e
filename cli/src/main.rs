//! `mlx5`: the command-line tool of the mlx5 driver. Runs on the built-in
//! device model (`--device sim[:PROFILE]`, the default) or on a ConnectX
//! bound to vfio-pci (`--device vfio:0000:03:00.0`); see `docs/cli.md`.
//! The code is the `mlx5_cli` library's.

fn main() {
    mlx5_cli::main()
}
