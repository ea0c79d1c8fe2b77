//! check-histories as the suites run it: its exit status and its summary line.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

fn run(arguments: &[&str], history: &str) -> (i32, String) {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "check-histories-{}-{}.jsonl",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, history).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_check-histories"))
        .args(arguments)
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

const REPEATED: &str = r#"{"type":"invoke","f":"acquire","worker":"a","process":1,"op":1,"time":0,"key":"k"}
{"type":"ok","f":"acquire","worker":"a","process":1,"op":1,"time":10,"key":"k","token":5}
{"type":"invoke","f":"acquire","worker":"b","process":2,"op":1,"time":20,"key":"k"}
{"type":"ok","f":"acquire","worker":"b","process":2,"op":1,"time":30,"key":"k","token":5}
"#;

#[test]
fn a_violation_fails_the_run_unless_reported_only() {
    let (status, summary) = run(&[], REPEATED);
    assert_eq!(status, 1, "{summary}");
    let summary: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    assert_eq!(summary["violations"]["tokens_not_linearizable"], 1);
    assert_eq!(summary["operations"], 2);
    assert_eq!(run(&["--report"], REPEATED).0, 0);
}

#[test]
fn a_clean_history_passes_and_a_malformed_one_is_an_error() {
    let clean = REPEATED.replace(
        r#""token":5}
{"type":"invoke","f":"acquire","worker":"b""#,
        r#""token":4}
{"type":"invoke","f":"acquire","worker":"b""#,
    );
    let (status, summary) = run(&[], &clean);
    assert_eq!(status, 0, "{summary}");
    assert_eq!(run(&["--report"], "{").0, 2);
}
