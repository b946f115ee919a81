#!/bin/sh
# test_structure.sh SOURCE_DIR BUILD_DIR - the rules between the engine's files (issue 26), checked
# on the code as built: no file of cl/ or engine/ in a cycle of files that use one another's
# symbols, and none between the engine's folders (scripts/file_cycles, from the libraries' own
# symbol tables); no engine source file over 750 lines; the engine never reads a command line
# (no argv: programs parse flags and pass structures).
SRC=$1 BUILD=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

out=$(python3 "$SRC/scripts/file_cycles" "$BUILD") || fail "cycles between files:
$out"
out=$(python3 "$SRC/scripts/file_cycles" --folders "$BUILD") || fail "cycles between folders:
$out"
for f in "$SRC"/engine/*/*.c; do
    n=$(wc -l <"$f")
    [ "$n" -le 750 ] || fail "$f has $n lines (the engine's files stay under about 700)"
done
if grep -rn "argv" "$SRC/engine" >/dev/null; then
    fail "the engine reads argv: $(grep -rn argv "$SRC/engine" | head -3)"
fi
# the check itself can fail: a made-up cycle between two objects is found
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib"
printf 'int b(void);\nint a(void) { return b(); }\n' >"$tmp/x.c"
printf 'int a(void);\nint b(void) { return a() + 1; }\n' >"$tmp/y.c"
cc -c "$tmp/x.c" -o "$tmp/x.c.o" && cc -c "$tmp/y.c" -o "$tmp/y.c.o" &&
    ar rcs "$tmp/lib/libct_engine.a" "$tmp/x.c.o" "$tmp/y.c.o" ||
    fail "cannot build the made-up library"
if python3 "$SRC/scripts/file_cycles" "$tmp/lib" >"$tmp/out"; then
    fail "file_cycles did not see the cycle x.c <-> y.c"
else
    grep -q "cycle of 2 files: x.c y.c" "$tmp/out" || fail "file_cycles: $(cat "$tmp/out")"
fi
if [ "$fails" -eq 0 ]; then echo "test_structure: all passed"; else echo "test_structure: $fails failure(s)"; fi
[ "$fails" -eq 0 ]
