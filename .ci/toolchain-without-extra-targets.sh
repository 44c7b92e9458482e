#!/usr/bin/env bash
# Makes, and links into rustup as `mlx5-no-extra-targets`, a copy of the pinned toolchain
# that has the host's standard library only: no x86_64-unknown-none, no aarch64-unknown-none.
# CI runs the README's test command with it (`cargo +mlx5-no-extra-targets test --workspace`),
# which proves that a user with a default Rust install, who never ran `rustup target add`,
# can run the tests: anything in `cargo test` that needs another target fails there.
#
# The binaries and rustc's shared libraries are copied (rustc finds its sysroot from where
# librustc_driver was loaded, after resolving links); the host's rustlib is symlinked. The
# copy costs ~400 MB of disk under target/ and a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

name=mlx5-no-extra-targets
src=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
dst=$PWD/target/$name

rm -rf "$dst"
mkdir -p "$dst/lib/rustlib"
cp -a "$src/bin" "$dst/bin"
for f in "$src"/lib/*; do
    [ "$(basename "$f")" = rustlib ] || cp -a "$f" "$dst/lib/"
done
for f in "$src"/lib/rustlib/*; do
    case "$(basename "$f")" in
        "$host" | etc | components | rust-installer-version | multirust-*) ln -s "$f" "$dst/lib/rustlib/" ;;
        manifest-*) ;;
        *) ;; # every other target's standard library is left out
    esac
done
rustup toolchain link "$name" "$dst" >/dev/null

# Prove the copy really lacks the extra targets before anyone relies on it.
if cargo "+$name" build -q --offline -p mlx5-hal --target x86_64-unknown-none \
    --target-dir "$dst/probe" >/dev/null 2>&1; then
    echo "toolchain-without-extra-targets: FAIL: the copy can still build for x86_64-unknown-none" >&2
    exit 1
fi
ls "$dst/lib/rustlib"
echo "toolchain $name: $(cargo "+$name" --version), host target only"
