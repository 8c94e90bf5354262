#!/usr/bin/env bash
# CI, after the test suite: install what users install and use it from outside the source tree.
#   1. build the sdist and, from it, the wheel;
#   2. install the wheel (not editable) into a fresh virtual environment;
#   3. from a directory outside the tree: import every module, run one optimizer of each
#      front-end, check that compilation stays out of a timed run (.ci/installed_check.py), run
#      every example at its tiny size (examples/tiny.json) and `orthoplug-bench --help`;
#   4. the same check from a read-only copy of the installed package, run by an unprivileged user
#      (root ignores permissions) twice: numba must cache outside the package, then reuse it.
set -euo pipefail
tree="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
venv="$work/venv/bin"
"$venv/pip" install -q torch==2.13.0 build
"$venv/python" -m build -q --outdir "$work/dist" "$tree"
ls "$work/dist"
"$venv/pip" install -q "$(ls "$work"/dist/orthoplug-*.whl)[bench]"
cp "$tree/.ci/installed_check.py" "$work/"   # readable by the unprivileged user below
mkdir "$work/run" && cd "$work/run"
export NUMBA_CACHE_DIR="$work/numba-cache"   # empty: the first check compiles cold
"$venv/python" "$work/installed_check.py" "$tree"
"$venv/python" - "$tree" <<'PY'
import json, subprocess, sys, time
from pathlib import Path
examples = Path(sys.argv[1]) / "examples"
for name, entry in json.loads((examples / "tiny.json").read_text(encoding="utf-8")).items():
    began = time.perf_counter()
    out = subprocess.run([sys.executable, str(examples / name), *entry["args"]],
                         capture_output=True, text=True)
    ok = out.returncode == 0 and entry["expect"] in out.stdout
    print(f"example {name}: {'ok' if ok else 'FAILED'} ({time.perf_counter() - began:.1f} s)")
    if not ok:
        sys.exit(f"{name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
PY
"$venv/orthoplug-bench" --help > /dev/null && echo "orthoplug-bench --help: ok"
unset NUMBA_CACHE_DIR
site="$("$venv/python" -c 'import orthoplug, pathlib; print(pathlib.Path(orthoplug.__file__).parent.parent)')"
mkdir -p "$work/ro" "$work/home"
cp -r "$site/orthoplug" "$work/ro/"
find "$work/ro" -name __pycache__ -prune -exec rm -rf {} +
chmod -R a-w "$work/ro"
as_user=()
if [ "$(id -u)" = 0 ]; then
  chown nobody "$work/home" "$work/run"
  as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
for pass in first second; do
  echo "read-only install, $pass process:"
  env HOME="$work/home" PYTHONPATH="$work/ro" "${as_user[@]}" "$venv/python" \
    "$work/installed_check.py" "$tree"
done
test -z "$(find "$work/ro" -name '*.nbi' | head -1)"
echo "numba cache files outside the package: $(find "$work/home" -name '*.nbi' | wc -l)"
