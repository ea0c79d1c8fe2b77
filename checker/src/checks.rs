//! What a lock with fencing tokens must never show in a history, each check a function:
//! the tokens of each key as a linearizable counter (porcupine-rs decides), and the lock's own
//! rules at the resource, which linearizability of the tokens alone does not cover.

use crate::history::{Commit, History, Operation, Outcome};
use porcupine_rs::{CheckResult, Model};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The kinds of violation, as the summaries name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The tokens granted for a key are no linearizable counter: a grant that began after
    /// another had ended got a token that is not larger (a repeated token too).
    TokensNotLinearizable,
    /// One token granted twice, on any keys: the tokens are one sequence, never issued twice.
    TokenRepeated,
    /// porcupine-rs did not decide within its time limit (counted as a failure: a check that
    /// cannot decide proves nothing).
    Undecided,
    /// The resource accepted a write whose token is below one it had accepted before.
    StaleWriteAccepted,
    /// The resource accepted writes with one token from two holders (a holder is a worker
    /// and its grant), on any keys.
    TokenOfTwoHolders,
    /// An accepted write had not read the value of the accepted write before it (in the
    /// resource's commit order): an update was lost.
    LostUpdate,
    /// Two holders of a key were granted and wrote with overlapping grant-to-write intervals.
    TwoHolders,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::TokensNotLinearizable => "tokens_not_linearizable",
            Kind::TokenRepeated => "token_repeated",
            Kind::Undecided => "undecided",
            Kind::StaleWriteAccepted => "stale_write_accepted",
            Kind::TokenOfTwoHolders => "token_of_two_holders",
            Kind::LostUpdate => "lost_update",
            Kind::TwoHolders => "two_holders",
        }
    }
}

impl Kind {
    /// What a resource cannot undo once it happened (two holders at once happen with any
    /// lease: the resource refuses the older one's writes).
    pub fn harmful(self) -> bool {
        matches!(
            self,
            Kind::StaleWriteAccepted | Kind::LostUpdate | Kind::TokenOfTwoHolders
        )
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: Kind,
    pub key: String,
    pub detail: String,
    /// The resource's commit that violated the rule, where one did: one commit can break
    /// several rules and is still one event.
    pub commit: Option<u64>,
}

/// How long porcupine-rs may search one key's history.
const LINEARIZABILITY_LIMIT: Duration = Duration::from_secs(30);

/// Every violation in `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut violations = tokens_linearizable(history);
    violations.extend(tokens_repeated(history));
    violations.extend(resource_rules(history));
    violations.extend(two_holders(history));
    violations
}

/// What got through to the resource, as events: a commit that broke several harmful rules
/// (a stale write accepted is a lost update too) is one event.
pub fn harmful_events(violations: &[Violation]) -> usize {
    let mut commits = std::collections::HashSet::new();
    (violations.iter().filter(|v| v.kind.harmful()))
        .filter(|v| v.commit.is_none_or(|seq| commits.insert(seq)))
        .count()
}

/// The tokens of a key as a counter that only rises: each grant's token is above the one
/// linearized before it.
#[derive(Clone)]
struct RisingTokens;

impl Model for RisingTokens {
    /// The last token granted (i64::MIN before the first).
    type State = i64;
    /// A grant's token.
    type Op = i64;
    type Metadata = String;

    fn init() -> i64 {
        i64::MIN
    }

    fn step(last: &i64, token: &i64) -> (bool, i64) {
        (token > last, *token)
    }
}

/// porcupine-rs on each key's grants. Only completed grants take part: an acquire that failed
/// granted nothing, and one whose outcome is unknown (info) constrains nothing that a
/// completed grant's token does not (it may or may not have taken a token in between).
fn tokens_linearizable(history: &History) -> Vec<Violation> {
    let mut by_key: BTreeMap<&str, Vec<porcupine_rs::Operation<RisingTokens>>> = BTreeMap::new();
    for op in grants(history) {
        by_key
            .entry(op.key.as_str())
            .or_default()
            .push(porcupine_rs::Operation {
                client_id: Some(op.process),
                call_time: op.invoked,
                return_time: op.completed,
                op: op.token.expect("a grant has a token"),
                metadata: Some(op.worker.clone()),
            });
    }
    let mut violations = Vec::new();
    for (key, operations) in by_key {
        let verdict = porcupine_rs::check_operations_timeout(&operations, LINEARIZABILITY_LIMIT);
        let kind = match verdict {
            CheckResult::Ok => continue,
            CheckResult::Illegal => Kind::TokensNotLinearizable,
            CheckResult::Unknown => Kind::Undecided,
        };
        violations.push(Violation {
            kind,
            key: key.to_string(),
            detail: format!("{} grants", operations.len()),
            commit: None,
        });
    }
    violations
}

/// Completed grants of one token, on any keys (porcupine-rs sees one key at a time).
fn tokens_repeated(history: &History) -> Vec<Violation> {
    let mut first: HashMap<i64, &Operation> = HashMap::new();
    let mut violations = Vec::new();
    for op in grants(history) {
        let token = op.token.expect("a grant has a token");
        match first.get(&token) {
            None => {
                first.insert(token, op);
            }
            Some(earlier) => violations.push(Violation {
                kind: Kind::TokenRepeated,
                key: op.key.clone(),
                detail: format!(
                    "token {token} granted to {} on {} and to {} on {}",
                    earlier.worker, earlier.key, op.worker, op.key
                ),
                commit: None,
            }),
        }
    }
    violations
}

/// Completed acquires with a token.
fn grants(history: &History) -> impl Iterator<Item = &Operation> {
    (history.operations.iter())
        .filter(|op| op.f == "acquire" && op.outcome == Outcome::Ok && op.token.is_some())
}

/// Writes the resource accepted, as the workers saw them (a holder is a worker and a token).
fn accepted_writes(history: &History) -> impl Iterator<Item = &Operation> {
    (history.operations.iter())
        .filter(|op| op.f == "write" && op.outcome == Outcome::Ok && op.accepted == Some(true))
}

/// The rules at the resource, in its own commit order: no stale token accepted, one holder
/// per accepted token, and every accepted write read its predecessor's value.
fn resource_rules(history: &History) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Commit>> = BTreeMap::new();
    for commit in &history.commits {
        by_key.entry(commit.key.as_str()).or_default().push(commit);
    }
    for (key, commits) in &by_key {
        // The highest token accepted so far, and its commit (tokenless writes have none).
        let mut highest: Option<(i64, &Commit)> = None;
        let mut value = history.initial.get(*key).copied().unwrap_or(0);
        for commit in commits {
            if let Some(token) = commit.token {
                if let Some((top, before)) = highest.filter(|&(top, _)| token < top) {
                    violations.push(Violation {
                        kind: Kind::StaleWriteAccepted,
                        key: key.to_string(),
                        detail: format!(
                            "commit {} by {} with token {token} after commit {} with token {top}",
                            commit.seq, commit.worker, before.seq
                        ),
                        commit: Some(commit.seq),
                    });
                }
                if highest.is_none_or(|(top, _)| token > top) {
                    highest = Some((token, commit));
                }
            }
            if commit.read != value {
                violations.push(Violation {
                    kind: Kind::LostUpdate,
                    key: key.to_string(),
                    detail: format!(
                        "commit {} by {} read {} where the value was {value}",
                        commit.seq, commit.worker, commit.read
                    ),
                    commit: Some(commit.seq),
                });
            }
            value = commit.value;
        }
    }
    // One holder per token, on any keys: the resource's commits, and the writes workers saw
    // accepted (a holder is a worker and its grant; without the grant, the worker).
    let mut holders: HashMap<i64, (&str, Option<i64>)> = HashMap::new();
    let written = (history.commits.iter())
        .filter_map(|c| Some((c.token?, (c.worker.as_str(), c.grant), Some(c.seq), &c.key)))
        .chain(
            accepted_writes(history)
                .filter_map(|op| Some((op.token?, (op.worker.as_str(), op.grant), None, &op.key))),
        );
    let mut reported = std::collections::HashSet::new();
    for (token, holder, seq, key) in written {
        let first = *holders.entry(token).or_insert(holder);
        if first != holder && reported.insert(token) {
            violations.push(Violation {
                kind: Kind::TokenOfTwoHolders,
                key: key.clone(),
                detail: format!(
                    "token {token} accepted from {} (grant {:?}) and {} (grant {:?})",
                    first.0, first.1, holder.0, holder.1
                ),
                commit: seq,
            });
        }
    }
    violations
}

/// Two holders of one key whose grant-to-write intervals overlap: from the grant to the
/// completion of the holder's last accepted write (a holder whose writes were all refused
/// never held the resource). A write names its grant (`grant`: the worker's time of it);
/// without one, it is the completion of the worker's grant of the write's token.
fn two_holders(history: &History) -> Vec<Violation> {
    let grant_of_token: HashMap<(&str, &str, i64), i64> = grants(history)
        .map(|op| {
            let token = op.token.expect("a grant has a token");
            ((op.key.as_str(), op.worker.as_str(), token), op.completed)
        })
        .collect();
    // Each holding, (key, worker, grant time): the completion of its last accepted write.
    let mut last_write: HashMap<(&str, &str, i64), i64> = HashMap::new();
    for op in accepted_writes(history) {
        let (key, worker) = (op.key.as_str(), op.worker.as_str());
        let granted = (op.grant).or_else(|| grant_of_token.get(&(key, worker, op.token?)).copied());
        if let Some(granted) = granted {
            let end = last_write.entry((key, worker, granted)).or_insert(i64::MIN);
            *end = (*end).max(op.completed);
        }
    }
    let mut by_key: BTreeMap<&str, Vec<(i64, i64, &str)>> = BTreeMap::new();
    for (&(key, worker, granted), &end) in &last_write {
        by_key.entry(key).or_default().push((granted, end, worker));
    }
    let mut violations = Vec::new();
    for (key, mut holdings) in by_key {
        holdings.sort();
        for (i, a) in holdings.iter().enumerate() {
            // Sorted by grant: b was granted at or after a; they overlap if before a's end.
            for b in holdings[i + 1..].iter().take_while(|b| b.0 < a.1) {
                violations.push(Violation {
                    kind: Kind::TwoHolders,
                    key: key.to_string(),
                    detail: format!(
                        "{} (granted at {}) and {} (granted at {}) held it at once",
                        a.2, a.0, b.2, b.0
                    ),
                    commit: None,
                });
            }
        }
    }
    violations
}
