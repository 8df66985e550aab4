#!/usr/bin/env bash
# Builds the Debian package of the install (`cpack -G DEB` in the build directory, default build/) and checks
# what it holds (dpkg-deb -c): the program, the libraries and the CMake package under /usr, and exactly the
# public headers of cmake/public_headers.cmake (plus version.hpp) under /usr/include/actorpipe. Prints the
# package's path. A CTest test runs it (tests/CMakeLists.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
cd "$build"
rm -f actorpipe_*.deb
cpack -G DEB > cpack.log 2>&1 || { cat cpack.log; exit 1; }
deb=$(ls actorpipe_*.deb)
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')

fail() { echo "check_deb: $deb: $*" >&2; exit 1; }
for f in ./usr/bin/actorpipe ./usr/lib/libactorpipe_actors.a ./usr/lib/libactorpipe_tensor.a \
         ./usr/lib/cmake/actorpipe/actorpipe-config.cmake ./usr/lib/cmake/actorpipe/actorpipe-targets.cmake \
         ./usr/include/actorpipe/version.hpp; do
  grep -qxF "$f" <<< "$contents" || fail "lacks $f"
done
# The headers it holds are the public list, no more (an internal one leaking) and no less.
cat > public_headers.list.cmake <<CMAKE
include($root/cmake/public_headers.cmake)
foreach(h \${actorpipe_public_headers})
  message("./usr/include/actorpipe/\${h}")
endforeach()
message("./usr/include/actorpipe/version.hpp")
CMAKE
expected=$(cmake -P public_headers.list.cmake 2>&1)
actual=$(grep '\.hpp$' <<< "$contents")
if ! diff <(sort <<< "$expected") <(sort <<< "$actual") > headers.diff; then
  fail "headers differ from cmake/public_headers.cmake (< listed, > packaged): $(cat headers.diff)"
fi
dpkg-deb -f "$deb" Depends | grep -q libcaf-dev || fail "does not depend on libcaf-dev"
echo "$build/$deb: $(grep -c '\.hpp$' <<< "$actual") public headers, $(grep -c '\.a$' <<< "$contents") libraries, $(du -k "$deb" | cut -f1) KB"
