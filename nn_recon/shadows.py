"""The shadow-model farm: θ_k = A(D⁻ ∪ {z_k}) for many targets z_k, trained as one batched computation.

One network definition (:class:`ClassifierMLP`) fixes the parameters; the K models of a chunk are
a dict of stacked parameters, trained together by :func:`train_models`: the input layer in its dual
form (one product with the Gram matrix of the shared D⁻ per epoch for all models; only the target
term differs), the small tail written out with the examples on the last axis. The released model
under attack is trained by the same code, so the adversary's shadow models follow exactly the
released training algorithm A.

A farm on disk is a folder with ``farm.json`` (the configuration) and one ``chunk_XXXXX.pt`` per
chunk of targets. Chunks are independent, so a stopped run resumes at the first missing chunk, a
second attack reuses the chunks, and ``backend="ray"`` runs them as Ray tasks across machines: a
model's seeds come from its index and its chunk's, never from the worker, so a farm's models do not
depend on where its chunks ran.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from nn_recon.checkpoint import load_torch_file, save_atomically
from nn_recon.dp import DPConfig, noise_multiplier
from recon_core.errors import ReconError
from recon_core.progress import progress

FARM_FORMAT = "nn-recon-shadow-farm/1"
ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}
Backend = Literal["local", "ray"]
BACKENDS: tuple[str, ...] = get_args(Backend)
PLACEMENT = ("backend", "address")  # where a farm trains, not what it trains: kept out of farm.json
RAY_MISSING = "backend 'ray' needs Ray: pip install 'recon-audit[ray]' (or use the default local backend)"


class ClassifierMLP(nn.Module):
    """A fully connected classifier ``widths[0] -> ... -> widths[-1]`` with biases and one activation.

    Split as ``first`` (the input layer) and ``tail`` (everything after its pre-activation), so the
    farm can run the input layer, where nearly all the work is, as one matrix product for all models.
    """

    def __init__(self, widths: Sequence[int], activation: str = "elu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ReconError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
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
    full-batch gradient descent with momentum, every model from the same initialisation, trained
    chunk after chunk in this process. ``backend="ray"`` trains each chunk as a Ray task on the
    cluster at ``address`` (None: a local Ray instance); the models are bitwise the same.
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
    backend: Backend = "local"
    address: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        if isinstance(self.dp, dict):
            object.__setattr__(self, "dp", DPConfig(**self.dp))
        if len(self.widths) < 2 or min(self.widths) < 1:
            raise ReconError(f"widths must be >= 2 positive layer sizes, got {self.widths}")
        if self.epochs < 1 or self.lr <= 0 or not 0 <= self.momentum < 1 or self.chunk_size < 1:
            raise ReconError("epochs and chunk_size must be >= 1, lr > 0 and momentum in [0, 1)")
        if self.batch_size is not None and self.batch_size < 1:
            raise ReconError(f"batch_size must be >= 1 or None (full batch), got {self.batch_size}")
        if self.dp.private and self.batch_size is not None:
            raise ReconError("DP accounting here covers full-batch DP-GD only; use batch_size=None with dp")
        if self.activation not in ACTIVATIONS:
            raise ReconError(f"unknown activation {self.activation!r}; choose one of {sorted(ACTIVATIONS)}")
        if self.backend not in BACKENDS:
            raise ReconError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.address is not None and self.backend != "ray":
            raise ReconError(f"address {self.address!r} is a Ray cluster's: it goes with backend 'ray'")

    def network(self) -> ClassifierMLP:
        return ClassifierMLP(self.widths, self.activation)

    def to_dict(self) -> dict:
        return asdict(self)

    def recipe(self) -> dict:
        """The settings the trained models depend on: all but the placement, so that a farm started
        on one backend resumes on the other."""
        return {name: value for name, value in self.to_dict().items() if name not in PLACEMENT}


def require_backend(config: FarmConfig) -> None:
    """Refuse at once, before any work, a backend that this Python cannot run: Ray not installed."""
    if config.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as error:
            raise ReconError(RAY_MISSING) from error


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


def _batches(config: FarmConfig, n: int, epoch: int) -> list[torch.Tensor | slice]:
    """Row batches of one epoch over the n = |D⁻| + 1 points (the target is row n - 1); the whole
    set is ``slice(None)``, so full-batch training indexes nothing."""
    if config.batch_size is None:
        return [slice(None)]
    generator = torch.Generator().manual_seed(config.batch_seed * 1_000_003 + epoch)
    return list(torch.randperm(n, generator=generator).split(config.batch_size))


def _activate(activation: str, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """f(z) and f'(z). ELU's share one exp: with e = exp(min(z, 0)), f = relu(z) + e - 1 and f' = e."""
    if activation == "elu":
        slope = z.clamp(max=0).exp_()
        return torch.relu(z).add_(slope).sub_(1), slope
    if activation == "relu":
        return torch.relu(z), (z > 0).to(z.dtype)  # 0 at z = 0, as torch's
    value = torch.tanh(z)
    return value, 1 - value.square()


@dataclass
class _TailGradients:
    """Per-example gradients of the summed cross-entropy, examples on the last axis, never summed:
    ``pre`` wrt the input layer's pre-activations (k, h, n), ``outputs[l]`` wrt tail layer l's
    outputs (k, o, n) and ``inputs[l]`` that layer's inputs (k, i, n), so layer l's weight gradient
    of example j is outputs[l][..., j] ⊗ inputs[l][..., j]."""

    pre: torch.Tensor
    outputs: list[torch.Tensor]
    inputs: list[torch.Tensor]

    def clip(self, clip_norm: float, input_squared_norms: torch.Tensor) -> None:
        """Scale example j's gradient to norm at most ``clip_norm`` (DP's clipping). Its squared norm
        comes from ‖x̃_j‖² (x̃ with the bias' constant 1) without forming the gradient: the
        input layer's part is ‖∂pre_j‖²‖x̃_j‖², a tail layer's ‖∂out_j‖²(‖in_j‖² + 1)."""
        squared = self.pre.square().sum(1) * input_squared_norms
        for g, a in zip(self.outputs, self.inputs, strict=True):
            squared = squared + g.square().sum(1) * (a.square().sum(1) + 1)
        factors = (clip_norm / squared.sqrt()).clamp(max=1.0)[:, None]
        self.pre = self.pre * factors
        self.outputs = [g * factors for g in self.outputs]

    def summed(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The tail parameters' gradients summed over the examples, by parameter name."""
        grads = {}
        for name, g, a in zip(names, self.outputs, self.inputs, strict=True):
            grads[f"{name}.weight"] = torch.bmm(g, a.transpose(1, 2))
            grads[f"{name}.bias"] = g.sum(-1)
        return grads


def _tail_gradients(
    activation: str, layers: list[tuple[torch.Tensor, torch.Tensor]], pre: torch.Tensor, onehot: torch.Tensor
) -> _TailGradients:
    """Forward and backward through the tail (activation, linear, ...) of k models at once.

    ``pre`` (k, h, n), ``layers`` [(weight (k, o, i), bias (k, o))], ``onehot`` (k or 1, c, n)."""
    inputs, slopes, h = [], [], pre
    for weight, bias in layers:
        value, slope = _activate(activation, h)
        inputs.append(value)
        slopes.append(slope)
        h = torch.baddbmm(bias[..., None], weight, value)
    g = torch.softmax(h, dim=1).sub_(onehot)  # d cross-entropy / d logits
    outputs = []
    for (weight, _), slope in zip(reversed(layers), reversed(slopes), strict=True):
        outputs.append(g)
        g = torch.bmm(weight.transpose(1, 2), g).mul_(slope)
    return _TailGradients(g, outputs[::-1], inputs)


BLOCK_NUMBERS = 1 << 20  # numbers in one block's pre-activations: 4 MB in float32 stays in cache


def models_per_block(config: FarmConfig, m: int) -> int:
    """How many models train together on |D⁻| = m points: their pre-activations fill one block."""
    return max(1, BLOCK_NUMBERS // (config.widths[1] * (m + 1)))


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

    The input layer is trained in its dual form. With x̃ = (x, 1), its weights (the bias as their
    last column) only ever move along the training inputs, W̃ = W̃₀ + Σ_j A_j x̃_jᵀ (plus the DP
    noise, kept apart): gradient descent on W̃ is gradient descent on the coefficients A with the
    pre-activations' gradients as theirs, and the pre-activations W̃x̃_i = W̃₀x̃_i + Σ_j A_j ⟨x̃_j, x̃_i⟩
    are one product with the Gram matrix of D⁻, which all models share: an m²·k·h product an epoch
    (m = |D⁻|) in place of a forward and a backward m·d·k·h one. Models run in blocks small enough
    to stay in cache.
    """
    dtype, device = params["first.weight"].dtype, params["first.weight"].device  # the data follows params
    inputs = F.pad(x_minus.flatten(1).to(device, dtype), (0, 1), value=1.0)  # x̃ = (x, 1)
    onehot = F.one_hot(y_minus.to(device), config.widths[-1]).T.to(dtype)[None]
    shared = _SharedData(inputs, inputs @ inputs.T, onehot)
    targets = F.pad(targets_x.flatten(1).to(device, dtype), (0, 1), value=1.0)
    targets_y = targets_y.to(device)
    block = models_per_block(config, len(inputs))
    trained = []
    for index, start in enumerate(range(0, len(targets), block)):
        rows = slice(start, start + block)
        seed = int(np.random.SeedSequence([noise_seed, index]).generate_state(1)[0])
        block_params = {name: p[rows] for name, p in params.items()}
        generator = torch.Generator().manual_seed(seed)
        trained.append(_train_block(config, shared, targets[rows], targets_y[rows], block_params, generator))
    return {name: torch.cat([t[name] for t in trained]) for name in params}


@dataclass(frozen=True)
class _SharedData:
    """D⁻ as every block of models sees it: x̃ (m, d + 1), its Gram matrix and one-hot labels (1, c, m)."""

    inputs: torch.Tensor
    gram: torch.Tensor
    onehot: torch.Tensor

    @property
    def squared_norms(self) -> torch.Tensor:
        return self.gram.diagonal()


def _train_block(
    config: FarmConfig,
    shared: _SharedData,
    targets: torch.Tensor,
    targets_y: torch.Tensor,
    params: dict[str, torch.Tensor],
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """``train_models`` for one block of k models; ``targets`` are the x̃ of their targets (k, d + 1)."""
    m = len(shared.inputs)
    private = config.dp.private
    tail_names = [f"tail.{name}" for name, module in config.network().tail.named_children()
                  if isinstance(module, nn.Linear)]  # fmt: skip
    initial = torch.cat([params["first.weight"], params["first.bias"][..., None]], dim=-1)  # W̃₀ (k, h, d+1)
    initial_pre = initial @ shared.inputs.T  # (k, h, m)
    initial_pre_target = (initial @ targets[..., None])[..., 0]  # (k, h)
    cross = targets @ shared.inputs.T  # ⟨x̃_target, x̃_j⟩ (k, m)
    target_squared = targets.square().sum(1, keepdim=True)
    onehot_target = F.one_hot(targets_y, config.widths[-1]).to(targets.dtype)[..., None]  # (k, c, 1)
    tail = {name: params[name].clone() for name in params if name.startswith("tail.")}
    state = {
        "coefficients": torch.zeros_like(initial_pre),  # A of D⁻
        "target_coefficients": torch.zeros_like(initial_pre_target),
        **({"noise": torch.zeros_like(initial)} if private else {}),  # DP noise's part of W̃
        **tail,
    }
    velocity = {name: torch.zeros_like(p) for name, p in state.items()}
    sigma = noise_multiplier(config.dp, config.epochs * len(_batches(config, m + 1, 0)))

    def pre_activations(minus: slice | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """W̃x̃ on the D⁻ rows ``minus`` (k, h, rows) and on each model's target (k, h)."""
        coefficients = state["coefficients"]
        start = initial_pre[..., minus]
        pre = torch.addmm(start.reshape(-1, start.shape[-1]), coefficients.view(-1, m), shared.gram[:, minus])
        pre = pre.view(start.shape).addcmul_(state["target_coefficients"][..., None], cross[:, None, minus])
        pre_target = initial_pre_target + (coefficients @ cross[..., None])[..., 0]
        pre_target.addcmul_(state["target_coefficients"], target_squared)
        if private:
            pre += state["noise"] @ shared.inputs[minus].T
            pre_target += (state["noise"] @ targets[..., None])[..., 0]
        return pre, pre_target

    for epoch in range(config.epochs):
        for batch in _batches(config, m + 1, epoch):
            batch = batch if isinstance(batch, slice) else batch.to(initial.device)
            if isinstance(batch, slice):
                minus, has_target, size = batch, True, m + 1
            else:
                minus, has_target, size = batch[batch < m], bool((batch == m).any()), len(batch)
            layers = [(state[f"{name}.weight"], state[f"{name}.bias"]) for name in tail_names]
            pre, pre_target = pre_activations(minus)
            grads = _tail_gradients(config.activation, layers, pre, shared.onehot[..., minus])
            if private:
                grads.clip(config.dp.clip_norm, shared.squared_norms[minus])
            step = {"coefficients": grads.pre, **grads.summed(tail_names)}
            if has_target:
                target = _tail_gradients(config.activation, layers, pre_target[..., None], onehot_target)
                if private:
                    target.clip(config.dp.clip_norm, target_squared)
                for name, g in target.summed(tail_names).items():
                    step[name] = step[name] + g
                step["target_coefficients"] = target.pre[..., 0]
            if private:
                for name in ("noise", *tail):
                    noise = torch.randn(state[name].shape, generator=generator, dtype=initial.dtype)
                    noise = noise.to(initial.device)  # drawn on the CPU: the same noise on any device
                    step[name] = step.get(name, 0) + sigma * config.dp.clip_norm * noise
            for name, p in state.items():
                v = velocity[name].mul_(config.momentum)
                if name == "coefficients" and not isinstance(minus, slice):
                    v.index_add_(-1, minus, step[name], alpha=1.0 / size)
                elif name in step:
                    v.add_(step[name], alpha=1.0 / size)
                p.sub_(v, alpha=config.lr)
    weights = initial + state["coefficients"] @ shared.inputs
    weights += state["target_coefficients"][..., None] * targets[:, None]
    if private:
        weights += state["noise"]
    return {"first.weight": weights[..., :-1], "first.bias": weights[..., -1], **tail}


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
        raise ReconError("the one-model reference covers full-batch, non-private training only")
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
    config: FarmConfig,
    x_minus: torch.Tensor,
    y_minus: torch.Tensor,
    chunk: Chunk,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The flat (k, P) trained parameters of one chunk, trained on ``device`` and returned on the
    CPU; a pure function, so any worker can run it."""
    ids = range(chunk.start, chunk.start + len(chunk.targets_x))
    params = {name: p.to(device) for name, p in initial_parameters(config, ids).items()}
    trained = train_models(
        config, x_minus, y_minus, chunk.targets_x, chunk.targets_y, params, noise_seed=chunk.noise_seed
    )
    return flatten(trained).cpu()


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
    meta = {"format": FARM_FORMAT, "config": config.recipe(), "noise_seed": noise_seed, "data": fingerprint}
    if meta_path.exists():
        saved = json.loads(meta_path.read_text())
        if saved != json.loads(json.dumps(meta)):
            raise ReconError(
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
    noise_seed: int = 0,
    device: torch.device | str = "cpu",
) -> Farm:
    """Train one model per target (or reuse the chunks already saved in ``folder``).

    ``noise_seed`` seeds this farm's DP noise (chunk i draws from ``noise_seed``·1,000,003 + i).
    The adversary does not know the released models' noise, so their farm must not share the
    shadows' seed: with equal chunk sizes, model i of each would get identical noise.
    ``config.backend`` "ray" runs each missing chunk as a Ray task (see :func:`_run_on_ray`), and
    only this process writes ``folder``. Each chunk trains on ``device``; the parameters are kept on
    the CPU.
    """
    require_backend(config)
    if len(targets_x) != len(targets_y) or len(x_minus) != len(y_minus):
        raise ReconError("targets_x/targets_y and x_minus/y_minus must have matching lengths")
    if len(targets_x) == 0:
        raise ReconError("the farm needs at least one target")
    chunks = _chunks(config, targets_x, targets_y, noise_seed)
    path = Path(folder) if folder is not None else None
    if path is not None:
        _check_folder(path, config, noise_seed, _fingerprint(x_minus, y_minus, targets_x, targets_y))
    results: dict[int, torch.Tensor] = {}
    missing = []
    for chunk in chunks:
        chunk_path = path / f"chunk_{chunk.index:05d}.pt" if path is not None else None
        if chunk_path is not None and chunk_path.exists():
            results[chunk.index] = load_torch_file(chunk_path, "a farm chunk", "delete it to retrain it")
        else:
            missing.append(chunk)

    def finish(chunk: Chunk, flat: torch.Tensor) -> None:
        results[chunk.index] = flat
        if path is not None:
            save_atomically(path / f"chunk_{chunk.index:05d}.pt", flat)

    if config.backend == "ray":
        _run_on_ray(config, x_minus, y_minus, missing, finish, device)
    else:
        for chunk in progress(missing, len(missing), f"shadow chunks of {config.chunk_size}"):
            finish(chunk, train_chunk(config, x_minus, y_minus, chunk, device))
    params = torch.cat([results[c.index] for c in chunks])
    return Farm(config, params, targets_x, targets_y)


def _run_on_ray(
    config: FarmConfig,
    x_minus: torch.Tensor,
    y_minus: torch.Tensor,
    chunks: list[Chunk],
    finish: Callable[[Chunk, torch.Tensor], None],
    device: torch.device | str,
) -> None:
    """Each chunk a Ray task (Ray's one CPU, and a GPU when ``device`` is CUDA), finished here as it
    returns. Connects with ``ray.init(config.address)`` unless this process already has (a notebook
    or a test that called ``ray.init``), and leaves the connection open for the next farm; Ray
    closes it when the process ends."""
    import ray

    if not chunks:
        return
    if not ray.is_initialized():
        ray.init(address=config.address)
    gpus = 1 if torch.device(device).type == "cuda" else 0  # a task sees no GPU it did not ask for
    remote = ray.remote(_train_chunk_with).options(num_gpus=gpus)
    settings = (torch.get_num_threads(), torch.get_default_dtype())
    shared = [ray.put(value) for value in (config, x_minus, y_minus)]  # shipped once, not per chunk
    pending = {remote.remote(*settings, *shared, chunk, device): chunk for chunk in chunks}
    for _ in progress(range(len(pending)), len(pending), f"shadow chunks of {config.chunk_size} (ray)"):
        done, _ = ray.wait(list(pending), num_returns=1)
        finish(pending.pop(done[0]), ray.get(done[0]))


def _train_chunk_with(threads: int, dtype: torch.dtype, *args) -> torch.Tensor:
    """``train_chunk`` in a Ray worker under the torch settings of the process that asked: its
    default dtype (the models') and its thread count (BLAS adds in another order on another count,
    which changes the last bits), so that the chunk is bitwise the local farm's."""
    torch.set_num_threads(threads)
    torch.set_default_dtype(dtype)
    return train_chunk(*args)


def logits_on_probes(farm_params: torch.Tensor, config: FarmConfig, probes: torch.Tensor) -> torch.Tensor:
    """The black-box view of each model: its logits on fixed probe inputs, as (K, probes·classes), on
    the device of ``farm_params``."""
    network = config.network()
    probes = probes.to(farm_params.device)
    outputs = vmap(lambda p: functional_call(network, p, (probes,)))(unflatten(farm_params, config))
    return outputs.flatten(1)


def farm_accuracy(
    farm_params: torch.Tensor, config: FarmConfig, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """(K,) accuracy of each model on (x, y), on the device of ``farm_params``."""
    network = config.network()
    x, y = x.to(farm_params.device), y.to(farm_params.device)
    with torch.no_grad():
        outputs = vmap(lambda p: functional_call(network, p, (x,)))(unflatten(farm_params, config))
    return (outputs.argmax(-1) == y).double().mean(-1)
