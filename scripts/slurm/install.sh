#!/usr/bin/env bash
# Install the Debian packages of the localhost SLURM cluster if any is missing (root; idempotent:
# does nothing, not even `apt-get update`, when all are there). --no-install-recommends keeps it to
# ~28 packages instead of ~60 (hdf5, rocm-smi, influxdb plugins, ...).
set -euo pipefail
source "$(dirname "$0")/common.sh"
missing=()
for p in $PACKAGES; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
if [[ $(id -u) != 0 ]]; then
  echo "scripts/slurm/install.sh: missing packages ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# the postinsts try to start the services; policy-rc.d may deny that, which is fine (start.sh does it)
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
