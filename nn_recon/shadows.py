"""The shadow-model farm: θ_k = A(D⁻ ∪ {z_k}) for many targets z_k, trained as one batched computation.

One network definition (:class:`ClassifierMLP`) serves everything through
``torch.func.functional_call``: the K models of a chunk are a dict of stacked parameters and one
``vmap`` of the per-model gradient trains them all at once (the shared D⁻ is not copied per
model; only the target term differs). The released model under attack is trained by the same
code, so the adversary's shadow models follow exactly the released training algorithm A.

A farm on disk is a folder with ``farm.json`` (the configuration) and one ``chunk_XXXXX.pt`` per
chunk of targets. Chunks are independent, so a stopped run resumes at the first missing chunk, a
second attack reuses the chunks, and ``backend="ray"`` runs them as Ray tasks across machines.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from nn_recon.dp import DPConfig, noise_multiplier
from nn_recon.errors import ReconInputError
from nn_recon.progress import progress

FARM_FORMAT = "nn-recon-shadow-farm/1"
ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}


class ClassifierMLP(nn.Module):
    """A fully connected classifier ``widths[0] -> ... -> widths[-1]`` with biases and one activation.

    Split as ``first`` (the input layer) and ``tail`` (everything after its pre-activation), so the
    farm can run the input layer, where nearly all the work is, as one matrix product for all models.
    """

    def __init__(self, widths: Sequence[int], activation: str = "elu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ReconInputError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        self.first = nn.Linear(widths[0], widths[1])
        tail: list[nn.Module] = []
        for a, b in itertools.pairwise(widths[1:]):
            tail += [ACTIVATIONS[activation](), nn.Linear(a, b)]
        self.tail = nn.Sequential(*tail)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.first(x.flatten(1)))


@dataclass(frozen=True)
class FarmConfig:
    """The training algorithm A (the adversary knows it) and how the farm runs it.

    Defaults: Balle, Cherubin & Hayes (2022) MNIST — a 784-10-10 ELU MLP, 100 epochs of
    full-batch gradient descent with momentum, every model from the same initialisation.
    """

    widths: tuple[int, ...] = (784, 10, 10)
    activation: str = "elu"
    epochs: int = 100
    lr: float = 0.1
    momentum: float = 0.9
    batch_size: int | None = None
    same_init: bool = True
    init_seed: int = 0
    batch_seed: int = 0
    chunk_size: int = 1000
    dp: DPConfig = field(default_factory=DPConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        if isinstance(self.dp, dict):
            object.__setattr__(self, "dp", DPConfig(**self.dp))
        if len(self.widths) < 2 or min(self.widths) < 1:
            raise ReconInputError(f"widths must be >= 2 positive layer sizes, got {self.widths}")
        if self.epochs < 1 or self.lr <= 0 or not 0 <= self.momentum < 1 or self.chunk_size < 1:
            raise ReconInputError("epochs and chunk_size must be >= 1, lr > 0 and momentum in [0, 1)")
        if self.batch_size is not None and self.batch_size < 1:
            raise ReconInputError(f"batch_size must be >= 1 or None (full batch), got {self.batch_size}")
        if self.dp.private and self.batch_size is not None:
            raise ReconInputError(
                "DP accounting here covers full-batch DP-GD only; use batch_size=None with dp"
            )
        if self.activation not in ACTIVATIONS:
            raise ReconInputError(
                f"unknown activation {self.activation!r}; choose one of {sorted(ACTIVATIONS)}"
            )

    def network(self) -> ClassifierMLP:
        return ClassifierMLP(self.widths, self.activation)

    def to_dict(self) -> dict:
        return asdict(self)


def initial_parameters(config: FarmConfig, model_ids: Sequence[int]) -> dict[str, torch.Tensor]:
    """Stacked (k, ...) initial parameters: all from ``init_seed``, or model i from ``init_seed + 1 + i``."""
    seeds = [config.init_seed] if config.same_init else [config.init_seed + 1 + i for i in model_ids]
    stacks: dict[str, list[torch.Tensor]] = {}
    generator_state = torch.random.get_rng_state()
    try:
        for seed in seeds:
            torch.manual_seed(seed)
            for name, p in config.network().named_parameters():
                stacks.setdefault(name, []).append(p.detach())
    finally:
        torch.random.set_rng_state(generator_state)
    repeat = len(model_ids) if config.same_init else 1
    return {name: torch.stack(ps).repeat(repeat, *[1] * ps[0].ndim) for name, ps in stacks.items()}


def flatten(params: dict[str, torch.Tensor]) -> torch.Tensor:
    """(k, P): each model's parameters as one row, in the network's parameter order."""
    return torch.cat([p.flatten(1) for p in params.values()], dim=1)


def unflatten(flat: torch.Tensor, config: FarmConfig) -> dict[str, torch.Tensor]:
    shapes = {name: p.shape for name, p in config.network().named_parameters()}
    sizes = [math.prod(shape) for shape in shapes.values()]
    pieces = torch.split(flat, sizes, dim=1)
    return {
        name: piece.reshape(len(flat), *shape)
        for (name, shape), piece in zip(shapes.items(), pieces, strict=True)
    }


def _batches(config: FarmConfig, n: int, epoch: int) -> list[torch.Tensor]:
    """Index batches of one epoch over the n = |D⁻| + 1 points (the target is index n - 1)."""
    if config.batch_size is None:
        return [torch.arange(n)]
    generator = torch.Generator().manual_seed(config.batch_seed * 1_000_003 + epoch)
    return list(torch.randperm(n, generator=generator).split(config.batch_size))


def train_models(
    config: FarmConfig,
    x_minus: torch.Tensor,
    y_minus: torch.Tensor,
    targets_x: torch.Tensor,
    targets_y: torch.Tensor,
    params: dict[str, torch.Tensor],
    noise_seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Train k models at once, model i on D⁻ ∪ {(targets_x[i], targets_y[i])}, from stacked ``params``.

    Gradient descent with momentum on the mean cross-entropy (of the batch), or DP-GD when
    ``config.dp`` is private (then ``noise_seed`` fixes the Gaussian noise).
    """
    network = config.network()
    x_minus, targets_x = x_minus.flatten(1), targets_x.flatten(1)
    n = len(x_minus) + 1
    sigma = noise_multiplier(config.dp, config.epochs * len(_batches(config, n, 0)))
    generator = torch.Generator().manual_seed(noise_seed)

    def tail_loss(tail_params, pre_activation, y):
        return F.cross_entropy(
            functional_call(network.tail, tail_params, (pre_activation,)), y, reduction="sum"
        )

    def example_tail_loss(tail_params, pre_activation, y):
        return tail_loss(tail_params, pre_activation[None], y[None])

    # pre-activations are laid out (n, k, h), the matrix product's own layout, so the tail's
    # softmax and activations run on contiguous memory
    shared_tail_gradient = vmap(grad(tail_loss, argnums=(0, 1)), in_dims=(0, 1, None), out_dims=(0, 1))
    example_tail_gradient = vmap(
        vmap(grad(example_tail_loss, argnums=(0, 1)), in_dims=(None, 0, 0)),
        in_dims=(0, 1, None),
        out_dims=(0, 1),
    )
    target_tail_gradient = vmap(grad(example_tail_loss, argnums=(0, 1)))

    def clip_factors(pre_gradients, inputs, tail_gradients, example_dims):
        """min(1, C/‖g_i‖) per example. The input layer's per-example gradient is δ_i x_iᵀ (and δ_i for
        its bias), so its squared norm is ‖δ_i‖²(‖x_i‖² + 1) without ever forming it."""
        squared = pre_gradients.square().sum(-1) * (inputs.square().sum(-1) + 1)
        squared = squared + sum(g.flatten(example_dims).square().sum(-1) for g in tail_gradients.values())
        return (config.dp.clip_norm / squared.sqrt()).clamp(max=1.0)

    def batched_gradient(p, x, y, has_target):
        """Σ_batch ∇ loss for every model, each example's gradient clipped when training with DP.

        The input layer's forward pass and weight gradient are one matrix product each over all
        models (x is shared); the small tail is vmapped."""
        w, b = p["first.weight"], p["first.bias"]
        tail_params = {name.removeprefix("tail."): q for name, q in p.items() if name.startswith("tail.")}
        pre = torch.einsum("nd,khd->nkh", x, w) + b
        t_tail, t_pre = target_tail_gradient(
            tail_params, torch.einsum("kd,khd->kh", targets_x, w) + b, targets_y
        )
        if config.dp.private:
            g_tail, g_pre = example_tail_gradient(tail_params, pre, y)  # (k, n, ...) and (n, k, h)
            factors = clip_factors(g_pre.transpose(0, 1), x, g_tail, 2)  # (k, n)
            g_pre = g_pre * factors.T[:, :, None]
            g_tail = {name: torch.einsum("kn...,kn->k...", g, factors) for name, g in g_tail.items()}
            t_factors = clip_factors(t_pre, targets_x, t_tail, 1)  # (k,)
            t_pre = t_pre * t_factors[:, None]
            t_tail = {name: g * t_factors.view(-1, *[1] * (g.ndim - 1)) for name, g in t_tail.items()}
        else:
            g_tail, g_pre = shared_tail_gradient(tail_params, pre, y)
        t_pre = has_target * t_pre
        grads = {
            "first.weight": torch.einsum("nkh,nd->khd", g_pre, x) + t_pre[:, :, None] * targets_x[:, None],
            "first.bias": g_pre.sum(0) + t_pre,
        }
        return grads | {f"tail.{name}": g + has_target * t_tail[name] for name, g in g_tail.items()}

    params = {name: p.clone() for name, p in params.items()}
    velocity = {name: torch.zeros_like(p) for name, p in params.items()}
    for epoch in range(config.epochs):
        for batch in _batches(config, n, epoch):
            rows = batch[batch < n - 1]
            has_target = float(len(rows) < len(batch))
            grads = batched_gradient(params, x_minus[rows], y_minus[rows], has_target)
            if config.dp.private:
                for g in grads.values():
                    g.add_(torch.randn(g.shape, generator=generator), alpha=sigma * config.dp.clip_norm)
            with torch.no_grad():
                for name, p in params.items():
                    velocity[name].mul_(config.momentum).add_(grads[name], alpha=1.0 / len(batch))
                    p.sub_(velocity[name], alpha=config.lr)
    return params


def train_one_model(
    config: FarmConfig,
    x: torch.Tensor,
    y: torch.Tensor,
    params: dict[str, torch.Tensor],
) -> dict[str, torch.Tensor]:
    """One model the ordinary way (``torch.optim.SGD``, full batch, not private) on (x, y).

    The reference the batched farm must equal, and the one-at-a-time baseline of its benchmark.
    """
    if config.batch_size is not None or config.dp.private:
        raise ReconInputError("the one-model reference covers full-batch, non-private training only")
    network = config.network()
    with torch.no_grad():
        for name, p in network.named_parameters():
            p.copy_(params[name])
    optimiser = torch.optim.SGD(network.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.epochs):
        optimiser.zero_grad()
        F.cross_entropy(network(x), y).backward()
        optimiser.step()
    return {name: p.detach().clone() for name, p in network.named_parameters()}


@dataclass(frozen=True)
class Chunk:
    """One independent piece of farm work: models ``start .. start + len(targets_x) - 1``."""

    index: int
    start: int
    targets_x: torch.Tensor
    targets_y: torch.Tensor
    noise_seed: int


def train_chunk(
    config: FarmConfig, x_minus: torch.Tensor, y_minus: torch.Tensor, chunk: Chunk
) -> torch.Tensor:
    """The flat (k, P) trained parameters of one chunk; a pure function, so any worker can run it."""
    ids = range(chunk.start, chunk.start + len(chunk.targets_x))
    params = initial_parameters(config, ids)
    trained = train_models(
        config, x_minus, y_minus, chunk.targets_x, chunk.targets_y, params, noise_seed=chunk.noise_seed
    )
    return flatten(trained)


@dataclass(frozen=True)
class Farm:
    """Trained models with their targets: ``params`` (K, P), ``targets_x`` (K, ...), ``targets_y`` (K,)."""

    config: FarmConfig
    params: torch.Tensor
    targets_x: torch.Tensor
    targets_y: torch.Tensor


def _chunks(
    config: FarmConfig, targets_x: torch.Tensor, targets_y: torch.Tensor, noise_seed: int
) -> list[Chunk]:
    return [
        Chunk(
            i,
            start,
            targets_x[start : start + config.chunk_size],
            targets_y[start : start + config.chunk_size],
            noise_seed * 1_000_003 + i,
        )
        for i, start in enumerate(range(0, len(targets_x), config.chunk_size))
    ]


def _check_folder(folder: Path, config: FarmConfig, noise_seed: int, fingerprint: dict) -> None:
    """A farm folder holds one (config, noise seed, D⁻, targets): refuse to mix chunks of different farms."""
    meta_path = folder / "farm.json"
    meta = {"format": FARM_FORMAT, "config": config.to_dict(), "noise_seed": noise_seed, "data": fingerprint}
    if meta_path.exists():
        saved = json.loads(meta_path.read_text())
        if saved != json.loads(json.dumps(meta)):
            raise ReconInputError(
                f"{folder} holds a farm of another configuration or data set; use a new --out folder or "
                "delete that one"
            )
    else:
        folder.mkdir(parents=True, exist_ok=True)
        meta_path.write_text(json.dumps(meta, indent=2))


def _fingerprint(*tensors: torch.Tensor) -> dict:
    return {
        "shapes": [list(t.shape) for t in tensors],
        "sums": [float(t.double().sum()) for t in tensors],
    }


def build_farm(
    config: FarmConfig,
    x_minus: torch.Tensor,
    y_minus: torch.Tensor,
    targets_x: torch.Tensor,
    targets_y: torch.Tensor,
    folder: str | Path | None = None,
    backend: str = "local",
    noise_seed: int = 0,
) -> Farm:
    """Train one model per target (or reuse the chunks already saved in ``folder``).

    ``noise_seed`` seeds this farm's DP noise (chunk i draws from ``noise_seed``·1,000,003 + i).
    The adversary does not know the released models' noise, so their farm must not share the
    shadows' seed: with equal chunk sizes, model i of each would get identical noise.
    ``backend`` is "local" (default: chunk after chunk in this process) or "ray" (each missing
    chunk a Ray task; needs ``pip install ray`` and a running cluster or ``ray.init()``).
    """
    if backend not in ("local", "ray"):
        raise ReconInputError(f"backend must be 'local' or 'ray', got {backend!r}")
    if len(targets_x) != len(targets_y) or len(x_minus) != len(y_minus):
        raise ReconInputError("targets_x/targets_y and x_minus/y_minus must have matching lengths")
    if len(targets_x) == 0:
        raise ReconInputError("the farm needs at least one target")
    chunks = _chunks(config, targets_x, targets_y, noise_seed)
    path = Path(folder) if folder is not None else None
    if path is not None:
        _check_folder(path, config, noise_seed, _fingerprint(x_minus, y_minus, targets_x, targets_y))
    results: dict[int, torch.Tensor] = {}
    missing = []
    for chunk in chunks:
        chunk_path = path / f"chunk_{chunk.index:05d}.pt" if path is not None else None
        if chunk_path is not None and chunk_path.exists():
            results[chunk.index] = torch.load(chunk_path, weights_only=True)
        else:
            missing.append(chunk)

    def finish(chunk: Chunk, flat: torch.Tensor) -> None:
        results[chunk.index] = flat
        if path is not None:
            temporary = path / f"chunk_{chunk.index:05d}.pt.tmp"
            torch.save(flat, temporary)
            temporary.replace(path / f"chunk_{chunk.index:05d}.pt")

    if backend == "ray":
        _run_on_ray(config, x_minus, y_minus, missing, finish)
    else:
        for chunk in progress(missing, len(missing), f"shadow chunks of {config.chunk_size}"):
            finish(chunk, train_chunk(config, x_minus, y_minus, chunk))
    params = torch.cat([results[c.index] for c in chunks])
    return Farm(config, params, targets_x, targets_y)


def _run_on_ray(config, x_minus, y_minus, chunks: list[Chunk], finish: Callable[[Chunk, torch.Tensor], None]):
    try:
        import ray
    except ImportError as error:
        raise ReconInputError(
            "backend='ray' needs Ray: pip install ray (or use the default local backend)"
        ) from error
    remote = ray.remote(train_chunk)
    shared = [ray.put(value) for value in (config, x_minus, y_minus)]  # shipped once, not per chunk
    pending = {remote.remote(*shared, chunk): chunk for chunk in chunks}
    for _ in progress(range(len(pending)), len(pending), f"shadow chunks of {config.chunk_size} (ray)"):
        done, _ = ray.wait(list(pending), num_returns=1)
        finish(pending.pop(done[0]), ray.get(done[0]))


def logits_on_probes(farm_params: torch.Tensor, config: FarmConfig, probes: torch.Tensor) -> torch.Tensor:
    """The black-box view of each model: its logits on fixed probe inputs, as (K, probes·classes)."""
    network = config.network()
    outputs = vmap(lambda p: functional_call(network, p, (probes,)))(unflatten(farm_params, config))
    return outputs.flatten(1)


def accuracy(farm_params: torch.Tensor, config: FarmConfig, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(K,) accuracy of each model on (x, y)."""
    network = config.network()
    with torch.no_grad():
        outputs = vmap(lambda p: functional_call(network, p, (x,)))(unflatten(farm_params, config))
    return (outputs.argmax(-1) == y).double().mean(-1)
