# Shared by scripts/demo and scripts/test: make sure the Debian packages the
# lab and the root tests use are present. Installs them when run as root;
# otherwise says what is missing and carries on (those tests then skip).
# clang and libbpf-dev build the kernel fast path's TC program (px-runtime's
# build.rs); bpftool reads its maps in the root tests. libdpdk-dev and
# pkg-config build the DPDK datapath (px-dpdk's build.rs; without them
# `px gateway --datapath dpdk` refuses and its tests skip).
PX_PACKAGES=(iproute2 ethtool iperf3 tcpdump tshark scamper iputils-tracepath iputils-ping nftables procps prometheus bird2 axel util-linux python3-scapy clang libbpf-dev bpftool libdpdk-dev pkg-config)

px_missing_packages() {
  local missing=()
  for p in "${PX_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  echo "${missing[@]:-}"
}

px_ensure_packages() {
  local missing
  missing=$(px_missing_packages)
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "px: installing Debian packages: $missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer no.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "px: not root: cannot install $missing; tests that need them will skip" >&2
  fi
}
