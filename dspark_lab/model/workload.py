"""One decode step around the draft forward, as SGLang runs it: the callable the lab measures.

Order per step (each phase is a profiler range named `dspark:<phase>`):
  host_prep        Python batch preparation for the target verify (real list/tensor building on
                   the host, then a calibrated spin up to the preset's cost)
  target_verify    launch of the target-verify GPU work (a CUDA graph of matmuls lasting
                   `target_verify_ms`, calibrated on this GPU); it produces the bonus tokens
  draft_prep       host + device preparation of the draft batch: bonus tokens into column 0 of the
                   persistent block buffer, positions, cache locations, CPU twins of seq_lens
  num_token_non_padded   the strategy under study
  draft_post_prep  the rest of the host work before the launch (building the ForwardBatch record)
  draft_forward    the draft forward: a CUDA-graph replay over the padded capture bucket
  readback         the step's result returns to the host, by design (SGLang's overlap scheduler
                   reads step i-1's result during step i: an event sync bounding run-ahead to one
                   step). Syncs here are counted apart from the step's unintended syncs.
"""
from __future__ import annotations

import platform
import threading
import time
from typing import Callable, Optional

import torch

from dspark_lab import strategies
from dspark_lab.config import LabConfig
from dspark_lab.measure import waits
from dspark_lab.measure.probe import driver_version
from dspark_lab.measure.ranges import READBACK_RANGE, STEP_RANGE, phase
from dspark_lab.model import calibration
from dspark_lab.model.draft import CAPTURE_HIDDEN_NULL, DSPARK, TARGET_VERIFY, DraftForwardBatch, DraftRunner
from dspark_lab.predicate import enable_num_token_non_padded

_ITERS_PER_US: list[float] = []
# What a calibration on disk may say and still be used (calibration.value): wide around real
# machines (about 100 iterations per us for sum(range(n)), about 50 target layers per ms on an
# H200), narrow enough that a hand-edited 1e9 cannot make one spin call run for hours.
SPIN_ITERS_PER_US = (0.1, 10_000.0)
TARGET_LAYERS_PER_MS = (0.01, 10_000.0)
# The longest piece of host spin done in one call. The calibration is the fastest rate seen; a CPU
# running slower than that (a busy SMT sibling, a lower clock) made one call sized for the whole
# remaining spin overshoot its deadline by up to the whole spin: in recorded quiet H200 runs the
# flagged trials had a median of +3.1 ms of host work per step (the largest near the step's 3.8 ms
# of spin) while off the CPU at most 0.011 ms. In pieces of at most this much, an overshoot is at most one piece, and the
# deliberate host cost stays the wall time it is meant to be. (The profiler's Python tracer sees one
# event per piece: ~80 for a 4 ms spin.)
SPIN_PIECE_US = 50.0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _iters_per_us() -> float:
    if not _ITERS_PER_US:
        key = calibration.host_key(_cpu_name(), platform.python_version())
        cached = calibration.value(key, "spin_iters_per_us", *SPIN_ITERS_PER_US)
        if cached is not None:
            _ITERS_PER_US.append(cached)
        else:
            n = 200_000
            best = min(_timed_sum(n) for _ in range(5))
            _ITERS_PER_US.append(n / (best * 1e6))
            calibration.store(key, {"spin_iters_per_us": _ITERS_PER_US[0]})
    return _ITERS_PER_US[0]


def _timed_sum(n: int) -> float:
    t0 = time.perf_counter()
    sum(range(n))
    return time.perf_counter() - t0


def spin_until(deadline: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Busy host work until `deadline` (`clock` seconds): the host stays busy, as Python is.

    The work is C-level calls sized from a calibration (`sum(range(n))`), each at most SPIN_PIECE_US
    long, not a Python loop per iteration, so the profiler's Python tracer sees a few dozen events
    rather than thousands, and a CPU slower than calibrated overshoots the deadline by one piece at most."""
    rate = _iters_per_us()
    t0 = clock()
    try:
        while True:
            left_us = (deadline - clock()) * 1e6
            if left_us <= 2:
                return
            sum(range(int(min(left_us, SPIN_PIECE_US) * rate)))
    finally:
        # Deliberate wait up to the deadline; an overshoot (the thread was descheduled) is not.
        waits.add(min(clock(), deadline) - t0)


def side_by_side(helper: Callable[[], object], main: Callable[[], object]) -> tuple:
    """(helper(), main()): helper on a new thread while main runs on this one. The helper is joined
    before this returns or raises (it is never left running); an error of either is raised here,
    main's first."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = helper()
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread
            out["error"] = e

    t = threading.Thread(target=run, name="dspark-side-by-side", daemon=True)
    t.start()
    try:
        mine = main()
    finally:
        t.join()
    if "error" in out:
        raise out["error"]
    return out["value"], mine


class TargetVerify:
    """GPU work standing for the target model's verify forward, queued ahead of the draft step."""

    HIDDEN = 4096
    ROWS = 1024
    _layers_per_ms: dict[str, float] = {}  # calibration cache per device name

    def __init__(self, duration_ms: float, device: torch.device, vocab: int, batch: int,
                 capture_mode: str = "global"):
        """`capture_mode`: the graph captures' error mode; "thread_local" lets another thread run
        eager GPU work meanwhile (LabStep.warmed builds this on a helper thread)."""
        self.device = device
        self.capture_mode = capture_mode
        self.vocab = vocab
        self.batch = batch
        cuda = device.type == "cuda"
        dtype = torch.bfloat16 if cuda else torch.float32
        # Each request's bonus token is read from one row, so there must be a row per request:
        # the CPU stand-in is small for speed but never smaller than the batch.
        hidden, rows = (self.HIDDEN, max(self.ROWS, batch)) if cuda else (64, max(16, batch))
        g = torch.Generator(device=device).manual_seed(1)
        self.w = (torch.randn(hidden, hidden, generator=g, device=device) / hidden**0.5).to(dtype)
        self.x = torch.randn(rows, hidden, generator=g, device=device).to(dtype)
        self.bonus = torch.zeros(max(batch, 1), dtype=torch.int64, device=device)
        self.layers = self._layers_for(duration_ms) if cuda else 1
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.duration_ms = duration_ms

    def _body(self):
        h = self.x
        for _ in range(self.layers):
            h = torch.tanh(h @ self.w)
        self.bonus.copy_(h[: self.batch, : self.vocab].argmax(-1))

    def _layers_for(self, duration_ms: float) -> int:
        key = torch.cuda.get_device_name(self.device)
        disk_key = calibration.gpu_key(key, driver_version(), torch.__version__)
        if key not in self._layers_per_ms:
            cached = calibration.value(disk_key, "target_layers_per_ms", *TARGET_LAYERS_PER_MS)
            if cached is not None:
                self._layers_per_ms[key] = cached
        if key not in self._layers_per_ms:
            # Time a 64-layer graph with CUDA events (median of 5 replays after warm-up).
            self.layers = 64
            g = self._capture()
            for _ in range(3):
                g.replay()
            times = []
            for _ in range(5):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            self._layers_per_ms[key] = 64 / sorted(times)[2]
            calibration.store(disk_key, {"target_layers_per_ms": self._layers_per_ms[key]})
        return max(1, round(duration_ms * self._layers_per_ms[key]))

    def _capture(self) -> torch.cuda.CUDAGraph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self._body()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode=self.capture_mode):
            self._body()
        return g

    def prepare(self) -> "TargetVerify":
        """Capture the graph now rather than at the first launch."""
        if self.device.type == "cuda" and self.graph is None:
            self.graph = self._capture()
        return self

    def launch(self) -> torch.Tensor:
        if self.device.type != "cuda":
            self._body()
        else:
            if self.graph is None:
                self.graph = self._capture()
            self.graph.replay()
        return self.bonus


class LabStep:
    """The measured callable: `step()` runs one decode step with the config's strategy."""

    def __init__(self, cfg: LabConfig, strategy: Optional[str] = None, share_with: Optional["LabStep"] = None,
                 *, group=None, dispatch: str = "allreduce", bucket: Optional[int] = None,
                 runner: Optional[DraftRunner] = None, target: Optional[TargetVerify] = None):
        """`group`, `dispatch`, `bucket`: one EP rank of a torch.distributed group (see parallel/);
        `runner`, `target`: parts already made for this config (LabStep.warmed)."""
        self.cfg = cfg if strategy is None else cfg.with_(strategy=strategy)
        cfg = self.cfg
        self.device = torch.device(cfg.resolved_device())
        self.strategy = strategies.get(cfg.strategy)
        self.parallel = cfg.parallel
        self.consume = enable_num_token_non_padded(self.parallel)
        m = cfg.model_size
        self.costs = cfg.workload_costs
        self.runner = runner or DraftRunner(cfg, str(self.device), self.consume,
                                            share_weights_with=share_with.runner if share_with else None,
                                            group=group, dispatch=dispatch, bucket=bucket)
        # Strategies measured side by side share the target verify (same GPU work, built once).
        self.target = target or (share_with.target if share_with else
                                 TargetVerify(self.costs.target_verify_ms, self.device, m.vocab, cfg.batch_size))
        bs, q = cfg.batch_size, cfg.query_token_num
        dev = self.device
        # Persistent device state, as the scheduler keeps it: no per-step host-to-device copies.
        self.block_ids = torch.full((self.runner.bucket, q), self.runner.model.mask_token, dtype=torch.int64, device=dev)
        self.req_pool_indices = torch.arange(bs, dtype=torch.int64, device=dev)
        self.seq_lens = torch.arange(bs, dtype=torch.int64, device=dev) % (m.prefix_len - 1) + 1
        self.offsets = torch.arange(q, dtype=torch.int64, device=dev)
        # Per-step device tensors live in persistent buffers written in place, so the only device
        # allocation a step can make is the strategy's own (allocation counts then isolate it).
        self.positions = torch.empty(bs, q, dtype=torch.int64, device=dev)
        self.out_cache_loc = torch.empty(bs, q, dtype=torch.int64, device=dev)
        self.cache_base = (self.req_pool_indices * (m.prefix_len + 64))[:, None]
        self.input_embeds = torch.empty(bs * q, m.hidden, dtype=self.runner.dtype, device=dev)
        # The host twins SGLang keeps for attention backends that need CPU seq_lens.
        self.seq_lens_host = [(i % (m.prefix_len - 1)) + 1 for i in range(bs)]
        self._pending: Optional[torch.cuda.Event] = None
        # Set by measure.diagnostics during a timed trial: CUDA events around the step's GPU work.
        self.gpu_clock = None
        self.last_output: Optional[torch.Tensor] = None
        self.last_expert_ids: Optional[torch.Tensor] = None

    @classmethod
    def warmed(cls, cfg: LabConfig, strategy: Optional[str] = None) -> "LabStep":
        """A LabStep of one process's first config, its two cold halves made side by side: the target
        verify (cuBLAS's set-up, its GEMM kernels, its calibration when the cache is cold, its graph)
        on a helper thread, while this thread builds the draft model and runs its first eager forward
        (where the CUDA modules of its kernels load: 0.24-0.44 s on an H200). torch lets go of the GIL
        inside each op, so the two run at once. The target's captures are thread-local, so this
        thread's eager work does not invalidate them, and they start once the draft weights are
        drawn (below); the draft graph is captured after the join, at the first step, as always.
        Off CUDA: the plain constructor."""
        cfg = cfg if strategy is None else cfg.with_(strategy=strategy)
        dev = torch.device(cfg.resolved_device())
        if dev.type != "cuda":
            return cls(cfg)

        # A graph capture registers the default CUDA generator with itself: a draw from it on
        # another thread meanwhile fails ("Offset increment outside graph capture"). The draft
        # model's weights are drawn from it, so the target verify (whose own draws use a generator
        # of its own) starts once they are made; the eager forward draws nothing.
        weights_made = threading.Event()

        def make_target() -> TargetVerify:
            weights_made.wait()
            return TargetVerify(cfg.workload_costs.target_verify_ms, dev, cfg.model_size.vocab, cfg.batch_size,
                                capture_mode="thread_local").prepare()

        def make_runner() -> DraftRunner:
            try:
                runner = DraftRunner(cfg, str(dev), enable_num_token_non_padded(cfg.parallel))
            finally:
                weights_made.set()  # also on failure: the helper must end for the join
            runner.warm()
            return runner

        target, runner = side_by_side(make_target, make_runner)
        return cls(cfg, runner=runner, target=target)

    # -- phases ----------------------------------------------------------------------------
    def _host_prep(self, us: float) -> None:
        deadline = time.perf_counter() + us * 1e-6
        # Real host work: per-request bookkeeping the scheduler does in Python every step.
        P = self.cfg.model_size.prefix_len
        self.seq_lens_host = [(s + self.cfg.query_token_num) % (P - 1) + 1 for s in self.seq_lens_host]
        _ = sorted(range(len(self.seq_lens_host)), key=self.seq_lens_host.__getitem__)
        spin_until(deadline)

    def _forward_batch(self, n_dev, input_ids, positions, out_cache_loc, input_embeds, seq_lens_cpu) -> DraftForwardBatch:
        """The ForwardBatch record SGLang's `_run_forward` builds (inside draft_post_prep's spin)."""
        return DraftForwardBatch(
            forward_mode=TARGET_VERIFY,
            batch_size=self.cfg.batch_size,
            input_ids=input_ids,
            req_pool_indices=self.req_pool_indices,
            seq_lens=self.seq_lens,
            out_cache_loc=out_cache_loc,
            seq_lens_sum=sum(self.seq_lens_host),
            seq_lens_cpu=seq_lens_cpu,
            positions=positions,
            input_embeds=input_embeds,
            spec_algorithm=DSPARK,
            spec_info=None,
            capture_hidden_mode=CAPTURE_HIDDEN_NULL,
            num_token_non_padded=n_dev,
            num_token_non_padded_cpu=self.cfg.num_tokens,
        )

    def _lagged_readback(self) -> None:
        """Wait for the previous step's result (by design, so kept out of sync debug mode's
        attribution), then mark this step's."""
        with torch.profiler.record_function(READBACK_RANGE):
            if self._pending is not None:
                mode = torch.cuda.get_sync_debug_mode()
                if mode:
                    torch.cuda.set_sync_debug_mode(0)
                t_wait = time.perf_counter()
                self._pending.synchronize()
                waits.add(time.perf_counter() - t_wait)
                if mode:
                    torch.cuda.set_sync_debug_mode(mode)
            self._pending = torch.cuda.Event()
            self._pending.record()

    def step(self) -> None:
        """One decode step (the measured hot path: the phases inline, two helper calls, one of them
        inside draft_post_prep's calibrated spin)."""
        cfg, costs = self.cfg, self.costs
        bs, q = cfg.batch_size, cfg.query_token_num
        with torch.profiler.record_function(STEP_RANGE):
            with phase("host_prep"):
                self._host_prep(costs.prep_before_target_us)
            clock = self.gpu_clock
            with phase("target_verify"):
                if clock is not None:
                    clock.start()
                bonus = self.target.launch()
                if clock is not None:
                    clock.stop()
            with phase("draft_prep"):
                deadline = time.perf_counter() + costs.draft_prep_us * 1e-6
                self.block_ids[:bs, 0].copy_(bonus[:bs])
                self.seq_lens.add_(q).remainder_(cfg.model_size.prefix_len - 1).add_(1)
                torch.add(self.seq_lens[:, None], self.offsets, out=self.positions)
                torch.add(self.positions, self.cache_base, out=self.out_cache_loc)
                positions, out_cache_loc = self.positions.view(-1), self.out_cache_loc.view(-1)
                input_ids = self.block_ids[:bs].view(-1)
                input_embeds = self.runner.embed(input_ids, out=self.input_embeds)
                seq_lens_cpu = torch.tensor(self.seq_lens_host, dtype=torch.int64)
                spin_until(deadline)
            with phase("num_token_non_padded"):
                # The strategy's call is counted as wait: under device_direct it is the sync.
                t_wait = time.perf_counter()
                n_dev = self.strategy.fn(
                    cfg.num_tokens, self.device, self.parallel, buffer=self.runner.static_num_token_non_padded
                )
                waits.add(time.perf_counter() - t_wait)
            with phase("draft_post_prep"):
                deadline = time.perf_counter() + costs.post_scalar_us * 1e-6
                batch = self._forward_batch(n_dev, input_ids, positions, out_cache_loc, input_embeds, seq_lens_cpu)
                spin_until(deadline)
            with phase("draft_forward"):
                if clock is not None:
                    clock.start()
                tokens, ids = self.runner.run(batch)
                if clock is not None:
                    clock.stop()
            self.last_output, self.last_expert_ids = tokens, ids
            if cfg.readback == "lagged" and self.device.type == "cuda":
                self._lagged_readback()

    __call__ = step

    def drain(self) -> None:
        """Wait for all queued work (between trials; not part of a step)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._pending = None
