#!/usr/bin/env bash
# The C API as a user sees it: release library installed into a temp prefix, C programs built with
# plain cc + pkg-config, the POSIX-vs-secure differential (2000 sequences) and every ACE_* code.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec ./scripts/test-c.sh 1 2000 60
