"""A benchmark, not a test: write a synthetic Kineto-shaped trace of about --mb MB to a temporary
folder, read it with `dspark-lab trace`'s streaming reader (measure.foreign_read) and find its
steps (measure.foreign_steps), print the seconds and the peak RSS (resource.getrusage), and delete
the file.

    python -m studies.trace.big_trace --mb 1000 [--gz] [--dir /tmp]

The trace: ProfilerStep#N ranges of 200 launches each, every launch a cpu_op around a
cudaLaunchKernel with its kernel and its ac2g flow pair (flows are read past, not kept), one
cudaStreamSynchronize per step, and a python_function frame per op (a with_stack trace's bulk).
"""
from __future__ import annotations

import argparse
import gzip
import os
import resource
import sys
import tempfile
import time

LAUNCHES_PER_STEP = 200


def _step(i: int, t0: float, corr: int) -> list[str]:
    ev = [f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{i}","pid":1,"tid":1,"ts":{t0:.3f},'
          f'"dur":{LAUNCHES_PER_STEP * 10 + 500:.3f},"args":{{"External id":{corr}}}}}']
    for k in range(LAUNCHES_PER_STEP):
        t, c = t0 + 10 * k, corr + k
        ev += [f'{{"ph":"X","cat":"python_function","name":"model.py({k}): forward","pid":1,"tid":1,"ts":{t:.3f},"dur":9.0,"args":{{"Python id":{c}}}}}',
               f'{{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":1,"tid":1,"ts":{t + .5:.3f},"dur":8.0,"args":{{"External id":{c},"Sequence number":{c}}}}}',
               f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{t + 1:.3f},"dur":5.0,"args":{{"correlation":{c},"cbid":211}}}}',
               f'{{"ph":"s","id":{c},"pid":1,"tid":1,"ts":{t + 1:.3f},"cat":"ac2g","name":"ac2g"}}',
               f'{{"ph":"X","cat":"kernel","name":"void at::native::vectorized_elementwise_kernel<4>","pid":0,"tid":7,'
               f'"ts":{t + 8:.3f},"dur":9.0,"args":{{"correlation":{c},"stream":7,"device":0,"grid":[1,1,1]}}}}',
               f'{{"ph":"f","id":{c},"pid":0,"tid":7,"ts":{t + 8:.3f},"cat":"ac2g","name":"ac2g","bp":"e"}}']
    t = t0 + LAUNCHES_PER_STEP * 10
    ev.append(f'{{"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":1,"tid":1,"ts":{t:.3f},"dur":20.0,'
              f'"args":{{"correlation":{corr + LAUNCHES_PER_STEP}}}}}')
    return ev


def write(path: str, mb: float, gz: bool) -> tuple[int, int]:
    """The trace at `path`, about `mb` MB of JSON text: (steps, events)."""
    target, written, steps, events = mb * 1e6, 0, 0, 0
    opener = gzip.open if gz else open
    with opener(path, "wt") as f:
        f.write('{"schemaVersion":1,"deviceProperties":[{"name":"Synthetic GPU"}],"traceEvents":[\n')
        while written < target:
            ev = _step(steps, 1e6 + steps * (LAUNCHES_PER_STEP * 10 + 600), steps * (LAUNCHES_PER_STEP + 1))
            text = (",\n" if steps else "") + ",\n".join(ev)
            f.write(text)
            written += len(text)
            steps, events = steps + 1, events + len(ev)
        f.write("\n]}\n")
    return steps, events


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=1000.0, help="JSON text to write, MB (default 1000)")
    p.add_argument("--gz", action="store_true", help="write it gzipped")
    p.add_argument("--dir", default=None, help="folder for the temporary file (default: the system's)")
    a = p.parse_args(argv)
    from dspark_lab.measure import foreign_read, foreign_steps

    d = tempfile.mkdtemp(prefix="dspark-big-trace-", dir=a.dir)
    path = os.path.join(d, "big.json.gz" if a.gz else "big.json")
    try:
        t0 = time.perf_counter()
        steps, events = write(path, a.mb, a.gz)
        size = os.path.getsize(path)
        t1 = time.perf_counter()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tr = foreign_read.read(path)
        t2 = time.perf_counter()
        found = foreign_steps.find(tr.events)
        t3 = time.perf_counter()
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(d)
    print(f"file {size / 1e6:.0f} MB ({'gzip' if a.gz else 'JSON'}), {events} events, {steps} steps; written in {t1 - t0:.1f} s")
    print(f"read: {tr.total_events} events, {len(tr.events)} kept, in {t2 - t1:.1f} s; steps found: "
          f"{len(found.windows)} ({len(found.accounted)} accounted) in {t3 - t2:.1f} s")
    print(f"peak RSS {peak_kib / 1024:.0f} MiB (before reading: {rss_before / 1024:.0f} MiB); the file deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
