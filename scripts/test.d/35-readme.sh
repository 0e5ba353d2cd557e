#!/usr/bin/env bash
# The README as a newcomer follows it: its commands and code run as written, from a directory laid
# out like the checkout (symbolic links to scripts/, Examples/ and the build directory), with HOME a
# fresh temporary directory (so "$HOME/.local" and the default store ~/.local/share/acsecure are new).
#   - the Debian packages the README lists are the ones scripts/install-deps.sh installs, and the
#     version it names is scripts/version.sh's;
#   - the first block: run-demo.sh runs; the test command is what .ci/run runs;
#   - "Using it from C": the install block, prog.c (the README's C code), the block that runs it and
#     reads notes.acsf back with securecat and the CLI, and the SQLite block (the sqlite3 shell reads
#     `SELECT * FROM note;` from standard input), run one after another in one shell;
#   - "Using it from Swift": the two code blocks are Tests/ACSecureReadmeExample/main.swift verbatim,
#     which runs (and securecat reads the file it wrote); the Package.swift line's dependency and
#     product resolve (`swift package describe`) in a package whose path to the checkout ends in a
#     folder not named ACSecureFile;
#   - "The CLI": every line runs, in order, in one shell (exit 0), except `passwd` and `retire`,
#     which need a terminal to ask on (they must fail without one and change nothing), and the
#     completion line, run without its redirection into /etc.
#
#   scripts/test.d/35-readme.sh      (run by scripts/test.sh; prints "readme: N passed, M failed")
# environment: SWIFT_SCRATCH_PATH (default .build), KEEP=1 keeps the temp dir.
set -uo pipefail

root="$(cd -P "$(dirname "$0")/../.." && pwd)"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"
readme="$root/README.md"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-readme.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "readme: keeping $work" >&2; else trap 'rm -rf "$work"' EXIT; fi

passed=0
failed=0
ok()   { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1" >&2; [ -z "${2:-}" ] || sed 's/^/        /' "$2" | tail -15 >&2; }
# expect NAME COMMAND... : a shell condition.
expect() { local name="$1"; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }

# The README's fenced blocks, one file each: blocks/NN.LANG.
mkdir "$work/blocks"
awk -v dir="$work/blocks" '
  /^```/ { if (inside) { inside = 0; close(file) } else { inside = 1; n++; file = sprintf("%s/%02d.%s", dir, n, substr($0, 4)); printf "" > file } next }
  inside { print > file }' "$readme"
# block LANG TEXT: the one block of that language containing TEXT (a fixed string).
block() {
  local found
  found="$(grep -lF -- "$2" "$work"/blocks/*."$1" 2>/dev/null)"
  if [ "$(printf '%s\n' "$found" | grep -c .)" != 1 ]; then
    echo "readme: no single \`\`\`$1 block of README.md contains '$2'" >&2
    return 1
  fi
  echo "$found"
}

# A directory laid out like the checkout for the README's commands (not a package root: nothing
# here runs SwiftPM in it), and a fresh HOME.
lay_out() { # lay_out DIR
  mkdir -p "$1/home"
  ln -s "$root/scripts" "$1/scripts"
  ln -s "$root/Examples" "$1/Examples"
  ln -s "$scratch" "$1/.build"
}
# in_checkout DIR COMMAND...: runs COMMAND in DIR as a new user would, with DIR/home as HOME.
in_checkout() {
  local dir="$1"; shift
  (cd "$dir" && env -u ACSECURE_HOME -u ACSECURE_APP_ID -u ACSECURE_PASSCODE -u ACSECURE_CREATE_STORE -u XDG_DATA_HOME \
      -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH HOME="$dir/home" "$@")
}

echo "readme: running README.md's commands and code in $work"
# The README's order: run-demo.sh (first block) builds the CLI the later blocks use; build it here
# too, so that this suite also runs on its own in any order.
swift build --package-path "$root" --scratch-path "$scratch" --product acsecure >"$work/build.out" 2>&1 \
  || { cat "$work/build.out" >&2; echo "readme: cannot build acsecure" >&2; exit 1; }

# --- the Debian packages
listed="$(sed -n '/^these Debian packages are missing: /{s/^these Debian packages are missing: `\([^`]*\)`.*/\1/p}' "$readme")"
installed="$(sed -n 's/^for pkg in \(.*\); do$/\1/p' "$root/scripts/install-deps.sh")"
expect "README lists the packages install-deps.sh installs ($installed)" test -n "$listed" -a "$listed" = "$installed"

# --- the version the README names is the package's one version
version="$("$root/scripts/version.sh")"
expect "README names the version's file names and SONAME ($version)" bash -c \
  "grep -qF 'libACSecureFile.so.$version' '$readme' && grep -qF 'libACSecureSQLite.so.$version' '$readme' && grep -qF 'SONAME \`libACSecureFile.so.${version%%.*}\`' '$readme'"

# --- the first block: the demo and the test command
top="$(block sh "./scripts/run-demo.sh")" || exit 1
expect "the first block's test command is what .ci/run runs" \
  bash -c "grep -q '^./scripts/test.sh ' '$top' && grep -q '^exec ./scripts/test.sh$' '$root/.ci/run'"
mkdir "$work/demo" && lay_out "$work/demo"
grep '^./scripts/run-demo.sh' "$top" >"$work/demo.sh"
if in_checkout "$work/demo" bash -e "$work/demo.sh" >"$work/demo.out" 2>&1 && grep -qE '^demo: all [0-9]+ checks passed' "$work/demo.out"; then
  ok "./scripts/run-demo.sh, as written: all checks passed"
else
  fail "./scripts/run-demo.sh, as written" "$work/demo.out"
fi

# --- Using it from C (then the SQLite block), in one shell
c_dir="$work/c"
mkdir "$c_dir" && lay_out "$c_dir"
c_code="$(ls "$work"/blocks/*.c 2>/dev/null)"
if [ "$(printf '%s\n' "$c_code" | grep -c .)" = 1 ]; then cp "$c_code" "$c_dir/prog.c"; else fail "README.md has one \`\`\`c block (prog.c)"; fi
{
  echo "set -euo pipefail"
  cat "$(block sh "scripts/install-c-library.sh")" "$(block sh "./securecat notes.acsf")" "$(block sh "./secure-sqlite notes.db")"
} >"$work/c.sh" || exit 1
echo "SELECT * FROM note;" >"$work/sqlite.in"
if in_checkout "$c_dir" bash "$work/c.sh" <"$work/sqlite.in" >"$work/c.out" 2>"$work/c.err"; then
  ok "the C blocks run as written (install, cc prog.c, ./prog, securecat, acsecure, secure-sqlite, sqlite3)"
else
  cat "$work/c.out" >>"$work/c.err"
  fail "the C blocks run as written" "$work/c.err"
fi
# What each step prints: ./prog, securecat, acsecure cat, secure-sqlite, the sqlite3 shell.
expect "./prog prints world; securecat and acsecure cat read notes.acsf back; the database has the note" \
  test "$(cat "$work/c.out")" = "$(printf 'world\nhello, world\nhello, world\n1: first note\n1|first note')"
expect "notes.acsf is encrypted (no plaintext on disk)" bash -c "test -s '$c_dir/notes.acsf' && ! grep -q 'hello, world' '$c_dir/notes.acsf'"
expect "notes.db is encrypted (no plaintext on disk)" bash -c "test -s '$c_dir/notes.db' && ! grep -q 'first note' '$c_dir/notes.db'"
expect "the library, headers and .pc files went into \$HOME/.local" test -f "$c_dir/home/.local/lib/pkgconfig/acsecurefile.pc"

# --- Using it from Swift
example="$root/Tests/ACSecureReadmeExample/main.swift"
# The GRDB block is Examples/swift/grdb's main.swift (scripts/test.d/55-grdb.sh checks it and runs it).
grep -L -x "import GRDB" "$work"/blocks/*.swift | xargs cat >"$work/readme.swift" 2>/dev/null
expect "Tests/ACSecureReadmeExample/main.swift is the README's Swift code, verbatim" \
  cmp -s "$work/readme.swift" <(tail -n +2 "$example")
swift build --package-path "$root" --scratch-path "$scratch" --product ACSecureReadmeExample >"$work/swift-build.out" 2>&1 \
  || fail "build the README's Swift code" "$work/swift-build.out"
bin="$(swift build --package-path "$root" --scratch-path "$scratch" --show-bin-path)"
s_dir="$work/swift"
mkdir -p "$s_dir/home"
if in_checkout "$s_dir" "$bin/ACSecureReadmeExample" >"$work/swift.out" 2>&1; then
  ok "the README's Swift code runs"
else
  fail "the README's Swift code runs" "$work/swift.out"
fi
expect "it prints the plaintext size, chunk size and key class (13 4096 app)" test "$(cat "$work/swift.out")" = "13 4096 app"
if [ -x "$c_dir/securecat" ]; then
  expect "securecat reads the notes.acsf the Swift code wrote (same app ID, default store)" \
    test "$(cd "$s_dir" && env -u ACSECURE_HOME -u XDG_DATA_HOME HOME="$s_dir/home" ACSECURE_APP_ID=com.example.app "$c_dir/securecat" notes.acsf)" = "hello, world"
fi
# The Package.swift line, in a package whose path to the checkout ends in another folder name.
dependency="$(sed -n 's|^// Package.swift: \(\.package(.*)\), then \(\.product(.*)\)$|\1|p' "$work/readme.swift")"
product="$(sed -n 's|^// Package.swift: \(\.package(.*)\), then \(\.product(.*)\)$|\2|p' "$work/readme.swift")"
if [ -n "$dependency" ] && [ -n "$product" ]; then
  ln -s "$root" "$work/acsecurefile-main"
  mkdir -p "$work/consumer/Sources/app"
  echo 'import ACSecureFileCore' >"$work/consumer/Sources/app/main.swift"
  cat >"$work/consumer/Package.swift" <<EOF
// swift-tools-version: 6.1
import PackageDescription
let package = Package(
    name: "consumer",
    dependencies: [${dependency//…\/ACSecureFile/$work/acsecurefile-main}],
    targets: [.executableTarget(name: "app", dependencies: [$product])]
)
EOF
  if (cd "$work/consumer" && swift package describe) >"$work/consumer.out" 2>&1; then
    ok "the README's Package.swift line resolves with the checkout in a folder named acsecurefile-main"
  else
    fail "the README's Package.swift line resolves with the checkout in a folder named acsecurefile-main" "$work/consumer.out"
  fi
else
  fail "the README's Swift code starts with a '// Package.swift: .package(...), then .product(...)' line"
fi

# --- The CLI: each line in order, in one shell
cli_dir="$work/cli"
mkdir "$cli_dir" && lay_out "$cli_dir"
mkdir "$cli_dir/home/data"
head -c 300000 /dev/urandom >"$cli_dir/report.pdf"
cp "$cli_dir/report.pdf" "$cli_dir/home/data/plain.bin"
cli_block="$(block sh "B=.build/debug/acsecure")" || exit 1
{
  echo 'status() { echo "readme-cli-status $1 $2" >&3; }'
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    case "$line" in
      *"> /etc/"*) line="${line%%>*}" ;;  # the completion script, printed instead of installed into /etc
    esac
    printf '%s\n' "$line"
    printf 'status %d $?\n' "$n"
  done <"$cli_block"
} >"$work/cli.sh"
(cd "$cli_dir" && env -u ACSECURE_HOME -u ACSECURE_APP_ID -u ACSECURE_PASSCODE -u XDG_DATA_HOME HOME="$cli_dir/home" \
  setsid -w bash "$work/cli.sh" </dev/null >"$work/cli.out" 2>"$work/cli.err" 3>"$work/cli.status")
n=0
while IFS= read -r line; do
  n=$((n + 1))
  got="$(sed -n "s/^readme-cli-status $n //p" "$work/cli.status")"
  command="${line%%#*}"; command="${command%"${command##*[! ]}"}"
  case "$line" in
    '$B passwd'*|'$B retire'*)
      # No terminal to ask on: refused, with the reason.
      if [ -n "$got" ] && [ "$got" != 0 ]; then ok "CLI line $n, '$command': refused without a terminal (exit $got)"; else fail "CLI line $n, '$command': exit ${got:-none}, expected a refusal" "$work/cli.err"; fi ;;
    *)
      if [ "$got" = 0 ]; then ok "CLI line $n, '$command' (exit 0)"; else fail "CLI line $n, '$command': exit ${got:-none}" "$work/cli.err"; fi ;;
  esac
done <"$cli_block"
expect "the store is still there after the refused retire" test -e "$cli_dir/home/.local/share/acsecure/seed"
expect "decrypt gave report.pdf back" cmp -s "$cli_dir/report.pdf" "$cli_dir/copy.pdf"
expect "ls ~/data lists the plain file" grep -qE '^plain +300000 +- +plain.bin$' "$work/cli.out"
expect "the completion script was printed" grep -q "_acsecure" "$work/cli.out"

echo "readme: $passed passed, $failed failed"
[ "$failed" = 0 ]
