"""Makes the acsecure VFS SQLite's default in every Python process started with this directory on
PYTHONPATH and ACSECURE_SQLITE_LIBRARY naming libACSecureSQLite.so: the test process and the child
processes CPython's sqlite3 suite starts (they must open the same encrypted databases)."""
import ctypes
import os
import sys

_library = os.environ.get("ACSECURE_SQLITE_LIBRARY")
if _library:
    # The sqlite3 module and the library share the process's one libsqlite3.so.0.
    _rc = ctypes.CDLL(_library).ACSecureSQLiteRegister(1)
    if _rc != 0:
        sys.exit(f"sitecustomize: ACSecureSQLiteRegister(1) failed with SQLite error {_rc}")
