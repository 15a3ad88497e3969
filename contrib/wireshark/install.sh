#!/usr/bin/env bash
# Installs (or removes) packetexpress.lua where Wireshark and tshark load Lua
# plugins from.
#
#   install.sh [--user | --system] [--destdir DIR] [--dir PLUGIN_DIR] [--uninstall]
#
#   --user      the personal Lua plugin folder (~/.local/lib/wireshark/plugins);
#               the default when not root
#   --system    the global Lua plugin folder (Debian 12:
#               /usr/lib/x86_64-linux-gnu/wireshark/plugins); the default as root
#   --destdir   prefix every path with DIR (package builds: DESTDIR)
#   --dir       install into PLUGIN_DIR instead
#
# The folders are the ones `tshark -G folders` reports ("Personal Lua
# Plugins", "Global Lua Plugins") when tshark is installed; otherwise the
# Debian defaults, with the multiarch triplet from dpkg-architecture or
# gcc -print-multiarch.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/packetexpress.lua"
scope=""
destdir="${DESTDIR:-}"
dir=""
uninstall=0

while [ $# -gt 0 ]; do
    case "$1" in
        --user) scope=user ;;
        --system) scope=system ;;
        --destdir) destdir="$2"; shift ;;
        --dir) dir="$2"; shift ;;
        --uninstall) uninstall=1 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$scope" ]; then
    if [ "$(id -u)" = 0 ]; then scope=system; else scope=user; fi
fi

folder() { # $1 = "Personal Lua Plugins" | "Global Lua Plugins"
    if command -v tshark >/dev/null 2>&1; then
        tshark -G folders 2>/dev/null | awk -F'\t' -v k="$1:" '{ sub(/[ ]+$/, "", $1) } $1 == k { print $NF }'
    fi
}

if [ -z "$dir" ]; then
    if [ "$scope" = user ]; then
        dir="$(folder "Personal Lua Plugins")"
        [ -n "$dir" ] || dir="$HOME/.local/lib/wireshark/plugins"
    else
        dir="$(folder "Global Lua Plugins")"
        if [ -z "$dir" ]; then
            triplet="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)"
            [ -n "$triplet" ] || triplet="$(uname -m)-linux-gnu"
            dir="/usr/lib/$triplet/wireshark/plugins"
        fi
    fi
fi

target="$destdir$dir/packetexpress.lua"
if [ "$uninstall" = 1 ]; then
    rm -f "$target"
    echo "removed $target"
else
    install -D -m 0644 "$src" "$target"
    echo "installed $target"
fi
