#!/usr/bin/env bash
# Runs the pjdfstest Rust port (crates.io) on a fresh wodfs mount and checks
# the result against pjdfstest-exclude.txt: any failing or skipped case not
# listed there fails the run, and so does a pass rate under 98 % (listed
# cases count as failures). Needs root and /dev/fuse.
#   run-pjdfstest.sh WODFS_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
wodfs=${1:?usage: run-pjdfstest.sh WODFS_BINARY}
version=0.2.2

if ! command -v pjdfstest >/dev/null || [ "$(pjdfstest --version | awk '{print $2}')" != "$version" ]; then
    cargo install --quiet --locked pjdfstest --version "$version"
fi

work=$(mktemp -d /var/tmp/wodfs-pjdfstest.XXXXXX)
# The suite switches to unprivileged users, who must reach the mount.
chmod 0755 "$work"
mnt="$work/mnt"
mkdir -p "$mnt"
cleanup() {
    mountpoint -q "$mnt" && fusermount3 -u "$mnt"
    [ -n "${daemon:-}" ] && wait "$daemon" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
"$wodfs" mkfs "$work/image" --size 2G >/dev/null
"$wodfs" mount "$work/image" "$mnt" -f >"$work/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { cat "$work/daemon.log"; exit 1; }

set +e
(cd / && pjdfstest -c "$here/pjdfstest.toml" -p "$mnt" -s /var/tmp) >"$work/out.txt" 2>&1
set -e
summary=$(grep '^Summary:' "$work/out.txt" || true)
echo "pjdfstest $version on wodfs: $summary"
[ -n "$summary" ] || { tail -40 "$work/out.txt"; exit 1; }

bad=0
while read -r name status; do
    if ! grep -q "^$name " "$here/pjdfstest-exclude.txt"; then
        echo "pjdfstest: $name $status (not in pjdfstest-exclude.txt)"
        grep -A3 "^$name " "$work/out.txt" | tail -3
        bad=1
    fi
done < <(awk '$NF == "FAILED" || $NF == "skipped" {print $1, $NF}' "$work/out.txt")

passed=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$summary")
total=$(sed -E 's/.* ([0-9]+) total.*/\1/' <<<"$summary")
if [ $((passed * 100)) -lt $((total * 98)) ]; then
    echo "pjdfstest: $passed of $total passed, under 98 %"
    bad=1
fi
exit $bad
