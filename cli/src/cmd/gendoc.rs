//! `mlx5 completions SHELL` and `mlx5 man [SUBCOMMAND]`: generated from the
//! clap definitions of the command line (given by `crate::app`), so they
//! cannot drift from the options.

use serde_json::{json, Value};

use crate::common::error::CliError;

/// The completion script for `shell`.
/// `top` is the whole command line's definition.
pub fn completions(
    mut cmd: clap::Command,
    shell: clap_complete::Shell,
    json_mode: bool,
) -> (Value, Result<(), CliError>) {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "mlx5", &mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    if json_mode {
        return (json!({"shell": shell.to_string(), "script": text}), Ok(()));
    }
    outp!("{text}");
    (Value::Null, Ok(()))
}

/// The man page of the tool, or of one subcommand (`mlx5-caps(1)`); `top`
/// is the whole command line's definition, with its version.
pub fn man(
    mut top: clap::Command,
    sub: Option<&str>,
    json_mode: bool,
) -> (Value, Result<(), CliError>) {
    let version = top.get_version().unwrap_or_default().to_string();
    // Propagate the global options into the subcommands' pages.
    top.build();
    let page = match sub {
        None => top,
        Some(name) => {
            let names: Vec<String> = top
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
            let Some(c) = top.find_subcommand(name) else {
                let near = crate::common::text::suggest(name, names.iter().map(String::as_str), 3);
                return (
                    Value::Null,
                    Err(CliError::usage(
                        format!("no subcommand '{}'", crate::common::error::quote(name)),
                        if near.is_empty() {
                            format!("the subcommands: {}", names.join(", "))
                        } else {
                            format!("did you mean: {}?", near.join(", "))
                        },
                    )),
                );
            };
            c.clone().name(format!("mlx5-{name}")).version(version)
        }
    };
    let mut buf = Vec::new();
    if let Err(e) = clap_mangen::Man::new(page).render(&mut buf) {
        return (
            Value::Null,
            Err(CliError::failed(
                format!("rendering the man page: {e}"),
                "a bug",
            )),
        );
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    if json_mode {
        return (json!({"man": text}), Ok(()));
    }
    outp!("{text}");
    (Value::Null, Ok(()))
}
