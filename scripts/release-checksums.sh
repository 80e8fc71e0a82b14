#!/bin/sh
# Appends a published release's SHA-256s to release/checksums.toml (docs/src/development.md,
# "Releasing"): `sh scripts/release-checksums.sh 0.2.0 [BASE_URL]`, then commit the file.
set -eu
version="$1"
base="${2:-$(sed -n 's/^base_url = "\(.*\)"$/\1/p' release/checksums.toml)}"
[ -n "$base" ] || { echo "no base URL: pass it, or set base_url in release/checksums.toml" >&2; exit 1; }
table="$(dirname "$0")/../release/checksums.toml"
lines=""
for target in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
    sum="$(curl --fail --silent --show-error --location "$base/v$version/agent-runner-$target.tar.xz.sha256" | cut -d' ' -f1)"
    case "$sum" in *[!0-9a-f]*|'') echo "no SHA-256 for $target at $base/v$version" >&2; exit 1 ;; esac
    [ "${#sum}" -eq 64 ] || { echo "not a SHA-256 for $target: $sum" >&2; exit 1; }
    lines="$lines$target = \"$sum\"
"
done
printf '\n[versions."%s"]\n%s' "$version" "$lines" >> "$table"
echo "added $version to $table"
