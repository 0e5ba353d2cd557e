#!/usr/bin/env bash
# End-to-end tests of the built `acsecure` binary: exit codes, round trips, tampering, passcodes,
# sharing, re-keying, retiring, and that no plaintext or passcode shows up where it must not.
#
#   scripts/test.d/30-cli.sh        (run by scripts/test.sh; prints "cli: N passed, M failed")
# environment: SWIFT_SCRATCH_PATH (default .build), ACSECURE_BIN (test this binary instead),
#   KEEP=1 keeps the temp dir.
set -uo pipefail

# Without a controlling terminal, so a command that would prompt fails instead of waiting for input.
if [ -z "${ACSECURE_CLI_TEST_DETACHED:-}" ] && command -v setsid >/dev/null 2>&1; then
  ACSECURE_CLI_TEST_DETACHED=1 exec setsid -w "$BASH" "$0" "$@"
fi

root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ -n "${ACSECURE_BIN:-}" ]; then
  bin="$ACSECURE_BIN"
else
  scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"
  swift build --package-path "$root" --scratch-path "$scratch" --product acsecure >&2 || { echo "cli: build failed" >&2; exit 1; }
  bin="$(swift build --package-path "$root" --scratch-path "$scratch" --show-bin-path)/acsecure"
fi
[ -x "$bin" ] || { echo "cli: $bin not found" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-cli-test.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "cli: keeping $work" >&2; else trap 'rm -rf "$work"' EXIT; fi
cd "$work" || exit 1

unset ACSECURE_APP_ID ACSECURE_PASSCODE ACSECURE_NEW_PASSCODE XDG_DATA_HOME
export ACSECURE_HOME="$work/store" HOME="$work/home" SWIFT_BACKTRACE=enable=no
# New passcodes at libsodium's minimum Argon2id cost (a debug build's test hook, GlobalOptions.swift):
# each command on a protected store costs milliseconds instead of 0.4 s. The Swift tests check the
# moderate cost of real stores (StoreAttackTests); a release binary (ACSECURE_BIN) ignores this.
export ACSECURE_TEST_ARGON2=minimum
PASS1="pw-Secret-One-7f3a"
PASS2="pw-Secret-Two-91bc"
MARKER="PLAINTEXT-MARKER-c4d1e8"

passed=0
failed=0
ok()   { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1" >&2; [ -s out ] && sed 's/^/        out: /' out | head -5 >&2; [ -s err ] && sed 's/^/        err: /' err | head -5 >&2; }

# run EXPECTED_STATUS NAME ARGS... : runs acsecure (stdin from $STDIN or /dev/null), output in out/err;
# $WRAP (a command prefix, e.g. "$nodac") runs it under another command.
run() {
  local want="$1" name="$2"; shift 2
  ${WRAP:-} "$bin" "$@" <"${STDIN:-/dev/null}" >out 2>err
  local got=$?
  if [ "$got" = "$want" ]; then ok "$name (exit $got)"; else fail "$name: exit $got, expected $want"; fi
}
# expect NAME COMMAND... : a shell condition.
expect() { local name="$1"; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
# No plaintext marker and no passcode in the last command's stdout or stderr.
clean_output() {
  if grep -q -e "$MARKER" -e "$PASS1" -e "$PASS2" out err; then fail "$1: plaintext or passcode in the output"; else ok "$1: no plaintext or passcode in the output"; fi
}
# File modes bind root too under $nodac: it drops the capabilities that let root ignore them.
nodac=""
if [ "$(id -u)" != 0 ]; then nodac_ok=1
elif command -v setpriv >/dev/null 2>&1 && setpriv --bounding-set=-dac_override,-dac_read_search true 2>/dev/null; then
  nodac="setpriv --bounding-set=-dac_override,-dac_read_search"; nodac_ok=1
else nodac_ok=0; fi
no_temp_files() { ! ls -A "$1" | grep -qE 'acsecure-tmp|\.rotate-'; }

# A sample: text with the marker on every line, spanning many 4 KiB chunks, plus a partial last chunk.
for i in $(seq 1 3000); do echo "line $i $MARKER secret payroll data"; done >plain.txt
size=$(stat -c %s plain.txt)
# Where chunk 0 starts: the 128-byte header, then two tail-copy slots of 64 + 4096 + 32 + the
# trailer (40 bytes in format version 5, with its footer).
trailer=40
data=$((128 + 2 * (64 + 4096 + 32 + trailer)))

echo "cli: testing $bin in $work"

# --- usage, help, completions
run 0 "--help" --help
expect "--help documents the exit codes" grep -q "EXIT CODES" out
run 1 "unknown subcommand" frobnicate
run 1 "missing argument" verify
run 0 "bash completion script" --generate-completion-script bash
expect "completion script defines the function" grep -q "_acsecure" out
run 0 "encrypt --help" encrypt --help
run 0 "--version" --version
expect "--version is the package's one version (scripts/version.sh)" test "$(cat out)" = "$("$root/scripts/version.sh")"

# --- no store yet
run 3 "status without a store" status
run 3 "cat without a store" cat nothing.acsf
expect "cat without a store creates none" test ! -e "$ACSECURE_HOME"

# --- init with a passcode
ACSECURE_PASSCODE="$PASS1" run 0 "init with a passcode" init
clean_output "init"
expect "store seed is 0600" test "$(stat -c %a "$ACSECURE_HOME/seed")" = 600
expect "seed does not contain the passcode" bash -c "! grep -q '$PASS1' '$ACSECURE_HOME/seed'"
ACSECURE_PASSCODE="$PASS1" run 1 "init refuses an existing store" init
run 0 "status on a locked store" status
expect "status says locked" grep -q "locked" out
run 3 "encrypt without the passcode (no terminal)" encrypt plain.txt a.acsf
expect "error names where the passcode comes from" grep -q "ACSECURE_PASSCODE" err
export ACSECURE_PASSCODE="$PASS1"

# --- encrypt / cat / decrypt
run 0 "encrypt" encrypt plain.txt a.acsf
clean_output "encrypt"
expect "ciphertext does not contain the plaintext" bash -c "! grep -q '$MARKER' a.acsf"
expect "ciphertext is header + tail-copy slots + chunks + trailer" test "$(stat -c %s a.acsf)" = $((data + size + 32 * ((size + 4095) / 4096) + trailer))
run 1 "encrypt refuses to overwrite" encrypt plain.txt a.acsf
expect "refusal names the file" grep -q "a.acsf" err
run 0 "encrypt --force overwrites" encrypt --force plain.txt a.acsf
cp a.acsf mode.acsf; chmod 0440 mode.acsf
run 0 "encrypt --force onto a 0440 file" encrypt --force plain.txt mode.acsf
expect "encrypt --force keeps the mode 0440" test "$(stat -c %a mode.acsf)" = 440
rm -f mode.acsf
expect "no temporary files left" no_temp_files .
run 0 "cat" cat a.acsf
expect "cat gives the plaintext back" cmp -s out plain.txt
run 0 "decrypt" decrypt a.acsf round.txt
expect "decrypt gives the plaintext back" cmp -s round.txt plain.txt
expect "decrypted file is 0600" test "$(stat -c %a round.txt)" = 600
run 1 "decrypt refuses to overwrite" decrypt a.acsf round.txt
STDIN=plain.txt run 0 "encrypt from stdin" encrypt - b.acsf
run 0 "cat of the stdin-encrypted file" cat b.acsf
expect "stdin round trip" cmp -s out plain.txt
printf '' >empty.txt
run 0 "encrypt an empty file" encrypt empty.txt empty.acsf
run 0 "verify an empty file" verify empty.acsf

# --- wrong passcode, other app, missing files, plain files
ACSECURE_PASSCODE="wrong" run 3 "cat with a wrong passcode" cat a.acsf
expect "wrong passcode names ACE_NO_KEYS_ERROR" grep -q "ACE_NO_KEYS_ERROR" err
clean_output "wrong passcode"
STDIN=<(echo "$PASS1") run 0 "cat with --passcode-stdin" cat --passcode-stdin a.acsf
expect "--passcode-stdin round trip" cmp -s out plain.txt
run 4 "cat as another app ID (option after the subcommand)" cat --app-id other.app a.acsf
expect "error names the file and ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR" grep -q "a.acsf.*ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR" err
clean_output "another app ID"
ACSECURE_APP_ID=other.app run 4 "ACSECURE_APP_ID selects the app" cat a.acsf
run 2 "cat a missing file" cat missing.acsf
expect "I/O error names the file and errno" grep -q "missing.acsf.*ENOENT" err
run 4 "cat a plain file" cat plain.txt
clean_output "cat a plain file"
run 4 "stat a plain file" stat plain.txt
run 5 "verify a plain file" verify plain.txt
clean_output "verify a plain file"

# --- stat / ls / verify
run 0 "stat" stat a.acsf
expect "stat shows the plaintext size" grep -q "plaintext size: *$size bytes" out
expect "stat shows the chunk size" grep -q "chunk size: *4096" out
expect "stat shows the key class" grep -q "key class: *app" out
expect "stat knows this app's key" grep -q "this app's key" out
clean_output "stat"
run 0 "ls" ls .
expect "ls marks a.acsf secure" grep -qE "^secure +$size +app +a.acsf$" out
expect "ls marks plain.txt plain" grep -qE "^plain +$size +- +plain.txt$" out
run 0 "verify" verify a.acsf b.acsf
expect "verify says OK for both" test "$(grep -c '^OK' out)" = 2
clean_output "verify"

# --- file names are bytes (issue 27): names that are not UTF-8, as Linux allows, byte for byte
bad_in=$'plain-\xe9\xff.txt'; bad_secure=$'secret-\x83\x65\xfe.acsf'; bad_out=$'round-\xc0\xaf.txt'
cp plain.txt "$bad_in"
run 0 "encrypt a file whose name is not UTF-8 into another such name" encrypt "$bad_in" "$bad_secure"
expect "the secure file has exactly the bytes of its name" test -s "$bad_secure"
expect "no file with a repaired name was made" bash -c "! ls | grep -q \$'\xef\xbf\xbd'"
run 0 "cat a file whose name is not UTF-8" cat "$bad_secure"
expect "cat of the byte name gives the plaintext back" cmp -s out plain.txt
run 0 "decrypt into a name that is not UTF-8" decrypt "$bad_secure" "$bad_out"
expect "decrypt of the byte name gives the plaintext back" cmp -s "$bad_out" plain.txt
run 0 "verify and stat a file whose name is not UTF-8" verify "$bad_secure"
run 0 "ls lists the name escaped" ls .
expect "ls shows secret-\x83e\xFE.acsf as secure" grep -qE '^secure +[0-9]+ +app +secret-\\x83e\\xFE\.acsf$' out
run 2 "a missing name that is not UTF-8" cat $'missing-\xff.acsf'
expect "the error prints the name escaped (missing-\\xFF.acsf), never repaired" grep -q 'missing-\\xFF\.acsf' err
bad_store=$'byte-store-\xe9'
ACSECURE_PASSCODE= run 0 "a store directory whose name is not UTF-8 (--store)" --store "$work/$bad_store" init
expect "the store is in the byte-named directory" test -s "$work/$bad_store/seed"
ACSECURE_PASSCODE= STDIN=plain.txt run 0 "write with that store" --store "$work/$bad_store" write "$bad_secure.2"
ACSECURE_PASSCODE= run 0 "cat with that store" --store "$work/$bad_store" cat "$bad_secure.2"
expect "the byte-named store's file reads back" cmp -s out plain.txt
rm -rf "$bad_in" "$bad_secure" "$bad_secure.2" "$bad_out" "$work/$bad_store"

# --- tampering: one bit in chunk 3, a truncation at a chunk boundary, a swap of two chunks
cp a.acsf t.acsf
off=$((data + 3 * 4128 + 16 + 100))
printf "$(printf '\\x%02x' $(( $(od -An -tu1 -j$off -N1 t.acsf) ^ 1 )))" | dd of=t.acsf bs=1 seek=$off conv=notrunc status=none
run 5 "verify a tampered file" verify a.acsf t.acsf
expect "verify names chunk 3" grep -q "t.acsf: chunk 3 " out
expect "verify still says OK for the good file" grep -q "^OK .*a.acsf" out
clean_output "verify a tampered file"
run 4 "cat a tampered file" cat t.acsf
expect "cat error names the file, chunk and ACE_*" grep -q "t.acsf: chunk 3.*ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR" err
run 4 "decrypt a tampered file" decrypt t.acsf t.out
expect "decrypt of a tampered file leaves no output" test ! -e t.out
expect "decrypt of a tampered file leaves no temp file" no_temp_files .
cp a.acsf cut.acsf
truncate -s $(( $(stat -c %s a.acsf) - 4128 )) cut.acsf
run 5 "verify a file cut at a chunk boundary" verify cut.acsf
expect "verify reports the end restored from the tail copy" grep -q "restored from the last sync's tail copy" out
cp a.acsf junk.acsf
printf 'JUNK-AFTER-THE-END' >> junk.acsf
run 5 "verify a file with bytes appended" verify junk.acsf
expect "verify reports the bytes after the authenticated end" grep -q "18 bytes follow the authenticated end" out
run 0 "cat a file with bytes appended reads the authenticated content" cat junk.acsf
expect "cat of a file with bytes appended gives the plaintext" cmp -s out plain.txt
expect "cat warns about the ignored bytes (never silent)" grep -q "warning: junk.acsf: 18 bytes after the authenticated end" err
cp junk.acsf cutlaunder.acsf
truncate -s $(( data + 2 * 4128 + 32 )) cutlaunder.acsf
printf 'more' >appendme.txt
# The cut is never sealed over: the file is taken back to its last sync's end (here its creation:
# the cut went below the last sync's chunks), with a warning, and the append builds on that.
STDIN=appendme.txt run 0 "append to a cut file builds on its last sync, not on the cut" write --append cutlaunder.acsf
expect "the append warns that the end was restored" grep -q "warning: cutlaunder.acsf: its end was restored from the last sync's tail copy" err
run 0 "cat after the append to a cut file" cat cutlaunder.acsf
expect "the file is its last sync plus the append, never the cut" cmp -s out appendme.txt
cp a.acsf swap.acsf
dd if=a.acsf of=swap.acsf bs=1 skip=$((data + 4128)) seek=$data count=4128 conv=notrunc status=none
run 5 "verify a file with a chunk moved" verify swap.acsf
expect "verify names chunk 0" grep -q "swap.acsf: chunk 0 " out

# --- write from stdin
STDIN=plain.txt run 0 "write from stdin" write w.acsf
run 0 "cat after write" cat w.acsf
expect "write round trip" cmp -s out plain.txt
STDIN=<(echo "appended $MARKER") run 0 "write --append" write --append w.acsf
run 0 "cat after append" cat w.acsf
expect "append adds to the end" bash -c "{ cat plain.txt; echo 'appended $MARKER'; } | cmp -s - out"
run 1 "write refuses --passcode-stdin" write --passcode-stdin w.acsf

# --- write, decrypt and the messages never lose data or mislead (issue 13)
STDIN=plain.txt run 1 "write refuses to replace its own secure file" write w.acsf
expect "the refusal names the file and --force" grep -q "w.acsf.*already exists.*--force" err
printf 'keep me\n' >keep.txt
STDIN=plain.txt run 1 "write refuses to replace a plain file" write keep.txt
expect "the plain file is unchanged" test "$(cat keep.txt)" = "keep me"
clean_output "write refusal"
printf 'read-only\n' >ro.txt; chmod 0444 ro.txt
STDIN=plain.txt run 1 "write refuses to replace a 0444 file" write ro.txt
expect "the 0444 file is unchanged" test "$(cat ro.txt)" = read-only -a "$(stat -c %a ro.txt)" = 444
STDIN=<(echo "other app data") run 0 "write as another app" write --app-id other.app other.acsf
sum_other="$(sha256sum other.acsf)"
STDIN=plain.txt run 1 "write refuses to replace another app's secure file" write other.acsf
expect "the other app's file is unchanged" test "$(sha256sum other.acsf)" = "$sum_other"
expect "refused writes leave no temp file" no_temp_files .
# A file that appears while write reads standard input is not replaced, and what was read is kept.
mkfifo race.fifo
"$bin" write race.acsf <race.fifo >out 2>err &
race_pid=$!
exec 7>race.fifo
for _ in $(seq 1 100); do ls -A | grep -q 'race.acsf.acsecure-tmp' && break; sleep 0.1; done
printf 'appeared meanwhile\n' >race.acsf
cat plain.txt >&7
exec 7>&-
wait "$race_pid"; race_status=$?
expect "write refuses a file that appeared while it read stdin (exit 1)" test "$race_status" = 1
expect "the file that appeared is unchanged" test "$(cat race.acsf)" = "appeared meanwhile"
kept="$(sed -n 's/.*what was written is kept in //p' err)"
expect "the error names where the data read is kept" test -n "$kept" -a -f "$kept"
run 0 "cat the kept data" cat "$kept"
expect "the kept data is what was read" cmp -s out plain.txt
rm -f race.fifo "$kept"
STDIN=plain.txt run 0 "write --force replaces a 0444 file" write --force ro.txt
expect "write --force keeps the mode 0444" test "$(stat -c %a ro.txt)" = 444
run 0 "cat after write --force" cat ro.txt
expect "write --force wrote the new content" cmp -s out plain.txt
chmod 0640 keep.txt
STDIN=plain.txt run 0 "write --force replaces a 0640 plain file" write --force keep.txt
expect "write --force keeps the mode 0640" test "$(stat -c %a keep.txt)" = 640
STDIN=plain.txt run 0 "write --force replaces another app's secure file" write --force other.acsf
run 0 "cat after replacing another app's file" cat other.acsf
expect "the replaced file is this app's now" cmp -s out plain.txt
STDIN=plain.txt run 1 "write - is refused (no file named -)" write -
expect "write - created no file named -" test ! -e ./-
rm -f ./-
run 1 "encrypt to - is refused (no file named -)" encrypt plain.txt -
expect "encrypt to - created no file named -" test ! -e ./-
rm -f ./-
run 0 "decrypt to - writes standard output" decrypt a.acsf -
expect "decrypt - gives the plaintext on stdout" cmp -s out plain.txt
expect "decrypt - created no file named -" test ! -e ./-
run 4 "decrypt - of a tampered file fails" decrypt t.acsf -
expect "decrypt - of a tampered file names chunk 3" grep -q "t.acsf: chunk 3" err
run 4 "cat as another app ID" cat --app-id other.app a.acsf
expect "the wrong-app error suggests --app-id and --store" grep -q "a.acsf:.*--app-id.*--store.*ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR" err
clean_output "wrong-app error"
run 4 "decrypt as another app ID" decrypt --app-id other.app a.acsf other.txt
expect "decrypt's wrong-app error suggests --app-id and --store" grep -q "a.acsf:.*--app-id.*--store" err
STDIN=<(echo more) run 4 "write --append as another app ID" write --append --app-id other.app a.acsf
expect "append's wrong-app error suggests --app-id and --store" grep -q "a.acsf:.*--app-id.*--store" err
run 0 "stat a whole file" stat a.acsf
expect "stat says the length authenticates" grep -q "length: *authenticated" out
expect "stat of a whole file warns of nothing" test ! -s err
run 0 "stat a file cut at a chunk boundary" stat cut.acsf
expect "stat warns that the length does not authenticate" grep -q "warning: cut.acsf: .*length" err
expect "stat shows the failed length check" grep -q "length: *FAILED" out
clean_output "stat a cut file"
if [ "$nodac_ok" = 1 ]; then
  mkdir lsdir; cp a.acsf lsdir/; printf 'x' >lsdir/locked; chmod 000 lsdir/locked
  WRAP="$nodac" run 0 "ls a directory with an unreadable file" ls lsdir
  expect "ls calls an unreadable file unreadable, not plain" grep -qE "^unreadable +1 +- +locked$" out
  expect "ls gives the path and errno" grep -q "lsdir/locked.*EACCES" err
  expect "ls still lists the secure file" grep -qE "^secure +$size +app +a.acsf$" out
  mkdir rodir; chmod 0555 rodir
  WRAP="$nodac" run 2 "encrypt into an unwritable directory" encrypt plain.txt rodir/o.acsf
  expect "encrypt names the output, not the temporary file" bash -c "grep -q 'rodir/o.acsf.*EACCES' err && ! grep -q acsecure-tmp err"
  WRAP="$nodac" run 2 "decrypt into an unwritable directory" decrypt a.acsf rodir/o.txt
  expect "decrypt names the output, not the temporary file" bash -c "grep -q 'rodir/o.txt.*EACCES' err && ! grep -q acsecure-tmp err"
  WRAP="$nodac" STDIN=plain.txt run 2 "write into an unwritable directory" write rodir/w.acsf
  expect "write names the output, not the temporary file" bash -c "grep -q 'rodir/w.acsf.*EACCES' err && ! grep -q acsecure-tmp err"
  clean_output "write into an unwritable directory"
else
  echo "  skip  unreadable files and unwritable directories (root without setpriv)"
fi

# --- share (header only) and rekey
cp a.acsf s.acsf
run 0 "share with a group" share s.acsf --group com.example.group
expect "share rewrote the header only" cmp -s <(tail -c +129 a.acsf) <(tail -c +129 s.acsf)
run 4 "cat a group file without --group" cat s.acsf
expect "the error asks for --group" grep -q "group" err
run 4 "cat a group file with another group's key" cat --group com.example.other s.acsf
expect "the error names the group and suggests --store" grep -q "s.acsf:.*com.example.other.*--store" err
run 0 "cat a group file with --group" cat --group com.example.group s.acsf
expect "group file round trip" cmp -s out plain.txt
run 0 "stat a group file" stat s.acsf
expect "stat says group" grep -q "key class: *group" out
run 0 "verify a group file" verify --group com.example.group s.acsf
run 0 "share back to the app" share s.acsf --to-app --from-group com.example.group
run 0 "cat after sharing back" cat s.acsf
expect "round trip after sharing back" cmp -s out plain.txt
run 1 "share needs --group or --to-app" share s.acsf
id_before="$("$bin" stat s.acsf | sed -n 's/.*file ID: *//p')"
run 0 "rekey" rekey s.acsf
id_after="$("$bin" stat s.acsf | sed -n 's/.*file ID: *//p')"
expect "rekey gives a new file ID" test -n "$id_after" -a "$id_before" != "$id_after"
expect "rekey re-encrypted every chunk" bash -c "! cmp -s <(tail -c +129 a.acsf) <(tail -c +129 s.acsf)"
run 0 "cat after rekey" cat s.acsf
expect "rekey keeps the content" cmp -s out plain.txt
run 0 "verify after rekey" verify s.acsf
expect "rekey leaves no temp file" no_temp_files .

# --- what a newcomer trips over (issue 28)
# help_says TEXT: the last command's stdout says TEXT, wherever argument-parser wrapped its lines.
help_says() { tr '\n' ' ' <out | tr -s ' ' | grep -qF -- "$1"; }
# Options of every command before the command name, as with git or docker.
run 4 "--app-id before the command" --app-id other.app cat a.acsf
expect "--app-id before the command selects the app" grep -q "a.acsf:.*not app ID other.app" err
run 0 "--store and --app-id= before the command" --store "$ACSECURE_HOME" --app-id=default cat a.acsf
expect "options before the command: round trip" cmp -s out plain.txt
STDIN=<(echo "$ACSECURE_PASSCODE") ACSECURE_PASSCODE= run 0 "--passcode-stdin before the command" --passcode-stdin cat a.acsf
expect "--passcode-stdin before the command: round trip" cmp -s out plain.txt
run 1 "an option before the command that is not global is still refused" --force cat a.acsf
run 1 "--app-id before no command" --app-id other.app
expect "the error asks for a command after the option" grep -q "name a command after --app-id other.app, e.g. acsecure --app-id other.app cat FILE" err
run 1 "--store without its value" --store
expect "the error says --store needs a value" grep -q -- "--store needs a value" err
run 0 "--app-id before --help" --app-id other.app --help
run 0 "the top-level help lists the options of every command" --help
expect "the top-level help says they go before or after the command" help_says "before or after the command name"
# cat and decrypt - write every chunk that authenticated, in order, before the error (chunk 3 is bad).
run 4 "cat a file bad in chunk 3" cat t.acsf
expect "cat wrote chunks 0-2 (12288 bytes) before the error" cmp -s out <(head -c 12288 plain.txt)
run 4 "decrypt - of a file bad in chunk 3" decrypt t.acsf -
expect "decrypt - wrote chunks 0-2 before the error" cmp -s out <(head -c 12288 plain.txt)
cp a.acsf t1.acsf
off=$((data + 4128 + 16 + 7))
printf "$(printf '\\x%02x' $(( $(od -An -tu1 -j$off -N1 t1.acsf) ^ 1 )))" | dd of=t1.acsf bs=1 seek=$off conv=notrunc status=none
run 4 "cat a file bad in chunk 1" cat t1.acsf
expect "cat wrote chunk 0 (4096 bytes) before the error" cmp -s out <(head -c 4096 plain.txt)
expect "the error names chunk 1" grep -q "t1.acsf: chunk 1" err
run 0 "cat --help" cat --help
expect "cat's help says every chunk before the first bad one is written" help_says "every chunk before the first bad one written, in order"
expect "cat's help no longer promises 'its good beginning'" bash -c "! grep -q 'good beginning' out"
# decrypt, encrypt and write onto a directory say so (--force cannot help).
mkdir -p outdir
run 2 "decrypt onto a directory" decrypt a.acsf outdir
expect "the error says it is a directory" grep -q "outdir: is a directory" err
expect "the error does not suggest --force" bash -c "! grep -q -e 'already exists' -e 'force' err"
run 2 "decrypt --force onto a directory" decrypt --force a.acsf outdir
expect "decrypt --force says it is a directory" grep -q "outdir: is a directory" err
run 2 "encrypt onto a directory" encrypt plain.txt outdir
expect "encrypt says it is a directory" grep -q "outdir: is a directory" err
STDIN=plain.txt run 2 "write onto a directory" write outdir
expect "write says it is a directory" grep -q "outdir: is a directory" err
expect "the directory is still a directory, empty" test -d outdir -a -z "$(ls -A outdir)"
# write --append needs an existing file.
STDIN=plain.txt run 2 "write --append to a missing file" write --append nothere.acsf
expect "write --append created no file" test ! -e nothere.acsf
expect "the error names the file, ENOENT and what --append does" grep -q "nothere.acsf: no such file (errno ENOENT): --append adds to an existing secure file" err
run 0 "write --help" write --help
expect "write's --group help is one sentence (no 'protects (or protects)')" bash -c "! grep -q 'or protects' out"
expect "write's help says --append never creates FILE" help_says "never creates FILE"
# share --to-app on a group file points to --from-group, and following the hint works.
cp a.acsf g.acsf
run 0 "share a file with a group (for --to-app)" share g.acsf --group com.example.g28
run 4 "share --to-app on a group file without --from-group" share g.acsf --to-app
expect "the error asks for --from-group (not --group)" bash -c "grep -q 'pass --from-group ID' err && ! grep -q 'pass --group' err"
run 0 "share --to-app --from-group, as the error says" share g.acsf --to-app --from-group com.example.g28
run 0 "cat after following the hint" cat g.acsf
expect "round trip after following the hint" cmp -s out plain.txt
# One damaged byte in the header's key fingerprint: another app's file or a damaged one.
cp a.acsf fp.acsf
printf "$(printf '\\x%02x' $(( $(od -An -tu1 -j40 -N1 fp.acsf) ^ 1 )))" | dd of=fp.acsf bs=1 seek=40 conv=notrunc status=none
run 4 "cat a file with a damaged key fingerprint" cat fp.acsf
expect "the error says another app ID or store, or a damaged header" grep -q "fp.acsf:.*another app ID or store.*or its header is damaged" err
run 0 "stat a file with a damaged key fingerprint (the header still reads)" stat fp.acsf
expect "stat says it may be damaged" grep -q "opens with: *not this app's key:.*or its header is damaged" out
run 0 "stat --help" stat --help
expect "stat's help says when it exits 0" help_says "Exits 0 whenever the header reads as a secure file header"
# Help text: counts agree in number, and the exit codes are not wrapped to column 0.
STDIN=<(printf 'x') run 0 "write a one-chunk file" write one.acsf
run 0 "stat a one-chunk file" stat one.acsf
expect "stat says (1 chunk), not (1 chunks)" bash -c "grep -q '(1 chunk)' out && ! grep -q '1 chunks' out && grep -q 'plaintext size: *1 byte (' out"
run 0 "verify a one-chunk file" verify one.acsf
expect "verify says 1 byte, 1 chunk" grep -q "one.acsf: 1 byte, 1 chunk and the length" out
help_bad=""
for c in "" demo init status unlock lock passwd retire encrypt decrypt cat write stat verify ls share rekey; do
  # shellcheck disable=SC2086
  "$bin" $c --help >help.out 2>&1 || help_bad+=" $c(exit)"
  # In the EXIT CODES block every line is a code ("  N  ...") or indented under one.
  sed -n '/^EXIT CODES:/,/^$/p' help.out | sed '1d;/^$/d' | grep -vqE '^  [0-9]  |^     ' && help_bad+=" ${c:-acsecure}(exit codes wrapped)"
  grep -qE '\(1 chunks\)|\(or protects\)' help.out && help_bad+=" ${c:-acsecure}(wording)"
done
rm -f help.out
expect "no help text has a wrapped exit code line or the old wording:${help_bad:- none}" test -z "$help_bad"
run 0 "top-level help" --help
expect "exit code 3 ends with 'or retired' on its own indented line" grep -qE "^     unreadable, or retired$" out

# --- progress bar: never when stderr is not a terminal
truncate -s 70M big.bin
run 0 "encrypt a 70 MiB file (piped)" encrypt big.bin big.acsf
expect "no progress output when piped" test ! -s err
run 0 "verify the 70 MiB file" verify big.acsf
rm -f big.bin big.acsf

# --- unlock / lock / passwd
run 0 "unlock checks the passcode" unlock
ACSECURE_PASSCODE=wrong run 3 "unlock with a wrong passcode" unlock
run 0 "lock explains" lock
sum_before="$(sha256sum a.acsf)"
STDIN=<(printf '%s\n%s\n' "$PASS1" "$PASS2") run 0 "passwd (old and new from stdin)" passwd --passcode-stdin
clean_output "passwd"
expect "passwd re-encrypted no file" test "$(sha256sum a.acsf)" = "$sum_before"
run 3 "the old passcode no longer works" cat a.acsf
export ACSECURE_PASSCODE="$PASS2"
run 0 "the new passcode works" cat a.acsf
expect "files readable after passwd" cmp -s out plain.txt
STDIN=<(printf 'wrong\nwhatever\n') run 3 "passwd with a wrong old passcode" passwd --passcode-stdin
run 0 "passwd --remove" passwd --remove
ACSECURE_PASSCODE= run 0 "no passcode needed after --remove" cat a.acsf
run 3 "a passcode still configured after --remove refuses the now unprotected store" cat a.acsf
unset ACSECURE_PASSCODE

# --- demo on its own embedded store
mkdir -p "$work/tmp"
TMPDIR="$work/tmp" ACSECURE_HOME="$work/unused" run 0 "demo" demo
expect "demo reports all checks passed" grep -qE "^demo: all [0-9]+ checks passed" out
demo_checks="$(sed -n 's/^demo: all \([0-9]*\) checks passed.*/\1/p' out)"
expect "demo counts the checks it shows" test -n "$demo_checks" -a "$(grep -cE '^ +check (ok|FAILED): ' out)" = "$demo_checks"
clean_output "demo"
expect "demo did not touch ACSECURE_HOME" test ! -e "$work/unused"
expect "demo removed its temp dir" test -z "$(ls -A "$work/tmp")"
ACSECURE_HOME="$work/unused" run 0 "demo --dir --keep" demo --dir "$work/demo" --keep
expect "demo --keep kept the encrypted sample" test -s "$work/demo/sample.txt.acsf"

# --- prompts on a terminal (script(1) gives acsecure a pseudo-terminal): passcodes are read
# without echo. Each answer is typed once its prompt shows on the terminal: acsecure turns echo off
# (flushing typed-ahead input, as getpass does) before it writes the prompt, so an answer typed
# then is read, and one typed earlier would be lost.
# tty_dialogue COMMAND PROMPT ANSWER [PROMPT ANSWER]... : the terminal's output in out, errors in err.
tty_dialogue() {
  local command="$1" seen="" char
  shift
  coproc TTY { exec timeout 120 script -qec "$bin $command" /dev/null 2>err; }
  local from="${TTY[0]}" to="${TTY[1]}" pid="$TTY_PID"
  while [ $# -ge 2 ]; do
    until [[ "$seen" == *"$1" ]]; do
      IFS= read -r -N 1 -t 30 char <&"$from" || { echo "tty_dialogue: no prompt '$1' within 30 s" >>err; break 2; }
      seen+="$char"
    done
    printf '%s\n' "$2" >&"$to"
    shift 2
  done
  exec {to}>&-
  cat <&"$from" >out.rest
  wait "$pid"
  { printf '%s' "$seen"; cat out.rest; } >out
  rm -f out.rest
}
if command -v script >/dev/null 2>&1; then
  tty_home="$work/tty-store"
  ACSECURE_HOME="$tty_home" ACSECURE_PASSCODE= tty_dialogue init "New passcode (empty for none): " "$PASS1" "Repeat the new passcode: " "$PASS1"
  expect "init asks for the passcode on the terminal" grep -q "Repeat the new passcode" out
  expect "init created a passcode store" grep -q "passcode: set" out
  clean_output "init on a terminal (no echo)"
  ACSECURE_HOME="$tty_home" ACSECURE_PASSCODE= tty_dialogue unlock "Passcode for the store $tty_home: " "$PASS1"
  expect "unlock on a terminal accepts the passcode" grep -q "passcode OK" out
  clean_output "unlock on a terminal (no echo)"
  ACSECURE_HOME="$tty_home" tty_dialogue retire "Type 'retire' to confirm: " no
  expect "retire on a terminal without 'retire' typed keeps the store" test -e "$tty_home/seed"
else
  echo "  skip  terminal prompts (no script(1))"
fi

# --- encrypt and decrypt with one system call failing (debug builds: ACSECURE_TEST_SYSCALL_FAULT, see
# Sources/acsecure/TestFaults.swift). For each call the command makes, every attempt in turn fails with
# EIO: a failed command must name its output and leave the old output (the new one only when the
# failed step is the directory fsync after the rename), a successful one the new output, and no run
# may leave a temporary file. A store without a passcode keeps the runs fast.
fstore="$work/fault-store"; fdir="$work/faults"; mkdir -p "$fdir"
ACSECURE_HOME="$fstore" ACSECURE_PASSCODE= run 0 "init a store for the fault runs" init
head -c 300000 /dev/urandom > "$fdir/new.txt"; echo "the old output" > "$fdir/old.txt"
acs_f() { ACSECURE_HOME="$fstore" ACSECURE_PASSCODE= "$bin" "$@"; }
acs_f encrypt --force "$fdir/new.txt" "$fdir/new.acsf" >/dev/null 2>&1
fault_runs=0; fault_bad=0
fault_fail() { fault_bad=$((fault_bad + 1)); fail "$1"; }
# fault_sweep CMD OUTPUT PREPARE CONTENT: PREPARE puts the old output in place, CONTENT prints the output's plaintext.
fault_sweep() {
  local cmd="$1" output="$2" prepare="$3" content="$4" counts call n status label
  $prepare
  counts="$(ACSECURE_TEST_SYSCALL_FAULT=count acs_f "$cmd" --force "$([ "$cmd" = encrypt ] && echo "$fdir/new.txt" || echo "$fdir/new.acsf")" "$output" 2>&1 >/dev/null | sed -n 's/^acsecure: test: system calls: //p')"
  [ -n "$counts" ] || { fault_fail "$cmd: no system call counts (is this a debug build?)"; return; }
  for pair in $counts; do
    call="${pair%=*}"
    for n in $(seq 0 $((${pair#*=} - 1))); do
      label="$cmd with $call#$n failing"
      $prepare
      ACSECURE_TEST_SYSCALL_FAULT="$call:$n:5" acs_f "$cmd" --force "$([ "$cmd" = encrypt ] && echo "$fdir/new.txt" || echo "$fdir/new.acsf")" "$output" >out 2>err
      status=$?
      fault_runs=$((fault_runs + 1))
      no_temp_files "$fdir" || fault_fail "$label: a temporary file is left"
      if [ "$status" = 0 ]; then
        cmp -s <($content) "$fdir/new.txt" || fault_fail "$label: exit 0 but the output is not the new content"
      else
        # Failures before the output is touched (loading the store, reading the input) name that file.
        grep -qE "$output|$fdir/new\.|$fstore" err || fault_fail "$label: the error names no file of the command"
        if ! cmp -s <($content) "$fdir/old.txt"; then
          grep -q "directory" err && cmp -s <($content) "$fdir/new.txt" || fault_fail "$label: failed (exit $status) and the output is neither old nor new"
        fi
      fi
    done
  done
}
prepare_encrypt() { acs_f encrypt --force "$fdir/old.txt" "$fdir/out.acsf" >/dev/null 2>&1; }
content_encrypt() { acs_f cat "$fdir/out.acsf" 2>/dev/null; }
prepare_decrypt() { cp "$fdir/old.txt" "$fdir/out.txt"; }
content_decrypt() { cat "$fdir/out.txt"; }
fault_sweep encrypt "$fdir/out.acsf" prepare_encrypt content_encrypt
fault_sweep decrypt "$fdir/out.txt" prepare_decrypt content_decrypt
expect "encrypt/decrypt with a failing system call: $fault_runs runs, every one whole or untouched" test "$fault_bad" = 0 -a "$fault_runs" -gt 20

# --- a planted unprotected seed is refused when a passcode is configured
planted="$work/planted-store"
ACSECURE_HOME="$planted" ACSECURE_PASSCODE= run 0 "init a store without a passcode (the planted one)" init
ACSECURE_HOME="$planted" ACSECURE_PASSCODE= STDIN=plain.txt run 0 "write with the planted store's keys" write planted.acsf
ACSECURE_HOME="$planted" ACSECURE_PASSCODE="$PASS1" run 3 "with ACSECURE_PASSCODE set, an unprotected store is refused" cat planted.acsf
expect "the refusal says the store is not protected" grep -qi "protect\|passcode" err
clean_output "planted seed refused"

# --- retire
run 1 "retire refuses without confirmation" retire
expect "store still there after refusal" test -e "$ACSECURE_HOME/seed"
run 0 "retire --yes" retire --yes
expect "seed removed" test ! -e "$ACSECURE_HOME/seed"
run 3 "cat after retire" cat a.acsf
run 3 "status after retire" status

echo "cli: $passed passed, $failed failed"
[ "$failed" = 0 ]
