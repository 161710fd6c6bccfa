//! Running the `mfsched` binary as a user would.

use std::process::{Command, Output};

pub fn mfsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(args)
        .output()
        .expect("the mfsched binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
