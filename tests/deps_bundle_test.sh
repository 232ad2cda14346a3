#!/usr/bin/env bash
# The offline build (docs/development.md, "Offline builds"): scripts/deps-bundle makes the
# bundle, a fresh build directory is configured with COHORT_DEPS_BUNDLE, and the torch-free
# parts that use every bundled library are built and run: the store (zlib), the loop's config
# and journal (toml11, SQLite, fmt, nlohmann-json) and `cohort sbatch`'s script (CLI11).
# Then the proof that the Debian packages were not used: no object of those targets read a
# header of theirs from /usr/include (ninja's dependency log), and the test binaries are not
# linked against libsqlite3.so or libz.so.
#
# Run by ctest as: tests/deps_bundle_test.sh SOURCE_DIR SCRATCH_DIR
set -euo pipefail
src="$1"
scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch"
fail() { echo "deps_bundle_test: FAIL: $*" >&2; exit 1; }

"$src/scripts/deps-bundle" --out "$scratch/bundle"
cmake -S "$src" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCOHORT_DEPS_BUNDLE="$scratch/bundle" -DCOHORT_BUILD_BENCH=OFF > "$scratch/configure.log" ||
  fail "configure failed: $(tail -5 "$scratch/configure.log")"
grep -q "dependencies from the bundle $scratch/bundle" "$scratch/configure.log" ||
  fail "the configure log does not say the bundle is used"

# A bundle missing a file is refused at configure time, naming it.
cp -a "$scratch/bundle" "$scratch/broken"
rm "$scratch/broken/lib/libsqlite3.a"
if cmake -S "$src" -B "$scratch/broken-build" -G Ninja -DCOHORT_DEPS_BUNDLE="$scratch/broken" \
     > "$scratch/broken.log" 2>&1; then
  fail "a bundle without lib/libsqlite3.a was accepted"
fi
grep -q "lib/libsqlite3.a is missing" "$scratch/broken.log" ||
  fail "the broken bundle's error does not name lib/libsqlite3.a: $(grep -m1 Error "$scratch/broken.log")"

targets=(journal_test config_test store_test sbatch_command_test)
cmake --build "$scratch/build" --target "${targets[@]}" -- -j2 > "$scratch/build.log" ||
  fail "the bundle build failed: $(grep -m3 -E 'error|Error' "$scratch/build.log")"

for t in "${targets[@]}"; do
  binary=$(find "$scratch/build/src" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$binary" ] || fail "$t was not built"
  if grep -E "libsqlite3|libz\.so" <<< "$(ldd "$binary")"; then
    fail "$t links a shared SQLite or zlib instead of the bundle's static libraries"
  fi
  (cd "$scratch" && COHORT_TEST_TMP="$scratch/test-tmp" "$binary" --gtest_brief=1 > "$t.log" 2>&1) ||
    fail "$t failed when built from the bundle: $(tail -5 "$scratch/$t.log")"
done

deps=$(ninja -C "$scratch/build" -t deps)
grep -q "$scratch/bundle/include/sqlite3.h" <<< "$deps" || fail "no object read the bundle's sqlite3.h"
grep -q "$scratch/bundle/include/CLI/" <<< "$deps" || fail "no object read the bundle's CLI11"
leaked=$(grep -E "^ +/usr/include/(nlohmann|toml|CLI|fmt|sqlite3|zlib|zconf)" <<< "$deps" | sort -u || true)
[ -z "$leaked" ] || fail "headers read from the Debian packages: $leaked"
echo "deps_bundle_test: OK (bundle $(du -sh "$scratch/bundle" | cut -f1))"
