//! End-to-end tests: they run the `mfsched` binary as a user would.

use std::process::{Command, Output};

fn mfsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(args)
        .output()
        .expect("the mfsched binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn scenario_show_paper_n5_prints_the_published_feasible_count() {
    let out = mfsched(&["scenario", "show", "paper-n5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("VRAM-feasible         78732"), "{text}");
    assert!(text.contains("llama7b"), "{text}");
}

#[test]
fn scenario_list_names_every_bundled_scenario() {
    let out = mfsched(&["scenario", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for n in 2..=6 {
        assert!(text.contains(&format!("paper-n{n}")), "{text}");
    }
}

#[test]
fn unknown_scenario_is_one_clear_line_and_a_failure() {
    let out = mfsched(&["scenario", "show", "paper-n9"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown scenario 'paper-n9'"), "{err}");
}
