//! One module per subcommand. A subcommand's module takes the parsed
//! options, the device (a `Hal`) and the session environment, and returns
//! its JSON value and result; `crate::app` does the rest.

pub mod caps;
pub mod command;
pub mod decode;
pub mod demo;
pub mod devices;
pub mod gendoc;
pub mod peer;
pub mod perf;
pub mod pingpong;
pub mod replay;
pub mod run;
pub mod selftest;
pub mod stats;
pub mod trace;
