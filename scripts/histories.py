"""Histories for the checker (checker/README.md), shared by the failure experiments of
`make compare` and `make ha`: each worker writes its operations with `History`, and
`check_trial` merges a trial's worker histories with the resource's commits into one file and
reads the checker's verdict on it."""

import json
import os
import subprocess
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Built by `make compare` and `make ha` (cargo build --manifest-path checker/Cargo.toml).
CHECKER = os.path.join(ROOT, "target", "checker", "debug", "check-histories")


class History:
    """One worker's operations, one JSON line per event. Each of the worker's threads that
    calls the lock service (its main loop, a renewing watchdog) is a process of its own; after
    an operation whose outcome is unknown (info), the worker's processes are new ones, as
    Jepsen's are."""

    def __init__(self, path, worker):
        self.out = open(path, "a", buffering=1)
        self.worker = worker
        self.base = zlib.crc32(worker.encode()) % 4000 * 1_000_000
        self.incarnation = 0
        self.ops = 0
        self.open = set()
        self.guard = threading.Lock()

    def invoke(self, f, key, watchdog=False, **fields):
        with self.guard:
            self.ops += 1
            handle = (self.base + 2 * self.incarnation + watchdog, self.ops, f, key)
            self.open.add(handle)
        self.event("invoke", handle, fields)
        return handle

    def end(self, handle, kind, **fields):
        with self.guard:
            if handle not in self.open:
                return
            self.open.discard(handle)
            if kind == "info":
                self.incarnation += 1
        self.event(kind, handle, fields)

    def abandon(self, error, code, lost):
        """An error ended the cycle: every open operation ends as unknown (info) when the
        service went away (`lost`), as failed when the server refused it with an error of
        its own (`code`)."""
        for handle in sorted(self.open):
            self.end(handle, "info" if lost else "fail", error=type(error).__name__, code=code)

    def event(self, kind, handle, fields):
        process, op, f, key = handle
        line = json.dumps({"type": kind, "f": f, "worker": self.worker, "process": process,
                           "op": op, "time": time.monotonic_ns(), "key": str(key), **fields})
        with self.guard:
            self.out.write(line + "\n")


def history_of(log):
    """Where a worker whose events log is `log` writes its history."""
    return log.rsplit(".", 1)[0] + ".history"


def read_history(path):
    """A history file's events (none when the worker never wrote one)."""
    try:
        with open(path) as history:
            return [json.loads(line) for line in history if line.strip()]
    except FileNotFoundError:
        return []


def check_trial(path, worker_histories, commits):
    """Writes the trial's history to `path` (its workers' histories, then the resource's
    accepted writes in commit order: (seq, key, worker, token, grant, read) each) and returns
    the checker's summary (violations by kind, harmful events), or None when it could not
    read the history."""
    with open(path, "w") as history:
        for worker in worker_histories:
            try:
                with open(worker) as lines:
                    history.writelines(lines)
            except FileNotFoundError:
                pass
        for seq, key, worker, token, grant, read in commits:
            history.write(json.dumps({"type": "commit", "f": "write", "key": str(key),
                                      "seq": seq, "worker": worker, "token": token,
                                      "grant": grant, "read": read, "value": read + 1}) + "\n")
    checked = subprocess.run([CHECKER, "--report", path], capture_output=True, text=True)
    if checked.returncode != 0:
        print(f"checker: {path}: {checked.stderr.strip()}", flush=True)
        return None
    return json.loads(checked.stdout)
