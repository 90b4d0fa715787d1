#!/usr/bin/env bash
# Sets everything up and mounts a wodfs file system, with no arguments:
# installs the Debian packages it needs, builds wodfs with the machine's
# rustup toolchain, installs the `wodfs` command and its mount/fsck helpers,
# creates a default image and mounts it.
#
#   WODFS_IMAGE  image file        (default /var/lib/wodfs/default.img)
#   WODFS_MOUNT  mount point       (default /mnt/wodfs)
#   WODFS_SIZE   size of a new image (default 16G, sparse)
set -euo pipefail
cd "$(dirname "$0")/.."

image=${WODFS_IMAGE:-/var/lib/wodfs/default.img}
mnt=${WODFS_MOUNT:-/mnt/wodfs}
size=${WODFS_SIZE:-16G}

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: run as root (it installs packages and mounts)" >&2
    exit 1
fi

pkgs=(fuse3 libfuse3-dev pkg-config gcc)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

if [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
cargo build --release -p wodfs-cli
install -m 0755 target/release/wodfs /usr/local/bin/wodfs
# mount(8) runs /sbin/mount.fuse.wodfs for `mount -t fuse.wodfs` and fstab;
# fsck(8) runs fsck.fuse.wodfs.
for helper in mount.fuse.wodfs fsck.fuse.wodfs; do
    if [ -f "crates/wodfs-cli/scripts/$helper" ]; then
        install -m 0755 "crates/wodfs-cli/scripts/$helper" "/sbin/$helper"
    fi
done

mkdir -p "$(dirname "$image")" "$mnt"
if [ ! -e "$image" ]; then
    wodfs mkfs "$image" --size "$size"
fi
if mountpoint -q "$mnt"; then
    echo "setup.sh: $mnt is already mounted"
else
    wodfs mount "$image" "$mnt"
fi
echo "wodfs: $image mounted at $mnt (unmount: fusermount3 -u $mnt; make durable: wodfs sync $mnt)"
