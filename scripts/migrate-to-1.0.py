#!/usr/bin/env python3
"""fenced_lock 0.4.0 -> 1.0.0: every 0.4.0 call and its 1.0 replacement.

    migrate-to-1.0.py FILE...       rewrite the 0.4.0 calls in FILEs (SQL, or SQL in strings)
    migrate-to-1.0.py --table FILE  the markdown table of docs/upgrading.md, with the argument
                                    names of FILE (0.4.0's install script)
    migrate-to-1.0.py --check FILE  exit 1 if FILE (0.4.0's install script) has a function
                                    the table does not cover

A call is rewritten by its name and its number of arguments, as PostgreSQL resolves it;
arguments are copied as written. Calls that 1.0 answers with a view (current_leader,
fenced_lock_holder) are left for a person: the table says what to write.
"""
import re
import sys

# (0.4.0 name, argument count) -> (template, note). In a template, {0}..{5} are the call's
# arguments as written, {1t} the second as text (a bigint key named by its decimal text).
RULES = {}


def rule(old, count, template, note=""):
    RULES[(old, count)] = (template, note)


def both(old_base, new_base, counts, make, note=""):
    """The pair form, the named form and the named bigint form of one 0.4.0 function: `make`
    turns the new name and the argument count into a template; `note` is a text, or a text
    per argument count."""
    for suffix, new_suffix, key in (("", "", "{1}"), ("_named", "_named", "{1}"),
                                    ("_named_bigint", "_named", "{1t}")):
        for count in counts:
            template = make(new_base + new_suffix, count).replace("{1}", key)
            bigint_note = "a bigint key is named by its text" if suffix == "_named_bigint" else ""
            note_here = note.get(count, "") if isinstance(note, dict) else note
            rule(old_base + suffix, count, template,
                 "; ".join(x for x in (note_here, bigint_note) if x))


def plain(name, count):
    return name + "(" + ", ".join("{%d}" % i for i in range(count)) + ")"


def args(name, *items):
    return name + "(" + ", ".join(items) + ")"


# Transaction locks.
both("acquire_fenced", "acquire_fenced", (2, 3), plain)
both("try_acquire_fenced", "try_acquire_fenced", (2,), plain)
both("acquire_fenced_shared", "acquire_fenced", (2, 3),
     lambda n, c: args(n, "{0}", "{1}", *(["{2}"] if c == 3 else []), "shared => true"))
both("try_acquire_fenced_shared", "try_acquire_fenced", (2,),
     lambda n, c: args(n, "{0}", "{1}", "shared => true"))
for name in ("acquire_fenced_all", "acquire_fenced_all_named"):
    rule(name, 2, plain(name, 2))
    rule(name, 3, plain(name, 3))
for name in ("try_acquire_fenced_all", "try_acquire_fenced_all_named"):
    rule(name, 2, plain(name, 2))

# Session locks and leaders.
both("acquire_fenced_session", "acquire_fenced_session", (2, 3), plain)
both("acquire_fenced_session_owned", "acquire_fenced_session", (3, 4),
     lambda n, c: args(n, "{0}", "{1}", "owner => {2}") if c == 3
     else args(n, "{0}", "{1}", "{3}", "{2}"))
both("try_acquire_fenced_session", "try_acquire_fenced_session", (2, 3), plain)
both("acquire_fenced_shared_session", "acquire_fenced_session", (2, 3),
     lambda n, c: args(n, "{0}", "{1}", *(["{2}"] if c == 3 else []), "shared => true"))
both("acquire_fenced_shared_session_owned", "acquire_fenced_session", (3, 4),
     lambda n, c: args(n, "{0}", "{1}", "owner => {2}", "shared => true") if c == 3
     else args(n, "{0}", "{1}", "{3}", "{2}", "true"))
both("try_acquire_fenced_shared_session", "try_acquire_fenced_session", (2, 3),
     lambda n, c: args(n, "{0}", "{1}", *(["{2}"] if c == 3 else []), "shared => true"))
both("become_leader", "try_acquire_fenced_session", (2, 3), plain,
     "without an owner, a leader asking again gets NULL: name an owner, or poll with current_fence")
both("release_fenced", "release_fenced", (2, 3), plain)
both("current_fence", "current_fence", (2, 3), plain)
rule("release_all_fenced", 0, "release_all_fenced()")
rule("release_all_fenced", 1, "release_all_fenced({0})")
both("current_leader", "", (2,),
     lambda n, c: "(SELECT pid, application_name, client_addr, token AS term, acquired_at AS "
     "since, owner FROM fenced_locks WHERE ns = {0} AND id = {1} AND granted AND mode = "
     "'exclusive')", "a query of the fenced_locks view (a named key: its namespace and key "
     "columns)")
both("fenced_lock_holder", "", (2,),
     lambda n, c: "(SELECT * FROM fenced_locks WHERE granted AND ns = {0} AND id = {1})",
     "a view query, as for current_leader")

# Permits.
PERMIT_TIMEOUT = "55P03 instead of no row when none came free in time"
both("acquire_fenced_permit", "acquire_permit", (3, 4), plain, {4: PERMIT_TIMEOUT})
both("try_acquire_fenced_permit", "try_acquire_permit", (3,), plain)
both("acquire_fenced_permit_session", "acquire_permit_session", (3, 4), plain,
     {4: PERMIT_TIMEOUT})
both("acquire_fenced_permit_session_owned", "acquire_permit_session", (4, 5),
     lambda n, c: args(n, "{0}", "{1}", "{2}", "owner => {3}") if c == 4
     else args(n, "{0}", "{1}", "{2}", "{4}", "{3}"), {5: PERMIT_TIMEOUT})
both("try_acquire_fenced_permit_session", "try_acquire_permit_session", (3, 4), plain)
both("release_fenced_permit", "release_permit", (3, 4), plain)

# Leases.
both("acquire_lease", "try_acquire_lease", (4,), plain)
both("acquire_lease", "acquire_lease", (5,), plain,
     "55P03 instead of NULL when the wait runs out")
both("acquire_lease_permit", "try_acquire_lease_permit", (5,), plain)
both("acquire_lease_permit", "acquire_lease_permit", (6,), plain,
     "55P03 instead of no row when the wait runs out")
both("renew_lease", "renew_lease", (4,), plain)
both("release_lease", "release_lease", (3,), plain)

# Checks at the resource, tools.
for count in range(3, 7):
    rule("fenced_update", count, plain("fenced_update_or_false", count),
         "the boolean form; fenced_update raises SF001 when stale")
    rule("fenced_update_strict", count, plain("fenced_update", count))
rule("fence_check", 2, plain("fence_check_or_false", 2),
     "the boolean form; fence_check raises SF001 when stale")
rule("fence_check_strict", 2, plain("fence_check", 2))
both("force_release", "force_release", (2,), plain)
for name, count in (("register_namespace", 1), ("register_namespace", 2),
                    ("register_namespace", 3), ("fenced_key", 1), ("new_fencing_token", 0),
                    ("advance_fencing_tokens", 1), ("fenced_lock_stats_reset", 0)):
    rule(name, count, plain(name, count))
for name in ("fenced_lock_grants", "fenced_lock_grants_available", "fenced_lock_rows",
             "fenced_lock_stats_rows", "fenced_lock_refusal_rows"):
    rule(name, 0, "fenced_lock_internal." + name + "()", "not the API: behind the views")
rule("fenced_lease_available_at", 2, "fenced_lock_internal.fenced_lease_available_at({0}, {1})",
     "not the API: behind fenced_leases")

def renames():
    """The 0.4.0 names every form of which 1.0 only renames (arguments kept in place)."""
    by_name = {}
    for (name, count), (template, _) in RULES.items():
        new = template.split("(")[0]
        by_name.setdefault(name, set()).add(new if template == plain(new, count) else None)
    return {name: new.pop() for name, new in by_name.items() if len(new) == 1 and None not in new}


RENAMES = renames()
FUNCTION = re.compile(r'CREATE\s+(?:OR REPLACE\s+)?FUNCTION\s+(?:@extschema@\.)?"?(\w+)"?\s*\(')
# Trigger and event trigger functions: never called.
UNCHANGED_TRIGGERS = ("enforce_fence", "fenced_lock_keep_token_floor")
OLD_NAMES = sorted({name for name, _ in RULES}, key=len, reverse=True)
CALL = re.compile(r"(?<![\w.$])(" + "|".join(OLD_NAMES) + r")\s*\(")


def split_arguments(text, start):
    """The arguments of the call whose '(' is at text[start - 1], and the index after ')'."""
    depth, quote, items, begin, i = 0, None, [], start, start
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                items.append(text[begin:i].strip())
                return ([] if items == [""] else items), i + 1
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[begin:i].strip())
            begin = i + 1
        i += 1
    return None, len(text)


def as_text(argument):
    """A bigint key as its decimal text. Cast to bigint first: a driver that infers parameter
    types from the statement (asyncpg, pgx, rust-postgres) then sends its integer as one."""
    simple = re.fullmatch(r"[\w$.']+", argument)
    return argument + "::bigint::text" if simple else "CAST(" + argument + " AS bigint)::text"


def rewrite(text):
    out, position = [], 0
    for match in CALL.finditer(text):
        if match.start() < position:
            continue
        arguments, end = split_arguments(text, match.end())
        if arguments is None:
            continue
        # With named arguments (name => value) only a plain rename applies.
        if any(re.match(r"\w+\s*=>", a) for a in arguments):
            renamed = RENAMES.get(match.group(1))
            if renamed:
                out.append(text[position:match.start()] + renamed + "(")
                position = match.end()
            continue
        found = RULES.get((match.group(1), len(arguments)))
        if not found:
            continue
        template, _ = found
        values = {str(i): rewrite(a) for i, a in enumerate(arguments)}
        if len(arguments) > 1:
            values["1t"] = as_text(values["1"])
        new = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template)
        out.append(text[position:match.start()] + new)
        position = end
    out.append(text[position:])
    return "".join(out)


def parameter_names(path):
    """(name, argument count) -> the argument names of 0.4.0's install script, for each
    count a call may have (arguments with defaults may be left out)."""
    names = {}
    script = open(path).read()
    for match in FUNCTION.finditer(script):
        arguments, _ = split_arguments(script, match.end())
        arguments = [re.sub(r"/\*.*?\*/", "", a).strip() for a in arguments or []]
        words = [a.replace('"', "").split()[0] for a in arguments]
        required = sum(1 for a in arguments if "DEFAULT" not in a.upper())
        for count in range(required, len(words) + 1):
            names[(match.group(1), count)] = words[:count]
    return names


def table(path):
    """The markdown table of every 0.4.0 call (by argument count) that 1.0 changes."""
    names = parameter_names(path)
    lines = ["| 0.4.0 | 1.0.0 | note |", "|---|---|---|"]
    for (name, count), (template, note) in sorted(RULES.items()):
        words = names.get((name, count))
        if words is None or template == plain(name, count):
            continue
        values = {str(i): w for i, w in enumerate(words)}
        if count > 1:
            values["1t"] = words[1] + "::text"
        new = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template)
        old = "%s(%s)" % (name, ", ".join(words))
        lines.append("| `%s` | `%s` | %s |" % (old, new, note))
    return "\n".join(lines)


def check(path):
    """Every call of a function 0.4.0's install script creates has a rule."""
    missing = sorted("%s/%d" % key for key in parameter_names(path)
                     if key not in RULES and key[0] not in UNCHANGED_TRIGGERS)
    for item in missing:
        print("not covered:", item)
    return not missing


def main(argv):
    if argv[:1] == ["--table"]:
        print(table(argv[1]))
    elif argv[:1] == ["--check"]:
        sys.exit(0 if check(argv[1]) else 1)
    else:
        for path in argv:
            text = open(path).read()
            new = rewrite(text)
            if new != text:
                open(path, "w").write(new)
                print("rewrote", path)


if __name__ == "__main__":
    main(sys.argv[1:])
