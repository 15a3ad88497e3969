#!/usr/bin/env bash
# Tests contrib/wireshark/packetexpress.lua with tshark: makes pcaps offline
# (make_pcaps.py, scapy; nothing is sent), dissects them, and compares the
# fields tshark extracts (-T fields) with what the sender put in.
#
# Usage: tests/wireshark/run.sh [PCAP_DIR]
#   PCAP_DIR: pcaps written by the lab tests, dissected too (X.pcap with an
#   X.json of expectations in make_pcaps.py's format is compared; without
#   one it must dissect without errors).
# Exits 0 with "SKIP: ..." when tshark or python3-scapy is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
lua="$repo/contrib/wireshark/packetexpress.lua"
py=/usr/bin/python3
[ -x "$py" ] || py=python3

if ! command -v tshark >/dev/null 2>&1; then
    echo "SKIP: tshark not installed (Debian: apt-get install tshark)"
    exit 0
fi
if ! "$py" -c 'import scapy' >/dev/null 2>&1; then
    echo "SKIP: python3-scapy not installed (Debian: apt-get install python3-scapy)"
    exit 0
fi
if [ $# -gt 0 ] && [ ! -d "$1" ]; then
    echo "run.sh: $1 is not a directory" >&2
    exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "tshark: $(tshark --version 2>/dev/null | head -1)"
"$py" "$here/make_pcaps.py" "$work"
"$py" "$here/check.py" "$lua" "$work/expectations.json" "$@"
