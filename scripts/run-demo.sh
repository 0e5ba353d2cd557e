#!/usr/bin/env bash
# The README's main job: installs what the build needs, builds the `acsecure` tool and runs
# `acsecure demo` on a fresh embedded store in a temporary directory (no server, no prior setup):
# it encrypts a sample file, reads it back, verifies it, shows the ciphertext does not contain the
# plaintext, and that tampering, truncation and another app ID are detected.
#
#   scripts/run-demo.sh [DEMO OPTIONS]     e.g. --keep, --size 10000000 (see: acsecure demo --help)
# environment: SWIFT_SCRATCH_PATH  SwiftPM build directory (default .build)
set -euo pipefail
root="$(cd -P "$(dirname "$0")/.." && pwd)"  # -P: the checkout, also when run through a symbolic link
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"

"$root/scripts/install-deps.sh"
echo "run-demo: building acsecure (first build takes a few minutes)" >&2
swift build --package-path "$root" --scratch-path "$scratch" --product acsecure >&2
bin="$(swift build --package-path "$root" --scratch-path "$scratch" --show-bin-path)/acsecure"

"$bin" demo "$@"
echo
echo "The tool is $bin (try: $bin --help)"
