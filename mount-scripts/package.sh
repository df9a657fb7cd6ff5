#!/usr/bin/env bash
# package.sh [OUTDIR]: make a Debian package of the release build, OUTDIR/docdrive_VERSION_ARCH.deb
# (OUTDIR default: the current folder). It installs with `apt install ./docdrive_VERSION_ARCH.deb`
# on a Debian 12 machine without Swift: the Swift runtime libraries the programs load go inside
# it, in /usr/lib/docdrive (the programs' RUNPATH points there), so it depends only on Debian's.
# Why not --static-swift-stdlib: that flag changes how every Swift module is compiled, so it is a
# second build of every module (about 8 minutes on 2 cores), which `swift test` cannot reuse; the
# package holds the very build the test suite ran.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

outdir=$(realpath -m "${1:-.}")
install_runtime_deps
apt_install binutils patchelf   # strip; the programs' RUNPATH
bin=$(dirname "$(build_release)")
cd "$DOCDRIVE_REPO"
scratch=${DOCDRIVE_SCRATCH:-.build}
# The man page, as install_command makes it (the plugin's build is the one above, done).
swift package --scratch-path "$scratch" -c release generate-manual >/dev/null \
    || { say "package.sh: the man page could not be generated."; exit 1; }
man=$scratch/plugins/GenerateManual/outputs/docdrive/docdrive.1
[ -s "$man" ] || { say "package.sh: the plugin made no $man."; exit 1; }

# What docdrive-full loads: the Swift toolchain's libraries (shipped), the system's (depended on).
libs=$(ldd "$bin/docdrive-full" | awk '$2 == "=>" { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
if grep -q 'not found' <(ldd "$bin/docdrive-full"); then
    say "package.sh: docdrive-full misses libraries:"; ldd "$bin/docdrive-full" >&2; exit 1
fi
swift_lib_dir=$(dirname "$(grep -m1 '/libswiftCore\.so' <<<"$libs")")
[ -d "$swift_lib_dir" ] || { say "package.sh: docdrive-full loads no libswiftCore.so."; exit 1; }
runtime=$(grep "^$swift_lib_dir/" <<<"$libs")
# The packages those libraries come from (merged /usr: dpkg may know a file under /lib or /usr/lib).
owner() { dpkg -S "$1" 2>/dev/null || dpkg -S "$(realpath "$1")" 2>/dev/null || dpkg -S "${1#/usr}" 2>/dev/null || dpkg -S "/usr$1" 2>/dev/null; }
depends=(fuse3)   # fusermount3, and mount.fuse3, through which mount(8) and fstab run `docdrive`
for lib in $(grep -v "^$swift_lib_dir/" <<<"$libs"); do
    pkg=$(owner "$lib" | head -n 1 | cut -d: -f1) || true
    [ -n "$pkg" ] || { say "package.sh: no Debian package owns $lib, which docdrive-full loads."; exit 1; }
    depends+=("$pkg")
done
depends_line=$(printf '%s\n' "${depends[@]}" | sort -u | paste -sd, - | sed 's/,/, /g')

version=$("$bin/docdrive" --version)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
umask 022

# The programs, side by side: `docdrive` runs `docdrive-full` from its own folder.
install -D -m 0755 "$bin/docdrive" "$stage/usr/bin/docdrive"
install -D -m 0755 "$bin/docdrive-full" "$stage/usr/bin/docdrive-full"
strip --strip-unneeded "$stage/usr/bin/docdrive" "$stage/usr/bin/docdrive-full"
# The Swift runtime, where docdrive-full (not any other program) finds it.
install -d "$stage/usr/lib/docdrive"
for lib in $runtime; do install -m 0644 "$lib" "$stage/usr/lib/docdrive/"; done
patchelf --set-rpath /usr/lib/docdrive "$stage/usr/bin/docdrive-full"

install -d "$stage/usr/share/man/man1"
gzip -9n <"$man" >"$stage/usr/share/man/man1/docdrive.1.gz"

install -d "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
    "$stage/usr/share/fish/vendor_completions.d"
"$bin/docdrive" --generate-completion-script bash >"$stage/usr/share/bash-completion/completions/docdrive"
"$bin/docdrive" --generate-completion-script zsh >"$stage/usr/share/zsh/vendor-completions/_docdrive"
"$bin/docdrive" --generate-completion-script fish >"$stage/usr/share/fish/vendor_completions.d/docdrive.fish"

# The systemd user unit: what `docdrive service install` writes (Service.unitText) for the
# default drive at ~/Drive. Not enabled: `systemctl --user enable --now docdrive.service`.
install -d "$stage/usr/lib/systemd/user"
cat >"$stage/usr/lib/systemd/user/docdrive.service" <<'EOF'
# Installed by the docdrive package: mounts the drive in $DOCDRIVE_HOME (default
# ~/.local/share/docdrive, made by `docdrive init`) at ~/Drive. Start it at every login with
# `systemctl --user enable --now docdrive.service`. A unit `docdrive service install` writes to
# ~/.config/systemd/user under the same name takes this one's place.
[Unit]
Description=DocDrive at %h/Drive
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
ExecStart=/usr/bin/docdrive mount --upload-grace 30 --foreground %h/Drive
KillSignal=SIGTERM
TimeoutStopSec=60
Restart=on-failure
RestartSec=5

[Install]
WantedBy=default.target
EOF

# The file manager extension (what `docdrive desktop install` writes for one user: the status
# socket's client, then the extension's own text), for every user, where Nautilus's and Nemo's
# python bindings look for extensions of the system.
for fm in nautilus-python nemo-python; do
    install -d "$stage/usr/share/$fm/extensions"
    { cat Sources/docdrive/Desktop/docdrive_status.py; printf '\n\n'; cat Sources/docdrive/Desktop/docdrive_files.py; } \
        | sed 's|"@DOCDRIVE@"|"/usr/bin/docdrive"|' >"$stage/usr/share/$fm/extensions/docdrive_files.py"
done

# The document picker's D-Bus activation file (what `docdrive desktop install` writes for one
# user): the session bus starts the picker's service on the first call to org.docdrive.Picker1.
install -d "$stage/usr/share/dbus-1/services"
printf '[D-BUS Service]\nName=org.docdrive.Picker1\nExec=/usr/bin/docdrive desktop picker-service\n' \
    >"$stage/usr/share/dbus-1/services/org.docdrive.Picker1.service"

install -d "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<EOF
Package: docdrive
Version: $version
Architecture: $arch
Maintainer: DocDrive developers <docdrive@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends_line
Suggests: python3-nautilus | nemo-python, python3-gi, gir1.2-gtk-3.0
Section: utils
Priority: optional
Description: one folder over your apps' documents and your storage providers
 DocDrive is a FUSE file system: one folder (~/Drive) shows every application's
 public documents and every storage provider (a folder on a NAS, an S3 bucket
 shared by your machines) side by side. Files are uploaded when saved, other
 machines' changes come in by themselves, and a file only on the remote is
 downloaded when opened.
EOF
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"

mkdir -p "$outdir"
deb=$outdir/docdrive_${version}_${arch}.deb
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
say "package.sh: made $deb ($(du -h "$deb" | cut -f1)); depends on $depends_line"
echo "$deb"
