#!/usr/bin/env bash
# `pip install` from a local wheelhouse, built on the first run: the Makefile's venvs.
#
#   scripts/pip-wheelhouse.sh NAME PIP [EXTRA...] -- ARGS...    # pip install ARGS (EXTRA: also kept, no deps)
#   scripts/pip-wheelhouse.sh --reuse PIP -- ARGS...            # pip install ARGS from the venv's wheelhouse
#
# Why: this machine's pip keeps no HTTP cache (the registry's responses are not cached), so every `make test` on a
# fresh clone downloaded every wheel again, and pip's resolver parsed ~213k index links (~30 CPU-s per venv, of the
# ~50 and ~75 CPU-s the two installs cost). From local files (`--no-index --find-links DIR`) there is no index to
# read and no download.
#
# The wheelhouse is $POPULORA_CACHE_DIR/wheelhouse/NAME-KEY (~/.cache/populora by default); KEY hashes all that
# decides what pip resolves: ARGS and EXTRA, pyproject.toml, the requirement and constraint files ARGS name, the
# python and pip versions, the machine (uname -m), pip's configuration (with the constraint files it names),
# whether nvidia-smi exists, this script and scripts/cache-lib.sh. On a miss `pip download` resolves ARGS as
# `pip install` would, online, into a temporary directory beside it, with pyproject's build requirements (the
# editable install builds with them), wheel (a package published as source builds with it) and EXTRA, then
# published by one rename once complete (cache-lib.sh, as scripts/venv-snapshot.sh publishes its snapshots). A
# wheelhouse no install used for 30 days is removed. Whenever the install from the wheelhouse fails, the plain online
# install runs instead (and the wheelhouse is removed, to be built again next time): a bad cache costs time, never
# the build. --reuse installs from the wheelhouse the venv's last NAME install used (recorded in VENV/.wheelhouse),
# or online. Clear it with `rm -rf ~/.cache/populora/wheelhouse`.
set -euo pipefail
lib=$(dirname "$0")/cache-lib.sh
# shellcheck source=scripts/cache-lib.sh
source "$lib"

reuse=0
if [ "${1-}" = --reuse ]; then reuse=1; shift; fi
if [ "$reuse" = 1 ]; then name=; pip=${1:?PIP}; shift
else name=${1:?NAME}; pip=${2:?PIP}; shift 2; fi
extra=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
[ "${1-}" = -- ] || { echo "usage: $0 NAME PIP [EXTRA...] -- ARGS... | $0 --reuse PIP -- ARGS..." >&2; exit 2; }
shift
bin=$(dirname "$pip")
record=$(dirname "$bin")/.wheelhouse

online() {
  echo "pip-wheelhouse: $1; installing from the index"
  exec "$pip" install "${@:2}"
}

if [ "$reuse" = 1 ]; then
  dir=$(cat "$record" 2>/dev/null || true)
  [ -n "$dir" ] && [ -e "$dir/.complete" ] || online "no wheelhouse recorded in $record" "$@"
  "$pip" install --no-index --find-links "$dir" "$@" || online "the install from $dir failed" "$@"
  exit 0
fi
rm -f "$record"

# --- the key: what decides pip's resolution ---------------------------------------------------------------------
files_named() {  # the files after -r/-c (and their long forms) in "$@"
  while [ $# -gt 0 ]; do
    case $1 in
      -r|-c|--requirement|--constraint) [ $# -gt 1 ] && echo "$2"; shift ;;
      --requirement=*|--constraint=*) echo "${1#*=}" ;;
    esac
    shift
  done
}
key=$({
  printf 'arg %s\n' "$@" ; printf 'extra %s\n' "${extra[@]}"
  "$bin/python" -c 'import sys; print(sys.version)'
  "$pip" --version | cut -d' ' -f1-2   # not the path it prints: that differs per clone
  uname -m
  command -v nvidia-smi >/dev/null 2>&1 && echo nvidia-smi
  pip_config_key "$pip"
  for f in pyproject.toml $(files_named "$@") "$0" "$lib"; do echo "== $f"; cat "$f"; done
} | sha256sum | cut -c1-16)

root=$(cache_root wheelhouse)
dir=$root/$name-$key
# a cache dir this user cannot write (a read-only home, a full disk): the plain install, as before the wheelhouse
{ mkdir -p "$root" && [ -w "$root" ]; } 2>/dev/null || online "cannot write $root" "$@"
cache_sweep "$root" "$dir"

if [ -e "$dir/.complete" ]; then
  echo "pip-wheelhouse: installing from $dir"
else
  echo "pip-wheelhouse: building $dir (once; later installs read it)"
  rm -rf "$dir"   # not published: left by hand
  # `pip download` takes what `pip install` takes, less -e (the project's own wheel is dropped below: it is
  # installed editable from source) and the options of the install itself.
  dl_args=()
  for ((i = 1; i <= $#; i++)); do
    a=${!i}
    case $a in
      --no-compile|-U|--upgrade|--force-reinstall|--no-warn-script-location|--no-warn-conflicts) ;;
      -e|--editable) ;;   # its argument follows: kept as a plain requirement
      --editable=*) dl_args+=("${a#--editable=}") ;;
      *) dl_args+=("$a") ;;
    esac
  done
  build_requires=$("$bin/python" -c 'exec("try: import tomllib\nexcept ImportError: from pip._vendor import tomli as tomllib")
print("\n".join(tomllib.load(open("pyproject.toml", "rb")).get("build-system", {}).get("requires", ["setuptools", "wheel"])))')
  # A package published only as source (the main venv has 9): built into a wheel once, not at every install. All
  # in one pip, with the setuptools and wheel just downloaded (one at a time and online: 3.5 s each); one by one
  # and online (fetching their build backends) if that fails.
  sdists_to_wheels() {
    local f sdists=()
    for f in "$1"/*.tar.gz "$1"/*.zip; do [ -e "$f" ] && sdists+=("$f"); done
    [ ${#sdists[@]} = 0 ] && return 0
    if ! "$pip" wheel -q --no-deps --no-index --find-links "$1" --wheel-dir "$1" "${sdists[@]}"; then
      for f in "${sdists[@]}"; do "$pip" wheel -q --no-deps --wheel-dir "$1" "$f" || return 1; done
    fi
    rm -f "${sdists[@]}"
  }
  tmp=$(mktemp -d "$root/.tmp-$name-$key.XXXXXX") || online "cannot make a directory in $root" "$@"
  trap 'rm -rf "$tmp"' EXIT
  project=$("$bin/python" -c 'exec("try: import tomllib\nexcept ImportError: from pip._vendor import tomli as tomllib")
print(tomllib.load(open("pyproject.toml", "rb"))["project"]["name"].replace("-", "_"))')
  if "$pip" download --dest "$tmp" "${dl_args[@]}" &&
     "$pip" download -q --dest "$tmp" $build_requires wheel &&
     { [ ${#extra[@]} = 0 ] || "$pip" download -q --no-deps --dest "$tmp" "${extra[@]}"; } &&
     rm -f "$tmp/$project"-* && sdists_to_wheels "$tmp"; then
    cache_publish "$tmp" "$dir"
  else
    rm -rf "$tmp"
    online "building $dir failed" "$@"
  fi
fi
touch "$dir/.complete" 2>/dev/null || true  # marks it used (the pruning above); not ours to touch: still usable
if ! "$pip" install --no-index --find-links "$dir" "$@"; then
  # Unpublished first (one rename), so that the next run builds it again rather than failing on it too.
  bad=$(mktemp -d "$root/.tmp-bad-$name-$key.XXXXXX")
  mv -T "$dir" "$bad/x" 2>/dev/null || true
  rm -rf "$bad"
  online "the install from $dir failed (removed: the next install builds it again)" "$@"
fi
echo "$dir" > "$record"
