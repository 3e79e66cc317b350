#!/usr/bin/env bash
# A first look on a GPU: verify twice (the record of the second kept), the known-idle CUDA test alone.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 DSPARK_CACHE=/tmp/dc
export PYTHONPATH=$PWD
for i in 1 2; do
  timeout 250 python3 -m dspark_lab.cli verify --out "$OUT/verify-$i.json" > "$OUT/verify-$i.txt" 2> "$OUT/verify-$i.err"; echo "verify $i rc=$?"
  grep -E "FAIL|verified" "$OUT/verify-$i.txt"; tail -3 "$OUT/verify-$i.err"
done
grep "cost/" "$OUT/verify-1.txt" "$OUT/verify-2.txt" | cut -c1-260
