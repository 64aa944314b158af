"""One benchmark process: trains each model for a few steps and writes median step times as JSON.

Run plainly or under the debugpy adapter by ``bench/run.py``; the Hookscope
rows differ only in what the stand-in editor asked the agent to do before
``--ready-file`` appeared. Peers (detect_anomaly, DebugUnderflowOverflow,
TorchLens) are switched on here by ``--mode``.

``--mode hookscope-side-by-side`` measures the Hookscope configurations in
ONE process, switching between them every few steps (nothing watched, break
on NaN, summaries, never-true breakpoints) through the agent's engine, so
that a machine's drift over minutes, which separate rows cannot escape,
cancels out.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import time
from pathlib import Path

import models
import torch
from configs import configs_for, requests_for


def wait_for(path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.01)


def live_activation_bytes() -> tuple[int, int]:
    """Tensors alive that are not parameters/grads/optimizer state: (count, bytes)."""
    gc.collect()
    count = size = 0
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Parameter):
            try:
                if obj.is_leaf and not obj.requires_grad and obj.grad_fn is None and obj.dim() == 0:
                    continue
                count += 1
                size += obj.numel() * obj.element_size()
            except Exception:  # noqa: BLE001 - exotic tensor subclasses
                continue
    return count, size


def torchlens_capture_all(model: torch.nn.Module, x: torch.Tensor) -> None:
    """TorchLens keeping every activation of one forward pass (its 2.x verb, or the 1.x one)."""
    import torchlens

    if hasattr(torchlens, "trace"):
        torchlens.trace(model, x)  # saves every layer's output by default
    else:
        torchlens.log_forward_pass(model, x, layers_to_save="all", vis_opt="none")


def timed_step(model: torch.nn.Module, batch, loss_fn, optimizer, sync, before=None) -> float:
    """Seconds of one forward + backward + optimizer step (``before(x)`` runs inside the timing)."""
    x, y = batch()
    sync()
    start = time.perf_counter()
    if before is not None:
        before(x)
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
    sync()
    return time.perf_counter() - start


def one_configuration(built: dict, args: argparse.Namespace, sync) -> dict[str, dict]:
    """Median step time per model, in whatever configuration this process runs."""
    results: dict[str, dict] = {}
    for name, (model, batch, loss_fn) in built.items():
        optimizer = models.optimizer_for(name, model)
        if args.mode == "hf":
            from transformers.debug_utils import DebugUnderflowOverflow

            DebugUnderflowOverflow(model)
        before = (lambda x, model=model: torchlens_capture_all(model, x)) if args.mode == "torchlens" else None
        times = [timed_step(model, batch, loss_fn, optimizer, sync, before) for _ in range(args.warmup + args.steps)]
        results[name] = {"median_s": statistics.median(times[args.warmup :]), "steps": args.steps}
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True)
    parser.add_argument("--mode", default="plain")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ready-file")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    # One intra-op thread: on a small shared machine a second thread mostly adds
    # spin-wait noise, and every row runs the same way, so the ratios stay fair.
    torch.set_num_threads(1)
    built = {name: models.build(name, args.device) for name in args.models.split(",")}
    if args.ready_file:
        # The stand-in editor configures Hookscope for every model found, then writes this file.
        Path(args.ready_file + ".models").write_text(json.dumps(list(built)))
        wait_for(args.ready_file)
    if args.mode == "anomaly":
        torch.autograd.set_detect_anomaly(True)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    if args.mode == "hookscope-side-by-side":
        results = side_by_side(built, args.steps, sync)
    else:
        results = one_configuration(built, args, sync)
    count, size = live_activation_bytes()
    out = {
        "mode": args.mode,
        "results": results,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "live_tensors": count,
        "live_tensor_bytes": size,
    }
    Path(args.out).write_text(json.dumps(out))


BLOCK_STEPS = 5
"""Timed steps per configuration before switching to the next one."""
SETTLE_STEPS = 2
SETTLE_S = 0.02
"""After a switch, untimed steps: at least SETTLE_STEPS and SETTLE_S. A new watch samples at
once, and on a 0.5 ms model the steps right after that 3 ms sample still run slow (cold
caches); in a real run the watch exists already and samples a few times a second."""


MIN_MODEL_S = 12.0
"""Side-by-side rounds continue (at most MAX_ROUNDS) until a model has stepped this long."""
MAX_ROUNDS = 200
MAX_MODEL_WALL_S = 150.0
"""Rounds past the minimum stop once a model's rounds took this long, switches included: on a slow host
switching (setBreakpoints on every layer) can take longer than the steps, and the row must end."""
ORDER_SEED = 7
"""The configurations' order is shuffled each round from this seed (the same orders every run)."""


def side_by_side(built: dict, steps: int, sync) -> dict[str, dict]:
    """Median step time per configuration and model, the configurations taking turns every
    BLOCK_STEPS steps (the first round is the warm-up); at least ``steps`` timed steps each."""
    from hookscope.link import agent

    deadline = time.monotonic() + 60
    while (agent.current() is None or agent.current().engine is None) and time.monotonic() < deadline:
        time.sleep(0.01)
    engine = agent.current().engine if agent.current() is not None else None
    if engine is None:
        raise RuntimeError("the Hookscope agent did not connect")
    results: dict[str, dict] = {}
    for name, (model, batch, loss_fn) in built.items():
        model_id = engine.model_id_of(model)
        layers = [n for n, _ in model.named_modules() if n]
        optimizer = models.optimizer_for(name, model)

        def step() -> float:
            return timed_step(model, batch, loss_fn, optimizer, sync)  # noqa: B023 - called within this iteration

        configs = configs_for(name)
        times: dict[str, list[float]] = {config: [] for config in configs}
        blocks: dict[str, list[float]] = {config: [] for config in configs}
        """Each round's block median, by configuration: the ratios pair a configuration with 'idle'
        of the same round, so a drift of the machine between rounds cancels out."""
        shuffler = random.Random(ORDER_SEED)
        min_rounds = 1 + -(-steps // BLOCK_STEPS)  # the first round warms up
        stepping_s, round_, started = 0.0, 0, time.monotonic()
        # Short steps are noisy on a shared machine: a small model gets more rounds, until it has
        # stepped MIN_MODEL_S (switching is not counted: setBreakpoints on every layer of every
        # model this worker holds takes longer than a small model's whole round), or its rounds,
        # switches included, took MAX_MODEL_WALL_S.
        while round_ < min_rounds or (
            stepping_s < MIN_MODEL_S and round_ < MAX_ROUNDS and time.monotonic() - started < MAX_MODEL_WALL_S
        ):
            # a new order each round, so no configuration always follows the same one (rotating a
            # fixed order would not do: each would always follow the same neighbour)
            order = list(configs)
            shuffler.shuffle(order)
            for config in order:
                for request in requests_for(config, model_id, layers):
                    engine.handle(request)
                settled, settle_from = 0, time.perf_counter()
                while settled < SETTLE_STEPS or time.perf_counter() < settle_from + SETTLE_S:  # not timed
                    step()
                    settled += 1
                block = [step() for _ in range(BLOCK_STEPS)]
                stepping_s += time.perf_counter() - settle_from
                if round_ > 0:
                    times[config].extend(block)
                    blocks[config].append(statistics.median(block))
            round_ += 1
        for request in requests_for("idle", model_id, layers):
            engine.handle(request)
        results[name] = {config: paired(times[config], blocks[config], blocks["idle"]) for config in configs}
    return results


def paired(times: list[float], blocks: list[float], idle_blocks: list[float]) -> dict:
    """One configuration's median step, and the median and quartiles of its per-round ratio to 'idle'."""
    ratios = sorted(b / i for b, i in zip(blocks, idle_blocks, strict=True))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return {
        "median_s": statistics.median(times),
        "steps": len(times),
        "rounds": len(ratios),
        "ratio": statistics.median(ratios),
        "ratio_q1": q1,
        "ratio_q3": q3,
    }


if __name__ == "__main__":
    main()
