#!/usr/bin/env bash
# Installs the Debian packages the tests drive for real, when they are missing:
#   ipmitool            the IPMI client the IPMI driver shells out to (through bmclib)
#   openipmi            ipmi_sim, a real IPMI BMC simulator
#   redfishtool, python3-sushy-cli   third-party Redfish clients that check our Redfish mock
#   curl                follows the Redfish mock's event stream, as any Server-Sent Events client does
#   prometheus          promtool (checks and unit-tests config/prometheus' rules) and a real Prometheus for e2e
#   util-linux, iproute2   unshare and ip: the DNS test runs in its own user and network namespace
# Runs apt-get as root, or through sudo when available.
set -euo pipefail
need=()
command -v ipmitool >/dev/null || need+=(ipmitool)
command -v ipmi_sim >/dev/null || need+=(openipmi)
command -v redfishtool >/dev/null || need+=(redfishtool)
command -v sushycli >/dev/null || need+=(python3-sushy-cli)
command -v curl >/dev/null || need+=(curl)
command -v promtool >/dev/null || need+=(prometheus)
command -v unshare >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing test dependencies: ${need[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
