# Sourced (not run) by hack/vllm-parser-venv.sh and hack/cpu-engine-venv.sh: a venv installed
# from ONE pinned requirements file with `pip install --no-deps`, built once per machine in the
# cache and linked into .qdd/.
#
# Cache: ${QDD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdd}/<prefix>-<key>; the caller's key hashes
# what the venv is made of. One builder per key (flock); the others wait and then find it built.
# A venv without its completion stamp (.qdd-complete holding the key), or that fails its quick
# check, is rebuilt. A cache folder that cannot be written: the venv is built in the link's place
# itself. Nothing depends on the cache.
#
# The caller sets root, req (the requirements file), link (.qdd/NAME), py (the interpreter),
# force (1: rebuild; pinned_venv_args sets it) and defines:
#   log MESSAGE...
#   check_venv DIR quick|full   quick: metadata only (the warm path); full: imports, after a build
#   explain_failure DIR          re-runs the failing import verbosely after a build that fails `full`
#   post_install DIR             optional: a step after the pip install (cpu-engine: a dist-info alias)
#   lock                         re-derives the requirements file (--lock)

# pinned_venv_args [--rebuild | --lock]: the scripts' one argument; --lock runs the caller's lock
# (re-derive the pins) and exits, --rebuild sets force=1.
pinned_venv_args() {
  case "${1:-}" in
    --lock) lock; exit 0 ;;
    --rebuild) force=1 ;;
    "") force=0 ;;
    *) log "unknown argument: $1"; exit 2 ;;
  esac
}

# pins_match DIR NAME...: each distribution NAME in DIR's venv has the version req pins.
pins_match() {
  local v=$1
  shift
  [ -x "$v/bin/python" ] || return 1
  "$v/bin/python" - "$req" "$@" <<'PY' >/dev/null 2>&1
import sys, importlib.metadata as md
req, names = sys.argv[1], sys.argv[2:]
want = {}
for line in open(req):
    line = line.split("#", 1)[0].strip()
    if "==" in line:
        name, ver = line.split("==", 1)
        want[name.strip().lower()] = ver.strip()
for name in names:
    assert md.version(name) == want[name], name
PY
}

# build_venv DIR KEY NOTE: a fresh venv in DIR with req installed, checked (full) and stamped.
build_venv() {
  local v=$1 key=$2 note=$3 t0=$SECONDS
  log "building $v ($note)"
  rm -rf "$v"
  "$py" -m venv "$v"
  "$v/bin/python" -m pip install -q --no-deps -r "$req"
  if declare -F post_install >/dev/null; then post_install "$v"; fi
  if ! check_venv "$v" full; then
    log "built venv fails its import check; re-running it verbosely:"
    explain_failure "$v" || true
    exit 1
  fi
  echo "$key" > "$v/.qdd-complete"
  log "built in $((SECONDS - t0)) s, $(du -sh "$v" | cut -f1)"
}

# link_cached_venv PREFIX KEY KEEP NOTE: ensure a good venv for KEY (in the cache, else in the
# link's place), KEEP older builds of PREFIX kept at most (they are GBs each), the link pointing
# at it; prints the link.
link_cached_venv() {
  local prefix=$1 key=$2 keep=$3 note=$4 cache target
  mkdir -p "$root/.qdd"
  cache=${QDD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/qdd}
  if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then
    target="$cache/$prefix-$key"
    exec 9>"$target.lock"
    flock 9  # one builder per key; others wait and then find it built
    if [ "$force" = 1 ] || [ "$(cat "$target/.qdd-complete" 2>/dev/null)" != "$key" ] \
        || ! check_venv "$target" quick; then
      build_venv "$target" "$key" "$note"
      { ls -1dt "$cache/$prefix"-*/ 2>/dev/null || true; } | sed 's|/$||' |
        { grep -vxF "$target" || true; } | tail -n +$((keep + 1)) |
        while read -r old; do log "pruning $old"; rm -rf "$old" "$old.lock"; done
    fi
    if [ -L "$link" ] || [ ! -e "$link" ]; then
      ln -sfn "$target" "$link"
    else
      rm -rf "$link" && ln -s "$target" "$link"
    fi
  else
    log "cache $cache not writable; building in $link"
    [ -L "$link" ] && rm -f "$link"
    if [ "$force" = 1 ] || [ "$(cat "$link/.qdd-complete" 2>/dev/null)" != "$key" ] \
        || ! check_venv "$link" quick; then
      build_venv "$link" "$key" "$note"
    fi
  fi
  echo "$link"
}
