#!/bin/sh
# The README's first command: builds runner, then runs workflows/jwt-migration.toml for real on a
# throwaway git checkout of demo/repo (target/demo): the tools, the command step, the checks and
# the worktree are real; the model's side is answered from demo/cassettes, a scripted recording
# (demo/script.py), so it needs no key and no network.
set -eu
cd "$(dirname "$0")/.."
# The test build, not plain `cargo build`: the tests' dev-dependencies turn on more features of
# shared crates (hyper, clap, tokio-rustls, slab, ...), so a plain build's dependencies would
# all be built again by the README's second command, `cargo test`. This builds them once, with
# target/debug/runner among them, and `cargo test` then compiles nothing.
cargo build --tests
demo=target/demo
rm -rf "$demo"
mkdir -p "$demo"
cp -R demo/repo/. "$demo"/
git -C "$demo" init --quiet -b main
git -C "$demo" add -A
git -C "$demo" -c user.name=demo -c user.email=demo@localhost commit --quiet -m "demo app"
status=0
target/debug/runner run workflows/jwt-migration.toml --workdir "$demo" --replay demo/cassettes || status=$?
branch=$(git -C "$demo" for-each-ref --format='%(refname:short)' 'refs/heads/runner/')
if [ -n "$branch" ]; then
    echo
    echo "the implement step's branch in $demo:"
    git -C "$demo" diff --stat main "$branch"
    git -C "$demo" log --oneline -1 "$branch"
fi
exit "$status"
