//! `--log-format json` gives one format on stderr: fatal errors, the
//! problem list of `nilb check` and libbpf's own messages are JSON lines
//! too (before: plain text and raw `libbpf:` lines). Runs the built binary.

mod common;

use std::process::{Command, Output};

use common::require_root;

fn nilb(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nilb"))
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("running nilb")
}

/// `nilb ARGS` in a network namespace of its own (`unshare --net`: only a
/// loopback interface), so nothing outside the test is touched.
fn nilb_in_netns(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("unshare")
        .arg("--net")
        .arg(env!("CARGO_BIN_EXE_nilb"))
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("running nilb")
}

/// Every non-empty stderr line, parsed as JSON (panics on a line that is
/// not).
fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn check_problems_are_json_lines() {
    let dir = std::env::temp_dir().join(format!("nilb-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "version: 1\ncluster: {balancers: [10.0.0.11], bogus: 1}\nservices:\n  - {name: web, vip: 10.0.0.100, port: 0, protocol: tcp}\n",
    )
    .unwrap();
    let out = nilb(
        &[
            "--log-format",
            "json",
            "check",
            "--config",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let lines = json_lines(&out);
    let paths: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["path"].as_str())
        .collect();
    assert_eq!(paths, ["cluster.bogus", "services[0].port"], "{lines:#?}");
    assert!(lines.iter().all(|l| l["level"] == "ERROR"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fatal_errors_are_json() {
    let out = nilb(
        &[
            "--log-format",
            "json",
            "status",
            "--state-file",
            "/nonexistent/nilb/state.yaml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0]["fields"]["error"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/nilb/state.yaml"));
    // Text mode keeps its one line.
    let out = nilb(
        &["status", "--state-file", "/nonexistent/nilb/state.yaml"],
        &[],
    );
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("nilb: error: "));
}

#[test]
fn libbpf_messages_go_through_the_logger() {
    require_root!("netlink queries of an interface's programs");
    let dir = std::env::temp_dir().join(format!("nilb-cli-pins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pins = dir.join("nilb");
    let args = [
        "--log-format",
        "json",
        "cleanup",
        "--interface",
        "lo",
        "--pin-dir",
        pins.to_str().unwrap(),
    ];
    // Asking for the TC filter of an interface without clsact makes libbpf
    // print the kernel's answer ("Parent Qdisc doesn't exists"): a debug
    // event now, not a raw `libbpf:` line.
    let out = nilb_in_netns(&args, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = nilb_in_netns(&args, &[("RUST_LOG", "debug")]);
    let lines = json_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["source"] == "libbpf" && l["level"] == "DEBUG"),
        "{lines:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
