#!/usr/bin/env bash
# Before/after throughput of the engine: builds Sources/format-bench (release) against BASE (a commit,
# exported with git archive) and against this working tree, runs them interleaved for ROUNDS rounds
# in alternating order on a SIZE MiB file, and prints per-metric medians and new/old ratios.
#
#   Benchmarks/FormatVersions/run.sh BASE [ROUNDS=8] [SIZE_MIB=64]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base="$1"; rounds="${2:-8}"; size="${3:-64}"
work="$(mktemp -d /tmp/format-bench-XXXXXX)"
mkdir -p "$work/base-src" "$work/data"
git -C "$root" archive "$base" | tar -x -C "$work/base-src"
for v in base head; do
  mkdir -p "$work/$v/Sources"
  cp -r "$here/Sources/format-bench" "$work/$v/Sources/"
  cp "$here/Package.swift" "$work/$v/"
done
(cd "$work/base" && ACSECURE_ROOT="$work/base-src" swift build -c release >/dev/null)
(cd "$work/head" && ACSECURE_ROOT="$root" swift build -c release >/dev/null)
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="base head"; else order="head base"; fi
  for v in $order; do echo "$v $("$work/$v/.build/release/format-bench" "$work/data" "$size")"; done
done | tee "$work/results.txt"
python3 - "$work/results.txt" <<'PY'
import statistics as st, sys
rows = {"base": [], "head": []}
for line in open(sys.argv[1]):
    p = line.split()
    rows[p[0]].append({p[i]: float(p[i + 1]) for i in range(1, len(p), 2)})
for k in rows["base"][0]:
    b = st.median(r[k] for r in rows["base"]); h = st.median(r[k] for r in rows["head"])
    print(f"{k:26s} base {b:10.0f}  head {h:10.0f}  head/base {h / b:.3f}")
PY
rm -rf "$work"
