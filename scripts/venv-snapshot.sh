#!/usr/bin/env bash
# A new venv made from a snapshot of an earlier install on this machine, byte-code included: the Makefile's venvs.
#
#   scripts/venv-snapshot.sh restore NAME VENV PY [KEYFILE...]   # exit 0: VENV made from the snapshot; 3: no snapshot
#   scripts/venv-snapshot.sh save NAME VENV PY [KEYFILE...]      # VENV, just installed, becomes the snapshot
#
# Why: a fresh clone's `make test` installed both venvs (from the local wheelhouse: scripts/pip-wheelhouse.sh, ~47
# and ~56 CPU-s), then every module its tests import was compiled to byte-code by the first process that imported it
# (the venvs install with --no-compile: byte-compiling all of them at install costs more than that), and processes
# started together compiled the same modules again: ~20 CPU-s for the first `populora train` alone (torch,
# transformers, mlflow, ...: 5,500 modules), and every venv of every clone did it again. A snapshot is an installed
# venv's lib/ (site-packages), byte-compiled once (compileall, ~100 CPU-s for the main venv's 31k modules, once per
# machine and key), and its bin/ scripts. Restoring it is `python -m venv`, hard links to the snapshot's files (a few
# CPU-s: no file is copied) and the bin/ scripts with the new venv's path in their first lines.
#
# Files are shared by hard link between the snapshot and every venv restored from it: pip replaces a file by removing
# it and writing a new one, and Python writes byte-code to a new file it renames, so neither changes a shared file.
# Where hard links cannot be made (the cache on another file system), the files are copied.
#
# Restored only into a venv that does not exist yet (a fresh clone); an existing venv is updated by pip as before.
# The project itself is never in a snapshot (its files, from its RECORD, are left out): the Makefile installs it
# (editable) after. The snapshot is $POPULORA_CACHE_DIR/venvs/NAME-KEY (~/.cache/populora by default); KEY hashes the
# KEYFILEs (the Makefile, pyproject.toml, the constraints, scripts/pip-wheelhouse.sh), this script and
# scripts/cache-lib.sh, the python (version and installation), the machine (uname -m), whether nvidia-smi exists,
# and pip's configuration (PIP_* variables, pip config files, the constraint files they name). It is published by one
# rename once complete (cache-lib.sh, as the wheelhouse is), so an interrupted or concurrent save never leaves a
# snapshot that is used half-made. Snapshots not used for 30 days are removed, and all but the 2 newest of a NAME.
# Clear them with `rm -rf ~/.cache/populora/venvs`.
set -euo pipefail
lib=$(dirname "$0")/cache-lib.sh
# shellcheck source=scripts/cache-lib.sh
source "$lib"

cmd=${1:?restore or save}; name=${2:?NAME}; venv=${3:?VENV}; py=${4:?PY}
shift 4
keyfiles=("$@")

key=$({
  echo "$name"
  "$py" -c 'import sys; print(sys.version); print(sys.base_prefix)'
  uname -m
  command -v nvidia-smi >/dev/null 2>&1 && echo nvidia-smi
  env | grep '^PIP_' | sort || true
  for f in /etc/pip.conf /etc/xdg/pip/pip.conf "${XDG_CONFIG_HOME:-$HOME/.config}/pip/pip.conf" "$HOME/.pip/pip.conf"; do
    [ -f "$f" ] && { echo "== $f"; cat "$f"; }
  done
  # as scripts/pip-wheelhouse.sh keys the wheelhouse the snapshot was installed from (the lines above: where the
  # base python has no pip)
  pip_config_key "$py" -m pip
  for f in "${keyfiles[@]}" "$0" "$lib"; do echo "== $f"; cat "$f"; done   # paths as given: the same in every clone
} | sha256sum | cut -c1-16)
root=$(cache_root venvs)
snap=$root/$name-$key

link_tree() {  # hard links to SRC's files at DEST (a new dir), or a copy where links cannot be made
  cp -al "$1" "$2" 2>/dev/null || { rm -rf "$2"; cp -a "$1" "$2"; }
}

if [ "$cmd" = restore ]; then
  [ -e "$snap/.complete" ] || { echo "venv-snapshot: none for $name ($snap)"; exit 3; }
  [ -e "$venv" ] && { echo "venv-snapshot: $venv exists: updated by pip, not restored"; exit 3; }
  echo "venv-snapshot: $venv from $snap"
  fail() { echo "venv-snapshot: restoring $venv failed ($1): removed, to be installed by pip" >&2; rm -rf "$venv"; exit 3; }
  trap 'fail "line $LINENO"' ERR   # any other failure too: never a venv left half-made
  "$py" -m venv --without-pip "$venv" || fail "python -m venv"
  new=$(cd "$venv" && pwd)
  old=$(cat "$snap/origin")
  rm -rf "$venv/lib"
  link_tree "$snap/lib" "$venv/lib" || fail "linking lib/"
  for f in "$snap"/bin/*; do
    b=$venv/bin/$(basename "$f")
    [ -e "$b" ] && continue   # python, activate: the new venv's own
    if [ "$(head -c2 "$f")" = '#!' ]; then
      # a console script: its interpreter is the old venv's python (pip's long form names it on line 2 or 3)
      sed "1,3s|$old/bin/|$new/bin/|g" "$f" > "$b" && chmod --reference="$f" "$b" || fail "writing $b"
    else
      cp -p "$f" "$b" || fail "copying $b"
    fi
  done
  if [ -f "$snap/wheelhouse" ]; then cp "$snap/wheelhouse" "$venv/.wheelhouse"; fi
  "$venv/bin/python" -m pip --version >/dev/null || fail "pip does not run"
  touch "$snap/.complete" 2>/dev/null || true   # marks it used (pruning, below)
  exit 0
fi

[ "$cmd" = save ] || { echo "usage: $0 restore|save NAME VENV PY [KEYFILE...]" >&2; exit 2; }
[ -e "$snap/.complete" ] && { touch "$snap/.complete" 2>/dev/null || true; exit 0; }
# a snapshot not saved costs the next clone time, never this build: every failure below ends here, exit 0
tmp=
give_up() { echo "venv-snapshot: no snapshot of $venv ($1)"; [ -z "$tmp" ] || rm -rf "$tmp"; exit 0; }
trap 'give_up "line $LINENO"' ERR
{ mkdir -p "$root" && [ -w "$root" ]; } 2>/dev/null || give_up "cannot write $root"
echo "venv-snapshot: saving $venv as $snap (byte-compiling it first, once)"
# compileall exits 1 on the few files of packages' own test data that are not Python 3: not a failure here
nice -n 10 "$venv/bin/python" -m compileall -q -j0 "$venv/lib" > /dev/null 2>&1 || true
tmp=$(mktemp -d "$root/.tmp-$name-$key.XXXXXX") || give_up "cannot make a dir in $root"
trap 'rm -rf "$tmp"' EXIT
link_tree "$venv/lib" "$tmp/lib"
mkdir "$tmp/bin"
for f in "$venv"/bin/*; do
  case $(basename "$f") in python*|activate*|Activate.ps1) continue ;; esac
  if [ -f "$f" ] && [ ! -L "$f" ]; then cp -p "$f" "$tmp/bin/"; fi
done
# the project (editable: its finder, .pth, dist-info and scripts) is the clone's, not the snapshot's
project=$(sed -n 's/^name *= *"\(.*\)"/\1/p' pyproject.toml | head -1 | tr - _)
for record in "$tmp"/lib/python*/site-packages/"$project"-*.dist-info/RECORD; do
  [ -f "$record" ] || continue
  site=$(dirname "$(dirname "$record")")
  "$venv/bin/python" - "$record" "$site" "$tmp" <<'EOF'
import csv, os, sys
record, site, top = sys.argv[1:]
for row in csv.reader(open(record)):
    path = os.path.normpath(os.path.join(site, row[0]))
    if path.startswith(top + os.sep) and os.path.lexists(path):
        os.remove(path)
EOF
  rm -rf "$(dirname "$record")"
done
(cd "$venv" && pwd) > "$tmp/origin"
if [ -f "$venv/.wheelhouse" ]; then cp "$venv/.wheelhouse" "$tmp/wheelhouse"; fi
cache_publish "$tmp" "$snap"
cache_sweep "$root" "$snap"
# all but the 2 newest of this NAME
ls -1t "$root/$name"-*/.complete 2>/dev/null | tail -n +3 | xargs -r -n1 dirname | xargs -r rm -rf || true
