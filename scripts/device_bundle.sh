#!/usr/bin/env bash
# Packs the built programs, every shared library they load (and the loader itself) and the data sets into
# .device/ at the project's root, so that they run on a bigger x86-64 machine that has none of the project's
# packages and where nothing can be installed. Run from the project's root after a build:
#   scripts/device_bundle.sh [PROGRAM...]      (default: build/cli/actorpipe and build/bench/*)
# Then, on that machine (with .device copied along):
#   bash .device/unpack && .device/ap train ...         (.device/ap runs build/cli/actorpipe)
#   AP_BIN=bench_ops .device/ap gpt --steps 10          (any packed program by name, then its mode)
# Data: --data .device/data/fmnist (the 10k test images, also as the training set), --text .device/data/fortunes.
# Peer: where python3 has PyTorch, .device/torch_cpu_bench.py measures it on the same models.
set -euo pipefail
root=$(pwd); out=$root/.device
[ -x build/cli/actorpipe ] || { echo "build first (./scripts/build.sh)" >&2; exit 1; }
gitdir=$(git rev-parse --git-dir); mkdir -p "$gitdir/info"
grep -qx "/.device/" "$gitdir/info/exclude" 2>/dev/null || echo "/.device/" >> "$gitdir/info/exclude"
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib" "$out/data/fmnist" "$out/data/fortunes"
progs=("$@"); [ ${#progs[@]} -gt 0 ] || progs=(build/cli/actorpipe $(find build/bench -maxdepth 1 -type f -executable -name 'bench_*'))
cp "${progs[@]}" "$out/bin/"; strip "$out"/bin/* 2>/dev/null || true
for b in "$out"/bin/*; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u | while read -r l; do cp -L "$l" "$out/lib/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib/"
(cd "$out" && tar cJf packed.tar.xz lib bin && rm -rf lib bin)
f=/usr/share/datasets/fashion-mnist
cp $f/t10k-images-idx3-ubyte.gz "$out/data/fmnist/train-images-idx3-ubyte.gz"; cp $f/t10k-labels-idx1-ubyte.gz "$out/data/fmnist/train-labels-idx1-ubyte.gz"
cp $f/t10k-* "$out/data/fmnist/"; cp -r /usr/share/games/fortunes/. "$out/data/fortunes/"
cp "$root/bench/torch_cpu_bench.py" "$out/"
cat > "$out/unpack" <<'X'
cd "$(dirname "$0")" && tar xJf packed.tar.xz
X
cat > "$out/ap" <<'X'
#!/usr/bin/env bash
d=$(dirname "$(readlink -f "$0")")
exec "$d/lib/ld-linux-x86-64.so.2" --library-path "$d/lib" "$d/bin/${AP_BIN:-actorpipe}" "$@"
X
chmod +x "$out/ap"
echo "packed ${#progs[@]} programs into .device ($(du -sh "$out" | cut -f1)); carry \".device\""
