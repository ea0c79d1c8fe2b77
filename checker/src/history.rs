//! A history: the JSON lines a trial's workers and its resource wrote (one event a line, in
//! any order; see README.md for the format), and the operations they pair into.

use serde::Deserialize;
use std::collections::HashMap;

/// One line of a history.
#[derive(Clone, Debug, Deserialize)]
pub struct Event {
    /// `invoke`, `ok`, `fail`, `info` (a worker's operation), `commit` (the resource's own
    /// record of an accepted write, in its commit order) or `initial` (a key's first value).
    #[serde(rename = "type")]
    pub kind: String,
    /// The operation: `acquire`, `renew`, `release`, `read`, `write`.
    #[serde(default)]
    pub f: String,
    /// The worker's process number: it has one operation at a time (a new number after `info`).
    #[serde(default)]
    pub process: u32,
    /// The worker's name (a holder is a worker and the token it was granted).
    #[serde(default)]
    pub worker: String,
    /// Pairs an `invoke` with its completion, unique within the process.
    #[serde(default)]
    pub op: u64,
    /// CLOCK_MONOTONIC, in nanoseconds (one machine: comparable across processes).
    #[serde(default)]
    pub time: i64,
    #[serde(default)]
    pub key: String,
    pub token: Option<i64>,
    /// A read's value; a write's value written; a commit's value written.
    pub value: Option<i64>,
    /// A commit: the value its writer had read before writing.
    pub read: Option<i64>,
    /// A write's completion: whether the resource accepted its token.
    pub accepted: Option<bool>,
    /// A commit: its place in the resource's commit order.
    pub seq: Option<u64>,
    /// A write or a commit: the grant it was made under (the worker's CLOCK_MONOTONIC time of
    /// the grant), so that a holder is known without a token too.
    pub grant: Option<i64>,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// It did not happen (a refused acquire, a lost connection before the request).
    Fail,
    /// Unknown whether it happened (a timeout, a connection lost during the request, or no
    /// completion at all: the worker died).
    Info,
}

/// An operation: an `invoke` with its completion.
#[derive(Clone, Debug)]
pub struct Operation {
    pub f: String,
    pub process: u32,
    pub worker: String,
    pub key: String,
    pub invoked: i64,
    /// i64::MAX without a completion.
    pub completed: i64,
    pub outcome: Outcome,
    pub token: Option<i64>,
    pub value: Option<i64>,
    pub accepted: Option<bool>,
    pub grant: Option<i64>,
}

/// A resource's record of one accepted write.
#[derive(Clone, Debug)]
pub struct Commit {
    pub key: String,
    pub seq: u64,
    pub worker: String,
    /// None for a lock without tokens.
    pub token: Option<i64>,
    pub grant: Option<i64>,
    pub read: i64,
    pub value: i64,
}

#[derive(Debug, Default)]
pub struct History {
    pub operations: Vec<Operation>,
    /// In commit order (by `seq`).
    pub commits: Vec<Commit>,
    pub initial: HashMap<String, i64>,
}

/// A line that is not an event, or an event that does not fit its history.
#[derive(Debug)]
pub struct Malformed(pub String);

impl History {
    /// The history in `text` (JSON lines).
    pub fn parse(text: &str) -> Result<History, Malformed> {
        let mut events = Vec::new();
        for (number, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let event: Event = serde_json::from_str(line)
                .map_err(|error| Malformed(format!("line {}: {error}", number + 1)))?;
            events.push(event);
        }
        History::of(events)
    }

    pub fn of(events: Vec<Event>) -> Result<History, Malformed> {
        let mut history = History::default();
        let mut open: HashMap<(u32, u64), Event> = HashMap::new();
        for event in events {
            match event.kind.as_str() {
                "invoke" => {
                    let id = (event.process, event.op);
                    if open.insert(id, event).is_some() {
                        return Err(Malformed(format!("operation {id:?} invoked twice")));
                    }
                }
                "ok" | "fail" | "info" => {
                    let id = (event.process, event.op);
                    let invoke = open
                        .remove(&id)
                        .ok_or_else(|| Malformed(format!("{id:?} ended, never invoked")))?;
                    history
                        .operations
                        .push(Operation::of(&invoke, Some(&event)));
                }
                "commit" => history.commits.push(Commit {
                    key: event.key.clone(),
                    seq: event
                        .seq
                        .ok_or_else(|| Malformed("a commit without seq".into()))?,
                    worker: event.worker.clone(),
                    token: event.token,
                    grant: event.grant,
                    read: event
                        .read
                        .ok_or_else(|| Malformed("a commit without read".into()))?,
                    value: event
                        .value
                        .ok_or_else(|| Malformed("a commit without value".into()))?,
                }),
                "initial" => {
                    let value = event
                        .value
                        .ok_or_else(|| Malformed("an initial value without value".into()))?;
                    history.initial.insert(event.key, value);
                }
                other => return Err(Malformed(format!("unknown event type {other:?}"))),
            }
        }
        // Never completed: the worker died, or was killed, while it ran.
        let mut unfinished: Vec<Event> = open.into_values().collect();
        unfinished.sort_by_key(|event| (event.time, event.process, event.op));
        (history.operations).extend(unfinished.iter().map(|invoke| Operation::of(invoke, None)));
        history
            .operations
            .sort_by_key(|op| (op.invoked, op.process));
        history.commits.sort_by_key(|commit| commit.seq);
        Ok(history)
    }
}

impl Operation {
    fn of(invoke: &Event, completion: Option<&Event>) -> Operation {
        let outcome = match completion.map(|event| event.kind.as_str()) {
            Some("ok") => Outcome::Ok,
            Some("fail") => Outcome::Fail,
            _ => Outcome::Info,
        };
        let either =
            |field: fn(&Event) -> Option<i64>| completion.and_then(field).or_else(|| field(invoke));
        Operation {
            f: invoke.f.clone(),
            process: invoke.process,
            worker: invoke.worker.clone(),
            key: invoke.key.clone(),
            invoked: invoke.time,
            completed: completion.map_or(i64::MAX, |event| event.time),
            outcome,
            token: either(|event| event.token),
            value: either(|event| event.value),
            accepted: completion.and_then(|event| event.accepted),
            grant: either(|event| event.grant),
        }
    }
}
