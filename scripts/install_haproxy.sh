#!/usr/bin/env bash
# Installs HAProxy (Debian's haproxy package, 2.6 in Debian 12) when it is missing: the
# load balancer of the fleet tests and ./scripts/fleet_demo.sh. Only root can install
# it; anyone else gets the command to run. Called by scripts/test.sh and
# scripts/fleet_demo.sh. The package's service is not started: the fleet code starts
# its own haproxy on loopback with a generated config and stops it by its PID.
set -euo pipefail

if command -v haproxy > /dev/null || [[ -x /usr/sbin/haproxy ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "haproxy is missing: apt-get install haproxy" >&2
  exit 2
fi
printf '\n==> installing haproxy (Debian package)\n'
apt-get update -qq
# policy-rc.d or not, the fleet code never uses the system service.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy > /dev/null
