#!/bin/sh
# Installs the wodfs binary and the mount/fsck helpers into /usr/local/sbin
# (where mount(8) and fsck(8) look). Usage: install.sh PATH/TO/wodfs
set -e
bin=${1:?usage: install.sh PATH/TO/wodfs}
here=$(dirname "$0")
install -m 0755 "$bin" /usr/local/bin/wodfs
install -m 0755 "$here/mount.fuse.wodfs" /sbin/mount.fuse.wodfs
install -m 0755 "$here/fsck.fuse.wodfs" /sbin/fsck.fuse.wodfs
