#!/usr/bin/env bash
# next session call 1 (carry .carry/debs .carry/ab-base = git archive 615da37): the snapshot opt-in's parity and A/B
export PATH=$PATH:/usr/local/cuda/bin
eval "$(scripts/gpu-deps.sh)"
L=$OUT/call1.log
{
date; t0=$(date +%s)
tests/gpu/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"; tail -2 /tmp/build.log
timeout 60 build-gpu/bin/test_gpu_hycpu > /tmp/test_gpu_hycpu.log 2>&1; echo "test_gpu_hycpu rc=$?"; grep -i "side block\|FAIL" /tmp/test_gpu_hycpu.log | head -4
OUT=/tmp/hyt timeout 150 tests/gpu/hybrid.sh --no-build --only "snap|mid-glu-side$" > /tmp/hyt.log 2>&1; echo "hybrid rc=$?"
grep "^PASS\|^FAIL\|passed" /tmp/hyt.log | tail -10; echo "tests $(( $(date +%s)-t0 ))s"
left=$(( 560 - ($(date +%s)-t0) ))
OUT=/tmp/ab1 timeout $left bench/ab.sh --gpu-mem 16 -p 0 -n 128 -r 3 --rounds 3 base=base snap=env:STRATA_HY_SNAP=1 old=src:.carry/ab-base > /tmp/ab1.log 2>&1
grep "^|" /tmp/ab1.log; tail -1 /tmp/ab1.log; grep -h "CPU misses/token" /tmp/ab1/*-1.log | cut -c1-200; echo "all $(( $(date +%s)-t0 ))s"
} > $L 2>&1
pkill -x strata; pkill -x hybrid_decode
tar -czf $OUT/logs1.tgz /tmp/hyt /tmp/hyt.log /tmp/ab1 /tmp/ab1.log /tmp/test_gpu_*.log /tmp/build.log 2>/dev/null
tail -c 9000 $L
