#!/usr/bin/env python3
"""GRDB.swift's own XCTest suite, run class by class so that a test that crashes the process (GRDB's
tests use try! and force unwraps) costs that one test, not the rest of the run; and the comparison
of two runs. Used by scripts/grdb-own-suite.sh.

    grdb-own-suite.py run --binary GRDBPackageTests.xctest --results FILE [--preload LIB] [--tests FILE]
    grdb-own-suite.py compare --plain FILE --acsecure FILE [--recheck FILE] [--report FILE]

run: lists the tests (--list-tests), runs each class's tests in one process (with LD_PRELOAD=LIB
when given; --tests limits the run to the test names in FILE), and when the process dies or hangs
before all of them ended, records the test it was in as "crash" (or "hang") with the reason and
runs the rest of that class in a new process. Writes one line per test to FILE:
"OUTCOME<TAB>Module.Class/test<TAB>first message", OUTCOME one of ok, fail, skip, crash, hang.

compare: counts both runs, lists the tests that pass on plain SQLite but not on acsecure grouped by
cause (the VFS refusing WAL; otherwise the first failure message, numbers and paths blurred), and
says which of them passed when run again alone (--recheck: a run of just those tests).
"""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time

CLASS_TIMEOUT = int(os.environ.get("GRDB_OWN_SUITE_CLASS_TIMEOUT", "900"))
CASE = re.compile(r"^Test Case '([^']+)' (started|passed|failed|skipped)")
ERROR = re.compile(r": error: (\S+) : (.*)$")
FATAL = re.compile(r"Fatal error: (.*)$")


def list_tests(binary):
    out = subprocess.run([binary, "--list-tests"], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if re.match(r"^\w+\.\w+/\w+$", line.strip())]


def short(name):
    """GRDBTests.Class/test -> Class.test, as XCTest prints it."""
    return name.split(".", 1)[1].replace("/", ".")


def one_line(text, limit=400):
    return re.sub(r"\s+", " ", text).strip()[:limit]


def run_class(binary, env, names):
    """Runs the tests `names` (full names, one class) in one process; returns {name: (outcome, message)}."""
    by_short = {short(n): n for n in names}
    # A whole class is selected by its name; a remainder by the comma-separated test names.
    cls = names[0].split("/")[0]
    selector = cls if len(names) == len(CLASS_TESTS[cls]) else ",".join(names)
    results, messages, started, fatal = {}, collections.defaultdict(list), None, None
    try:
        proc = subprocess.run([binary, selector], env=env, capture_output=True, text=True, errors="replace",
                              timeout=CLASS_TIMEOUT)
        output, status, hung = proc.stdout + proc.stderr, proc.returncode, False
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        status, hung = None, True
    for line in output.splitlines():
        m = CASE.match(line)
        if m and m.group(1) in by_short:
            name = by_short[m.group(1)]
            if m.group(2) == "started":
                started = name
            else:
                outcome = {"passed": "ok", "failed": "fail", "skipped": "skip"}[m.group(2)]
                results[name] = (outcome, " | ".join(messages[name][:2]))
                started = None
            continue
        m = ERROR.search(line)
        if m and m.group(1) in by_short:
            messages[by_short[m.group(1)]].append(one_line(m.group(2)))
            continue
        m = FATAL.search(line)
        if m and fatal is None:
            fatal = one_line(m.group(1))
    if started is not None and started not in results:
        if hung:
            results[started] = ("hang", f"no end after {CLASS_TIMEOUT} s")
        else:
            reason = fatal or (f"killed by signal {-status}" if status is not None and status < 0 else f"exit status {status}")
            results[started] = ("crash", reason)
    return results


def command_run(args):
    global CLASS_TESTS
    binary = os.path.abspath(args.binary)
    env = dict(os.environ)
    env.setdefault("SWIFT_BACKTRACE", "enable=no")
    if args.preload:
        env["LD_PRELOAD"] = os.path.abspath(args.preload)
    every = list_tests(binary)
    CLASS_TESTS = collections.OrderedDict()
    for name in every:
        CLASS_TESTS.setdefault(name.split("/")[0], []).append(name)
    wanted = None
    if args.tests:
        with open(args.tests) as f:
            wanted = {line.strip() for line in f if line.strip()}
    results = {}
    start = time.monotonic()
    for cls, names in CLASS_TESTS.items():
        todo = [n for n in names if wanted is None or n in wanted]
        while todo:
            got = run_class(binary, env, todo)
            results.update(got)
            if not got:  # the process ended before any test of the class started
                for n in todo:
                    results[n] = ("crash", "the process ended before the test started")
                break
            todo = [n for n in todo if n not in results]
    with open(args.results, "w") as f:
        for name in every:
            if name in results:
                outcome, message = results[name]
                f.write(f"{outcome}\t{name}\t{message}\n")
    counts = collections.Counter(o for o, _ in results.values())
    print(f"{args.results}: {len(results)} tests in {time.monotonic() - start:.0f} s: "
          + ", ".join(f"{counts[k]} {k}" for k in ("ok", "fail", "skip", "crash", "hang")))


def read_results(path):
    results = collections.OrderedDict()
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            results[parts[1]] = (parts[0], parts[2] if len(parts) > 2 else "")
    return results


def cause(outcome, message):
    if "journal_mode=WAL is not supported" in message or "could not activate WAL Mode" in message:
        how = " (crashed the test process through try!)" if outcome == "crash" else ""
        return "the acsecure VFS refuses WAL (PRAGMA journal_mode = WAL)" + how
    if "file is not a database" in message:
        return ("SQLITE_NOTADB ('file is not a database'): a database file that is not encrypted "
                "(in 7.10.0: GRDB's plain test database Tests/GRDBTests/Issue1383.sqlite)")
    blurred = re.sub(r"/[^\s\"')]+", "PATH", message)
    blurred = re.sub(r"\b0x[0-9a-fA-F]+\b|\b\d+\b", "N", blurred)
    return f"{outcome}: {blurred[:200] or '(no message)'}"


def summary(results):
    c = collections.Counter(o for o, _ in results.values())
    return f"{c['ok']} passed, {c['fail']} failed, {c['skip']} skipped, {c['crash']} crashed, {c['hang']} hung"


def command_compare(args):
    plain, acsecure = read_results(args.plain), read_results(args.acsecure)
    recheck = read_results(args.recheck) if args.recheck else {}
    lost = [n for n, (o, _) in plain.items() if o == "ok" and acsecure.get(n, ("missing", ""))[0] != "ok"]
    gained = [n for n, (o, _) in acsecure.items() if o == "ok" and plain.get(n, ("missing", ""))[0] != "ok"]
    groups = collections.OrderedDict()
    for name in lost:
        outcome, message = acsecure.get(name, ("missing", "not run"))
        key = cause(outcome, message)
        if recheck.get(name, ("", ""))[0] == "ok":
            key = "passed when run again alone (flaky; first run: " + key + ")"
        groups.setdefault(key, []).append(name)
    lines = [
        f"GRDB.swift's own test suite, {len(plain)} tests:",
        f"  plain SQLite (unix VFS):          {summary(plain)}",
        f"  acsecure, SQLite's default VFS:   {summary(acsecure)}",
        f"Pass on plain SQLite but not on acsecure: {len(lost)}",
    ]
    for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(names):4d}  {key}")
        by_class = collections.OrderedDict()
        for n in names:
            cls, test = n.split(".", 1)[1].split("/")
            by_class.setdefault(cls, []).append(test)
        for cls, tests in by_class.items():
            lines.append(f"          {cls}: {', '.join(tests)}")
    if gained:
        lines.append(f"Pass on acsecure but not on plain SQLite: {len(gained)}: {', '.join(gained)}")
    text = "\n".join(lines)
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")
    wal = sum(len(v) for k, v in groups.items() if k.startswith("the acsecure VFS refuses WAL"))
    pc, ac = collections.Counter(o for o, _ in plain.values()), collections.Counter(o for o, _ in acsecure.values())
    print(f"grdb-own-suite: plain {pc['ok']} passed, {len(plain) - pc['ok'] - pc['skip']} failed; "
          f"acsecure {ac['ok']} passed, {len(acsecure) - ac['ok'] - ac['skip']} failed; "
          f"{len(lost)} pass on plain but not on acsecure ({wal} because WAL is refused, {len(lost) - wal} other)")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--binary", required=True)
    run.add_argument("--results", required=True)
    run.add_argument("--preload")
    run.add_argument("--tests")
    compare = sub.add_parser("compare")
    compare.add_argument("--plain", required=True)
    compare.add_argument("--acsecure", required=True)
    compare.add_argument("--recheck")
    compare.add_argument("--report")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    {"run": command_run, "compare": command_compare}[args.command](args)


CLASS_TESTS = {}
if __name__ == "__main__":
    sys.exit(main())
