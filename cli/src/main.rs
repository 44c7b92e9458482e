//! `mlx5`: command-line tool for the mlx5 driver (issue #8).
fn main() {
    eprintln!("mlx5: the command-line tool arrives with issue #8; nothing to run yet");
    std::process::exit(2);
}
