#!/usr/bin/env bash
# Headless Chromium + its WebDriver for the UI's browser test (tests/ui/test_ui_browser.py), from Debian packages:
# nothing is downloaded outside apt. Idempotent: does nothing when both are already installed.
# The emoji font only makes status icons render in screenshots.
set -euo pipefail
PACKAGES=(chromium chromium-driver fonts-noto-color-emoji)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "browser packages already installed: ${PACKAGES[*]}"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
