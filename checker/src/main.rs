//! `check-histories [--report] FILE...`: checks each history file and prints one JSON line per
//! file: its operations and commits, its violations by kind (with the first few in words),
//! and how many events got through to the resource (commits that broke a harmful rule). Exits 1 when any file has a violation (never with --report, for the systems whose
//! violations are the result), 2 when a file cannot be read or is not a history.

use fenced_lock_checker::{check, harmful_events, History, Kind};
use std::collections::BTreeMap;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut arguments: Vec<String> = std::env::args().skip(1).collect();
    let report_only = arguments.first().is_some_and(|a| a == "--report");
    if report_only {
        arguments.remove(0);
    }
    if arguments.is_empty() {
        eprintln!("usage: check-histories [--report] FILE...");
        return ExitCode::from(2);
    }
    let mut violated = false;
    for path in &arguments {
        let history = match std::fs::read_to_string(path)
            .map_err(|error| error.to_string())
            .and_then(|text| History::parse(&text).map_err(|malformed| malformed.0))
        {
            Ok(history) => history,
            Err(error) => {
                eprintln!("{path}: {error}");
                return ExitCode::from(2);
            }
        };
        let violations = check(&history);
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for violation in &violations {
            *by_kind.entry(violation.kind.name()).or_default() += 1;
        }
        let examples: Vec<String> = (violations.iter().take(5))
            .map(|v| format!("{} on {}: {}", v.kind.name(), v.key, v.detail))
            .collect();
        let undecided = violations.iter().any(|v| v.kind == Kind::Undecided);
        println!(
            "{}",
            serde_json::json!({
                "file": path,
                "operations": history.operations.len(),
                "commits": history.commits.len(),
                "violations": by_kind,
                "examples": examples,
                "undecided": undecided,
                "harmful_events": harmful_events(&violations),
            })
        );
        violated |= !violations.is_empty();
    }
    match violated && !report_only {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    }
}
