"""CPython's own sqlite3 test suite (test.test_sqlite3) on SQLite's default VFS, or with the
acsecure VFS made the default (PYTHONPATH=acsecure-default, ACSECURE_SQLITE_LIBRARY=the library),
so every connection the suite opens, in this process and its children, goes through it.

    python3 run_test_sqlite3.py --vfs unix|acsecure [--tests DIR_HOLDING_test_sqlite3] --results FILE

Writes one line per test to FILE: "<outcome> <test id>" with outcome ok, fail, error or skip, and
exits 0 once the suite ran (the shell script compares the two runs). With --vfs acsecure it first
checks that a database created by the suite's kind of call is encrypted on disk.
"""
import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import unittest


def check_encrypted():
    directory = tempfile.mkdtemp(prefix="acsecure-pytest-")
    path = os.path.join(directory, "probe.db")
    with sqlite3.connect(path) as cx:
        cx.execute("create table t(x)")
        cx.execute("insert into t values ('ACSECURE-PROBE-PLAINTEXT')")
    cx.close()
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"SQLite format 3") or b"ACSECURE-PROBE-PLAINTEXT" in data:
        sys.exit("run_test_sqlite3: the acsecure VFS is not in use (a new database is plain SQLite)")
    shutil.rmtree(directory)


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.append(("ok", test.id()))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes.append(("fail", test.id()))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append(("error", test.id()))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes.append(("skip", test.id()))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes.append(("ok", test.id()))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes.append(("fail", test.id()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vfs", choices=["unix", "acsecure"], required=True)
    parser.add_argument("--tests", help="a directory holding test_sqlite3/ (CPython's Lib/test)")
    parser.add_argument("--results", required=True)
    args = parser.parse_args()

    if args.vfs == "acsecure":
        # acsecure-default/sitecustomize.py made it the default (here and in child processes).
        check_encrypted()

    import test
    if args.tests:
        # Debian's python3 ships test.support but not test.test_sqlite3: take it from the sources.
        test.__path__.append(os.path.abspath(args.tests))
    from test import support
    from test.support import os_helper
    # The suite names its files after TESTFN, relative to the working directory.
    with os_helper.temp_cwd():
        import importlib
        import test.test_sqlite3 as suite_package
        # Module by module: the package's load_tests discovers relative to the stdlib's own test
        # directory, which does not hold it when it comes from the sources.
        loader = unittest.TestLoader()
        suite = unittest.TestSuite()
        for name in sorted(os.listdir(os.path.dirname(suite_package.__file__))):
            if name.startswith("test_") and name.endswith(".py"):
                module = importlib.import_module(f"test.test_sqlite3.{name[:-3]}")
                suite.addTests(loader.loadTestsFromModule(module))
        stream = open(os.devnull, "w") if not os.environ.get("VERBOSE") else sys.stderr
        runner = unittest.TextTestRunner(stream=stream, resultclass=Recorder, verbosity=2 if stream is sys.stderr else 0)
        result = runner.run(suite)
    with open(args.results, "w") as out:
        for outcome, test_id in result.outcomes:
            out.write(f"{outcome} {test_id}\n")
        if args.vfs == "acsecure":
            for test_case, trace in result.failures + result.errors:
                out.write(f"# {test_case.id()}\n# " + trace.replace("\n", "\n# ") + "\n")
    ran = len(result.outcomes)
    print(f"run_test_sqlite3: {args.vfs}: {ran} tests, {len(result.failures)} failed, "
          f"{len(result.errors)} errors, {len(result.skipped)} skipped, sqlite {sqlite3.sqlite_version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
