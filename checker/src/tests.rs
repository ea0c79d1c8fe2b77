//! The checker on small hand-made histories: each kind of violation is caught, and histories
//! that are legal (concurrent grants in any order, indeterminate operations, a refused stale
//! write) pass. A checker that passed every history would fail here.

use crate::{check, harmful_events, History, Kind};
use serde_json::json;

/// A history under construction: events as the workers and the resource write them.
#[derive(Default)]
struct Trial {
    lines: Vec<String>,
    next_op: u64,
    seq: u64,
    /// Each worker's latest grant (its completion time), which its writes name.
    grants: std::collections::HashMap<String, i64>,
}

impl Trial {
    fn event(&mut self, value: serde_json::Value) {
        self.lines.push(value.to_string());
    }

    /// An operation of `worker` (its process number is `process`) from `start` to `end`
    /// (None: never completed) ending as `outcome`, with `fields` on its completion.
    fn op(
        &mut self,
        (worker, process): (&str, u32),
        f: &str,
        key: &str,
        (start, end): (i64, Option<i64>),
        outcome: &str,
        fields: serde_json::Value,
    ) {
        self.next_op += 1;
        let op = self.next_op;
        let mut invoke = json!({"type": "invoke", "f": f, "worker": worker, "process": process,
                                "op": op, "time": start, "key": key});
        if f == "write" {
            invoke["token"] = fields["token"].clone();
            invoke["value"] = fields["value"].clone();
        }
        self.event(invoke);
        if let Some(end) = end {
            let mut completion = json!({"type": outcome, "f": f, "worker": worker,
                                        "process": process, "op": op, "time": end, "key": key});
            for (name, value) in fields.as_object().unwrap() {
                completion[name] = value.clone();
            }
            self.event(completion);
        }
    }

    fn grant(&mut self, worker: (&str, u32), key: &str, at: (i64, i64), token: i64) {
        self.grants.insert(worker.0.to_string(), at.1);
        self.op(
            worker,
            "acquire",
            key,
            (at.0, Some(at.1)),
            "ok",
            json!({"token": token}),
        );
    }

    /// A write by `worker` with `token`, accepted or refused; an accepted one is committed by
    /// the resource with what the worker read (`read`) and wrote (`value`).
    fn write(
        &mut self,
        worker: (&str, u32),
        key: &str,
        at: (i64, i64),
        token: i64,
        (read, value): (i64, i64),
        accepted: bool,
    ) {
        let grant = self.grants.get(worker.0).copied();
        let fields = json!({"token": token, "value": value, "accepted": accepted, "grant": grant});
        self.op(worker, "write", key, (at.0, Some(at.1)), "ok", fields);
        if accepted {
            self.seq += 1;
            self.event(
                json!({"type": "commit", "f": "write", "key": key, "seq": self.seq,
                              "worker": worker.0, "token": token, "read": read,
                              "value": value, "grant": grant}),
            );
        }
    }

    fn kinds(&self) -> Vec<Kind> {
        let history = History::parse(&self.lines.join("\n")).expect("a well-formed history");
        let mut kinds: Vec<Kind> = check(&history).iter().map(|v| v.kind).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

const A: (&str, u32) = ("a", 1);
const B: (&str, u32) = ("b", 2);
const C: (&str, u32) = ("c", 3);

/// Two holders one after the other, each granted, writing the next value, releasing.
fn two_turns() -> Trial {
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.write(A, "k", (20, 30), 100, (0, 1), true);
    trial.op(A, "release", "k", (31, Some(35)), "ok", json!({}));
    trial.grant(B, "k", (40, 50), 101);
    trial.write(B, "k", (60, 70), 101, (1, 2), true);
    trial
}

#[test]
fn a_clean_history_passes() {
    assert_eq!(two_turns().kinds(), vec![]);
}

#[test]
fn a_repeated_token_is_not_linearizable() {
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.grant(B, "k", (20, 30), 100);
    assert_eq!(
        trial.kinds(),
        vec![Kind::TokensNotLinearizable, Kind::TokenRepeated]
    );
}

#[test]
fn a_token_repeated_on_another_key_is_caught() {
    // After a failover that lost tokens: the rest of the application's key got 100 before
    // it, the hot key gets 100 again. Each key's tokens alone rise.
    let mut trial = Trial::default();
    trial.grant(A, "rest", (0, 10), 100);
    trial.grant(B, "k", (20, 30), 100);
    assert_eq!(trial.kinds(), vec![Kind::TokenRepeated]);
}

#[test]
fn a_token_that_went_back_in_real_time_is_not_linearizable() {
    // After a failover that lost tokens: a grant that began after another ended got a smaller
    // token.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 500);
    trial.grant(B, "k", (20, 30), 400);
    assert_eq!(trial.kinds(), vec![Kind::TokensNotLinearizable]);
}

#[test]
fn concurrent_grants_may_be_ordered_either_way() {
    // B's grant overlaps A's in time: B's smaller token may have been drawn first.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 30), 500);
    trial.grant(B, "k", (10, 20), 400);
    trial.grant(C, "k", (40, 50), 600);
    assert_eq!(trial.kinds(), vec![]);
}

#[test]
fn keys_are_checked_apart() {
    // Tokens rise per key: another key's smaller token later is no violation.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 500);
    trial.grant(B, "other", (20, 30), 400);
    assert_eq!(trial.kinds(), vec![]);
}

#[test]
fn indeterminate_and_failed_acquires_constrain_nothing() {
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 500);
    // B's acquire timed out (info), C's was refused (fail), a fourth never completed.
    trial.op(B, "acquire", "k", (20, Some(30)), "info", json!({}));
    trial.op(C, "acquire", "k", (25, Some(28)), "fail", json!({}));
    trial.op(("d", 4), "acquire", "k", (26, None), "info", json!({}));
    trial.grant(("e", 5), "k", (40, 50), 501);
    assert_eq!(trial.kinds(), vec![]);
}

#[test]
fn a_refused_stale_write_is_the_lock_working() {
    // A paused past its lease: B took over; A's late write is refused.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.grant(B, "k", (40, 50), 101);
    trial.write(B, "k", (60, 70), 101, (0, 1), true);
    trial.write(A, "k", (80, 90), 100, (0, 1), false);
    assert_eq!(trial.kinds(), vec![]);
}

#[test]
fn an_accepted_stale_write_is_caught() {
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.grant(B, "k", (40, 50), 101);
    trial.write(B, "k", (60, 70), 101, (0, 1), true);
    // The resource accepted A's smaller token after B's: also a lost update (A read 0), and
    // A held the resource (granted at 10, written at 90) while B did.
    trial.write(A, "k", (80, 90), 100, (0, 1), true);
    assert_eq!(
        trial.kinds(),
        vec![Kind::StaleWriteAccepted, Kind::LostUpdate, Kind::TwoHolders]
    );
}

#[test]
fn one_token_from_two_holders_is_caught() {
    // A lock without fencing hands the same token (or none, 0) to two holders.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 7);
    trial.write(A, "k", (20, 30), 7, (0, 1), true);
    trial.write(B, "k", (40, 50), 7, (1, 2), true);
    assert_eq!(trial.kinds(), vec![Kind::TokenOfTwoHolders]);
}

#[test]
fn one_token_granted_to_one_worker_twice_is_two_holders() {
    // A worker's second grant (another key, after a failover) repeats its first token: its
    // writes under each grant are two holders' writes.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 7);
    trial.write(A, "k", (20, 30), 7, (0, 1), true);
    trial.grant(A, "j", (40, 50), 7);
    trial.write(A, "j", (60, 70), 7, (0, 1), true);
    assert_eq!(
        trial.kinds(),
        vec![Kind::TokenRepeated, Kind::TokenOfTwoHolders]
    );
}

#[test]
fn one_commit_that_breaks_several_rules_is_one_event() {
    // The accepted stale write is also a lost update: one event through to the resource.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.grant(B, "k", (40, 50), 101);
    trial.write(B, "k", (60, 70), 101, (0, 1), true);
    trial.write(A, "k", (80, 90), 100, (0, 1), true);
    let history = History::parse(&trial.lines.join("\n")).unwrap();
    assert_eq!(harmful_events(&check(&history)), 1);
    assert_eq!(harmful_events(&check(&two_turns_history())), 0);
}

fn two_turns_history() -> History {
    History::parse(&two_turns().lines.join("\n")).unwrap()
}

#[test]
fn the_same_holder_writing_twice_with_its_token_is_allowed() {
    let mut trial = two_turns();
    trial.write(B, "k", (71, 75), 101, (2, 3), true);
    assert_eq!(trial.kinds(), vec![]);
}

#[test]
fn a_lost_update_is_caught_exactly() {
    // Both read 0 and wrote 1, in token order: each write alone is fine; the second lost the
    // first's update.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.grant(B, "k", (40, 50), 101);
    trial.write(A, "k", (15, 20), 100, (0, 1), true);
    trial.write(B, "k", (55, 60), 101, (0, 1), true);
    assert_eq!(trial.kinds(), vec![Kind::LostUpdate]);
}

#[test]
fn an_initial_value_is_honoured() {
    let mut trial = Trial::default();
    trial.event(json!({"type": "initial", "key": "k", "value": 41}));
    trial.grant(A, "k", (0, 10), 100);
    trial.write(A, "k", (20, 30), 100, (41, 42), true);
    assert_eq!(trial.kinds(), vec![]);
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.write(A, "k", (20, 30), 100, (41, 42), true);
    assert_eq!(trial.kinds(), vec![Kind::LostUpdate]);
}

#[test]
fn overlapping_holders_are_caught() {
    // B was granted while A, granted before, had yet to finish its accepted write.
    let mut trial = Trial::default();
    trial.grant(A, "k", (0, 10), 100);
    trial.grant(B, "k", (20, 30), 101);
    trial.write(B, "k", (35, 40), 101, (0, 1), true);
    trial.write(A, "k", (25, 50), 100, (1, 2), true);
    assert!(
        trial.kinds().contains(&Kind::TwoHolders),
        "{:?}",
        trial.kinds()
    );
}

#[test]
fn malformed_histories_are_refused() {
    for text in [
        "not json",
        r#"{"type": "ok", "f": "acquire", "process": 1, "op": 1, "time": 1}"#,
        r#"{"type": "commit", "key": "k", "seq": 1, "worker": "a", "token": 1}"#,
        r#"{"type": "bogus"}"#,
    ] {
        assert!(History::parse(text).is_err(), "{text}");
    }
}

#[test]
fn a_lock_without_tokens_is_checked_by_its_grants() {
    // Redis-style: no tokens; writes name their grant. A paused past its TTL, B granted, both
    // write what they read: two holders, and B's update lost.
    let mut trial = Trial::default();
    let write = |trial: &mut Trial, worker: (&str, u32), at: (i64, i64), grant: i64, read| {
        let fields = json!({"value": read + 1, "accepted": true, "grant": grant});
        trial.op(worker, "write", "k", (at.0, Some(at.1)), "ok", fields);
        trial.seq += 1;
        let seq = trial.seq;
        trial.event(
            json!({"type": "commit", "key": "k", "seq": seq, "worker": worker.0,
                           "grant": grant, "read": read, "value": read + 1}),
        );
    };
    trial.op(A, "acquire", "k", (0, Some(10)), "ok", json!({}));
    trial.op(B, "acquire", "k", (40, Some(50)), "ok", json!({}));
    write(&mut trial, B, (60, 70), 50, 0);
    write(&mut trial, A, (80, 90), 10, 0);
    assert_eq!(trial.kinds(), vec![Kind::LostUpdate, Kind::TwoHolders]);
}
