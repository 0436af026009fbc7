# Shared by bench/peer.sh and bench/hybrid.sh (sourced; expects $out, the results folder).

# build_llama_bench: starts the CUDA build of llama-bench from .carry/llama.cpp (bench/prepare-peer.sh) in the
# background; its pid goes to $peer_pid, the log to $out/peer-build.log. llama_bench_path prints the binary after.
# With .carry/peer-bin.tar.xz (bench/prebuild-peer.sh: built without a GPU, the CPU backend's ISA chosen at run time)
# it unpacks that instead: no build.
build_llama_bench() {
  strata_jobs=$(nproc)  # build_strata's jobs: every core, unless the peer builds beside it
  if [ -f .carry/peer-bin.tar.xz ]; then
    (mkdir -p build-peer && tar -C build-peer -xJf .carry/peer-bin.tar.xz && build-peer/bin/llama-bench --help > /dev/null) \
      > "$out/peer-build.log" 2>&1 &
    peer_pid=$!
    return
  fi
  strata_jobs=4  # (the peer takes 14)
  (cmake -S bench/peer -B build-peer -G Ninja -DLLAMA_SRC="$PWD/.carry/llama.cpp" -DGGML_CUDA=ON -DGGML_NATIVE=OFF \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release && cmake --build build-peer -j 14 --target llama-bench) \
    > "$out/peer-build.log" 2>&1 &
  peer_pid=$!
}
llama_bench_path() {
  if [ -x build-peer/bin/llama-bench ]; then echo build-peer/bin/llama-bench
  else find build-peer -name llama-bench -type f | head -1; fi
}

# build_strata: configures and builds build-gpu/bin/strata (CUDA, sm_90) with $strata_jobs jobs (build_llama_bench
# sets it; every core when unset); on failure prints the log's tail.
build_strata() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${STRATA_DEPS_PREFIX:+-DCMAKE_PREFIX_PATH="$STRATA_DEPS_PREFIX/usr"} > "$out/strata-build.log" 2>&1 &&
    cmake --build build-gpu -j "${strata_jobs:-$(nproc)}" --target strata >> "$out/strata-build.log" 2>&1 || { tail -20 "$out/strata-build.log"; return 1; }
}

# host_state NAME: the host's state before a timed run, one line into $out/host-state.log: load, available memory,
# dirty and writeback pages, the mean CPU clock. llama.cpp's CPU part moved 20-31% between runs minutes apart on one
# machine (2026-12-02b) and a model file's writeback once cost it 40% (model_settle below): these may say why.
host_state() {
  local mhz
  mhz=$(awk -F: '/^cpu MHz/ {s += $2; n++} END {if (n) printf "%.0f", s / n}' /proc/cpuinfo 2>/dev/null)
  printf '%s %s: load %s, available %s MiB, dirty %s MiB, writeback %s MiB, cpu %s MHz\n' "$(date +%T)" "$1" \
    "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" "$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)" \
    "$(awk '/^Dirty:/ {print int($2 / 1024)}' /proc/meminfo)" \
    "$(awk '/^Writeback:/ {print int($2 / 1024)}' /proc/meminfo)" "${mhz:-?}" >> "$out/host-state.log"
}

# vram NAME CMD...: runs CMD while sampling memory.used; peak MiB into $out/NAME.vram (and host_state NAME first)
vram() {
  local name=$1; shift
  host_state "$name"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.vram.log" &
  local smi=$!
  "$@"
  local rc=$?
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  sort -n "$out/$name.vram.log" | tail -1 > "$out/$name.vram"
  return $rc
}

# model_settle: after making a model file, before timing anything that reads it. The new file's dirty pages are
# written back in the background for minutes: llama.cpp reads the model through the page cache (mmap) and measured
# 104 vs 174 tok/s at -ncmoe 7 with and without that writeback under it (2026-11-30h).
model_settle() { sync; }
