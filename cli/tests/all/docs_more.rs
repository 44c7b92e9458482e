//! The `$ mlx5` examples of docs/cli.md's `trace`, `caps`, `devices`, model
//! options and `completions`/`man` sections run as shown.

use crate::common::docs_examples;

#[test]
fn trace_examples() {
    assert!(docs_examples("## `trace`") >= 2);
}

#[test]
fn caps_examples() {
    assert!(docs_examples("## `caps`") >= 2);
}

#[test]
fn devices_examples() {
    assert!(docs_examples("## `devices`") >= 2);
}

#[test]
fn model_option_examples() {
    assert!(docs_examples("## Model options") >= 4);
}

#[test]
fn completions_and_man_examples() {
    assert!(docs_examples("## `completions` and `man`") >= 3);
}
