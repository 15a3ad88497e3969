#!/usr/bin/env bash
# Builds one of the DPDK tools of bench/dpdk: bench/dpdk/build.sh OUTPUT_PATH
# The output's file name picks the tool: px_dpdk_bench (DPDK's GRO/GSO on
# buffers, the default for any other name), px_dpdk_fwd (the forwarders of
# `px bench gateway --datapath dpdk`) or px_dpdk_gen (its generator and sink).
# Exit 0: built. Exit 3: DPDK (libdpdk-dev + pkg-config) or a C compiler
# not available, with one line on stderr. Exit 2: usage. Other: the compiler failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 OUTPUT_PATH" >&2
	exit 2
fi
out="$1"
case "$(basename "$out")" in
px_dpdk_fwd) src="$here/px_dpdk_fwd.c" ;;
px_dpdk_gen) src="$here/px_dpdk_gen.c" ;;
*) src="$here/px_dpdk_bench.c" ;;
esac
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libdpdk 2>/dev/null; then
	echo "DPDK not available: install libdpdk-dev (Debian 12: apt-get install libdpdk-dev pkg-config)" >&2
	exit 3
fi
if ! command -v "${CC:-cc}" >/dev/null 2>&1; then
	echo "C compiler not available: install gcc (Debian 12: apt-get install gcc)" >&2
	exit 3
fi
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2046 # pkg-config output is a list of flags
exec "${CC:-cc}" -O2 -Wall -Wl,-z,now -o "$out" "$src" $(pkg-config --cflags --libs libdpdk)
