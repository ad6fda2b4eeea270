#!/usr/bin/env bash
# Build PgBouncer from a release source tarball, unpatched or with fix.patch (this folder).
#
#   build.sh SRC_TARBALL OUTDIR [--patched] [-- CONFIGURE_ARGS...]
#
# SRC_TARBALL  a PgBouncer source tarball with a generated configure (a release tarball,
#              e.g. pgbouncer-1.25.2.tar.gz; `git archive` of the tag lacks configure).
# OUTDIR       must not exist; on success it is the configured and built source tree:
#              OUTDIR/pgbouncer is the binary and OUTDIR/test/ PgBouncer's own pytest suite
#              (which runs OUTDIR/pgbouncer). On failure nothing is left at OUTDIR.
# --patched    apply fix.patch (beside this script) before configuring.
# CONFIGURE_ARGS are passed to ./configure as given (e.g. --enable-cassert, as upstream CI).
#
# Needs: tar, patch, make, a C compiler, pkg-config, libevent and OpenSSL headers (Debian:
# build-essential pkg-config libevent-dev libssl-dev). Exit 0 built, 2 on any error.
set -euo pipefail

die() { echo "build.sh: $*" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 2 ] || die "usage: build.sh SRC_TARBALL OUTDIR [--patched] [-- CONFIGURE_ARGS...]"
tarball=$1
outdir=$2
shift 2
patched=0
configure_args=()
while [ $# -gt 0 ]; do
    case $1 in
        --patched) patched=1; shift ;;
        --) shift; configure_args=("$@"); break ;;
        *) die "unknown argument: $1 (usage: build.sh SRC_TARBALL OUTDIR [--patched] [-- CONFIGURE_ARGS...])" ;;
    esac
done

[ -f "$tarball" ] && [ -r "$tarball" ] || die "source tarball $tarball is missing or unreadable"
[ ! -e "$outdir" ] || die "OUTDIR $outdir exists; give a path that does not"
for tool in tar patch make pkg-config; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH"
done
command -v "${CC:-cc}" >/dev/null || die "C compiler ${CC:-cc} not found on PATH"
if [ "$patched" = 1 ]; then
    [ -r "$here/fix.patch" ] || die "$here/fix.patch is missing"
fi

parent=$(dirname "$outdir")
[ -d "$parent" ] && [ -w "$parent" ] || die "parent directory $parent does not exist or is not writable"
work=$(mktemp -d "$parent/.build-pgbouncer.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 2' INT TERM

# The tarball has one top directory holding configure.
top=$(tar -tzf "$tarball" 2>/dev/null | head -n 1 | cut -d/ -f1) || true
[ -n "$top" ] || die "$tarball is not a readable .tar.gz"
tar -xzf "$tarball" -C "$work" || die "extracting $tarball failed"
src="$work/$top"
[ -x "$src/configure" ] || die "$tarball has no $top/configure (a git archive needs ./autogen.sh first)"

if [ "$patched" = 1 ]; then
    (cd "$src" && patch -p1 --dry-run --quiet < "$here/fix.patch" >/dev/null) \
        || die "fix.patch does not apply to $tarball"
    (cd "$src" && patch -p1 --quiet < "$here/fix.patch") || die "applying fix.patch failed"
fi

log="$work/build.log"
echo "build.sh: configuring $top${configure_args[*]:+ (${configure_args[*]})}$( [ "$patched" = 1 ] && echo ', with fix.patch')" >&2
(cd "$src" && ./configure "${configure_args[@]}") > "$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "configure failed (log above)"; }
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
# Only the binary: the man pages need pandoc, which a release tarball does not (it ships
# them prebuilt) but a tarball made from the tag does.
(cd "$src" && make -j"$jobs" pgbouncer) >> "$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "make failed (log above)"; }
version=$("$src/pgbouncer" --version 2>&1 | head -n 1) || die "the built pgbouncer does not run"
mv "$log" "$src/build.log"
mv "$src" "$outdir" || die "moving the build to $outdir failed"
echo "build.sh: built $outdir/pgbouncer: $version$( [ "$patched" = 1 ] && echo ' + fix.patch')" >&2
echo "$outdir/pgbouncer"
