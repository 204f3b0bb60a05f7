"""The stationarity attack: find images x_i and weights λ_i that make the trained parameters stationary.

One objective serves the family. With per-point scores s_i(θ) and a regulariser R,

    r(x, λ) = ∇R(θ) − a · ∇_θ Σ_i λ_i s_i(θ; x_i),        loss = ‖r‖² / ‖∇R(θ)‖²

* ``kkt`` (Haim et al. 2022; Buzaglo et al. 2023): R = ‖θ‖²/2 and s_i the margin, y_i Φ(x_i) for
  one output and Φ_{y_i} − max_{j≠y_i} Φ_j for several. A network trained long on the logistic
  or cross-entropy loss converges in direction to a KKT point θ ∝ Σ λ_i ∇ margin_i, so the scale a
  is free: it is solved in closed form (a = ⟨∇R, g⟩/‖g‖²), which makes λ scale-free. λ ≥ 0 needs
  a ≥ 0; a negative a is no KKT point, and the loss is reflected there (see ``_value``).
* ``posterior`` (the Dirac-posterior view): R = (wd/2)‖θ‖² and s_i = −ℓ(f_θ(x_i), y_i), the
  training loss; a = 1/m, so a·λ are absolute weights (1/n each for the true training set of a
  model trained on the mean loss with weight decay wd).

The network is any differentiable classifier (an ``nn.Module`` taking images (n, C, H, W) and giving
one logit for two classes or K logits), called through ``torch.func.functional_call``. During the
attack every ReLU in it keeps its values but differentiates as sigmoid(βz) (``SurrogateReLU``), so
the gradient wrt x is informative. Pixels stay in [0, 1] (the box prior, by projection), λ ≥ λ_min
(by projection). Runs draw their learning rate, initial scale, λ_min and β from log-uniform ranges,
each from its own seed, and a batch of runs is optimised together with Adam.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from nn_recon.models import SurrogateReLU, margins
from nn_recon.ncc import pairwise_ncc
from nn_recon.train import TrainedModel, check_device, resolve_device, resolve_dtype
from nn_recon.user_model import check_classes, infer_input_shape, output_width
from recon_core.errors import ReconError, require_at_least, require_positive
from recon_core.measure import WeightedMeasure
from recon_core.progress import progress

OBJECTIVES = ("kkt", "posterior")
Range = tuple[float, float]


@dataclass(frozen=True)
class StationarityConfig:
    """The attack's settings; every range is searched log-uniformly, one draw per run."""

    points: int = 200
    runs: int = 8
    steps: int = 3000
    runs_per_batch: int = 4
    objective: str = "kkt"
    weight_decay: float | None = None
    lr: Range = (1e-3, 1e-2)
    lambda_lr_factor: float = 10.0
    init_scale: Range = (1e-4, 1e-3)
    lambda_min: Range = (0.01, 0.5)
    beta: Range = (30.0, 300.0)
    prune_fraction: float = 0.01
    duplicate_ncc: float = 0.98
    seed: int = 0
    dtype: str = "float32"
    device: str = "auto"
    checkpoint_every: int = 500

    def __post_init__(self) -> None:
        require_at_least(1, points=self.points, runs=self.runs, steps=self.steps)
        require_at_least(1, runs_per_batch=self.runs_per_batch, checkpoint_every=self.checkpoint_every)
        if self.weight_decay is not None:
            require_positive(weight_decay=self.weight_decay)
        for name in ("lr", "init_scale", "lambda_min", "beta"):
            for bound in getattr(self, name):
                require_positive(**{name: bound})
        require_positive(lambda_lr_factor=self.lambda_lr_factor)
        require_at_least(0, prune_fraction=self.prune_fraction, duplicate_ncc=self.duplicate_ncc)
        check_objective(self.objective)
        resolve_dtype(self.dtype)
        check_device(self.device)


def check_objective(objective: str) -> None:
    if objective not in OBJECTIVES:
        raise ReconError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


@dataclass(frozen=True)
class RunSettings:
    """The searched hyperparameters of one run, drawn from its seed."""

    index: int
    lr: float
    init_scale: float
    lambda_min: float
    beta: float

    @classmethod
    def draw(cls, config: StationarityConfig, index: int) -> RunSettings:
        rng = np.random.default_rng([config.seed, index])

        def log_uniform(bounds: Range) -> float:
            low, high = sorted(bounds)
            return float(math.exp(rng.uniform(math.log(low), math.log(high))))

        return cls(
            index, *(log_uniform(r) for r in (config.lr, config.init_scale, config.lambda_min, config.beta))
        )


@dataclass(frozen=True)
class AttackTarget:
    """What the attack needs of a classifier: the network, the (C, H, W) it takes, its class count,
    the mean image subtracted from its inputs (zeros: it takes images in [0, 1]), the weight decay it
    was trained with where known, and ``identity``, a hash of its weights (and source) that the
    ``out_dir`` fingerprint records."""

    network: nn.Module
    input_shape: tuple[int, ...]
    num_classes: int
    mean: np.ndarray
    weight_decay: float | None
    identity: str


def _weights_digest(network: nn.Module, source: str) -> str:
    """SHA-256 of the class name, ``source`` and the state_dict, floats as float64 (exact for float32),
    so that the attack moving the network to another dtype or device leaves it unchanged."""
    digest = hashlib.sha256(f"{type(network).__qualname__}\n{source}".encode())
    for name, value in network.state_dict().items():
        value = value.detach().cpu()
        value = value.to(torch.float64) if value.is_floating_point() else value
        digest.update(name.encode())
        digest.update(value.contiguous().numpy().tobytes())
    return digest.hexdigest()


class Recentred(nn.Module):
    """A classifier of images in [0, 1] seen from ``centre``: ``forward(x) = network(x + centre)``.

    The attack works on images centred by a mean image, as nn-recon's own networks take them, and
    starts its candidates near 0: near the mean. A user's network takes the images themselves, so
    without a centre the candidates start near a black image. An adversary has a fair estimate of
    the training mean, the mean of public images from the same distribution.
    """

    def __init__(self, network: nn.Module, centre: np.ndarray) -> None:
        super().__init__()
        self.network = network
        self.register_buffer("centre", torch.as_tensor(np.asarray(centre, np.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x + self.centre)


def as_target(
    model: TrainedModel | nn.Module | AttackTarget,
    input_shape: tuple[int, ...] | None = None,
    num_classes: int | None = None,
    source: str = "",
    centre: np.ndarray | None = None,
) -> AttackTarget:
    """The attack's view of a model trained by nn-recon or of any classifier ``nn.Module``.

    For a module, ``input_shape`` and ``num_classes`` default to what the module shows (see
    :mod:`nn_recon.user_model`); ``source`` (e.g. a hash of its Python file) joins its identity;
    ``centre``, an image of that shape in [0, 1], is where the candidates start (:class:`Recentred`;
    default: a black image). A model trained by nn-recon carries its own (its training mean).
    """
    if isinstance(model, AttackTarget):
        if centre is not None:
            raise ReconError("this target has its centre already; drop the centre")
        return model
    if isinstance(model, TrainedModel):
        if centre is not None:
            raise ReconError("a model trained by nn-recon starts from its own training mean; drop the centre")
        return AttackTarget(
            model.network,
            model.architecture.input_shape,
            len(model.classes),
            model.mean,
            model.config.get("weight_decay") or None,
            _weights_digest(model.network, source),
        )
    if not isinstance(model, nn.Module):
        raise ReconError(f"the attack takes an nn.Module or a TrainedModel, not a {type(model).__name__}")
    # No dropout, batch norm from its running statistics; a torch.export module's mode was fixed when
    # it was exported (and its eval() raises).
    with contextlib.suppress(NotImplementedError):
        model.eval()
    shape = tuple(int(s) for s in input_shape) if input_shape else infer_input_shape(model)
    if num_classes is not None:
        require_at_least(2, classes=num_classes)
    classes = check_classes(output_width(model, shape), num_classes)
    identity = _weights_digest(model, source)
    if centre is None:
        return AttackTarget(model, shape, classes, np.zeros(shape, np.float32), None, identity)
    mean = np.asarray(centre, np.float32)
    if mean.shape != shape or not np.all((mean >= 0) & (mean <= 1)):  # NaN (no images) fails too
        raise ReconError(
            f"the centre must be one image of the network's input shape {shape} with pixels in [0, 1], "
            f"got shape {mean.shape}; pass a non-empty set of images of the training data's size and range"
        )
    identity = hashlib.sha256(identity.encode() + mean.tobytes()).hexdigest()
    return AttackTarget(Recentred(model, mean), shape, classes, mean, None, identity)


@dataclass(frozen=True)
class StationarityResult:
    """The selected reconstruction, every run's own measure, and the runs that diverged."""

    measure: WeightedMeasure
    runs: list[WeightedMeasure]
    diverged: list[int]


class RunStore(Protocol):
    """Where the attack keeps its finished runs and the state of the batch it is optimising, so that a
    stopped attack resumes; :class:`nn_recon.pipeline.RunFolder` keeps them in the --out folder.
    A batch is named by its first run's index."""

    def open(self, target: AttackTarget, config: StationarityConfig) -> None:
        """Called once the input is checked, before anything is read: refuse another attack's runs."""

    def finished_run(self, index: int) -> WeightedMeasure | None: ...

    def save_run(self, index: int, run: WeightedMeasure) -> None: ...

    def batch_state(self, first: int, device: torch.device) -> dict[str, Any] | None: ...

    def save_batch_state(self, first: int, state: dict[str, Any]) -> None: ...

    def drop_batch_state(self, first: int) -> None: ...


def candidate_labels(points: int, num_classes: int) -> np.ndarray:
    """Class indices for ``points`` candidates, split as evenly as possible, in blocks."""
    if points < num_classes:
        raise ReconError(
            f"--points {points} is smaller than the {num_classes} classes; use at least {num_classes}"
        )
    return (np.arange(points) * num_classes // points).astype(np.int64)


def _point_scores(outputs: torch.Tensor, labels: torch.Tensor, objective: str) -> torch.Tensor:
    if objective == "kkt":
        return margins(outputs, labels)
    if outputs.shape[-1] == 1:
        return -F.softplus(-margins(outputs, labels))
    return -F.cross_entropy(outputs, labels, reduction="none")


class StationarityLoss:
    """``loss(x, λ, β)`` for one run (candidates centred by the data mean), and its batched gradient."""

    def __init__(
        self,
        model: TrainedModel | nn.Module | AttackTarget,
        labels: torch.Tensor,
        objective: str,
        weight_decay: float | None,
    ):
        check_objective(objective)
        target = as_target(model)
        self.network = target.network
        self.params = {name: p.detach() for name, p in target.network.named_parameters()}
        self.labels = labels
        self.objective = objective
        if objective == "posterior":
            weight_decay = weight_decay if weight_decay is not None else target.weight_decay
            if not weight_decay:
                raise ReconError(
                    "the posterior objective needs the weight decay the model was trained with; "
                    "pass --weight-decay"
                )
        self.prior_scale = 1.0 if objective == "kkt" else float(weight_decay)
        self.prior_norm = self.prior_scale**2 * sum(p.square().sum() for p in self.params.values())

    def _score_grad(self, x: torch.Tensor, lam: torch.Tensor, beta: torch.Tensor) -> dict[str, torch.Tensor]:
        """∇_θ Σ_i λ_i s_i(θ; x_i): one backward pass through the weighted sum of scores."""

        def weighted_score(params: dict[str, torch.Tensor]) -> torch.Tensor:
            with SurrogateReLU(beta):
                outputs = functional_call(self.network, params, (x,))
            return (lam * _point_scores(outputs, self.labels, self.objective)).sum()

        return grad(weighted_score)(self.params)

    def _scale(self, score_grad: dict[str, torch.Tensor], points: int) -> torch.Tensor | float:
        if self.objective == "posterior":
            return 1.0 / points
        inner = sum((self.prior_scale * self.params[k] * g).sum() for k, g in score_grad.items())
        return inner / sum(g.square().sum() for g in score_grad.values()).clamp_min(1e-30)

    def _residual(
        self, score_grad: dict[str, torch.Tensor], points: int
    ) -> tuple[torch.Tensor | float, dict[str, torch.Tensor]]:
        """The scale a and the residual r = ∇R(θ) − a·G, per parameter."""
        scale = self._scale(score_grad, points)
        return scale, {k: self.prior_scale * self.params[k] - scale * g for k, g in score_grad.items()}

    def _value(
        self,
        scale: torch.Tensor | float,
        residual: dict[str, torch.Tensor],
        score_grad: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """‖r‖²/‖∇R‖², plus 2a²‖G‖²/‖∇R‖² where the scale a is negative.

        With a < 0 the margins' negatives fit θ, which is no KKT point (λ ≥ 0), yet the plain loss
        1 − cos²(∇R, G) rewards it as much as a > 0 and runs that start there stay there. Reflected,
        it is 1 + cos², whose gradient −2|a|∇⟨r, G⟩/‖∇R‖² (the same form as for a > 0) leads back.
        """
        value = sum(r.square().sum() for r in residual.values())
        if self.objective == "kkt":
            value = value + 2 * scale.clamp(max=0).square() * sum(
                g.square().sum() for g in score_grad.values()
            )
        return value / self.prior_norm

    def __call__(self, x: torch.Tensor, lam: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        score_grad = self._score_grad(x, lam, beta)
        return self._value(*self._residual(score_grad, len(lam)), score_grad)

    def value_and_grad(
        self, x: torch.Tensor, lam: torch.Tensor, beta: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The loss of each run (leading axis of x, λ, β) and its gradients wrt x and λ.

        The scale a minimises the loss (or is fixed), so by the envelope theorem the gradient at a
        held fixed is exact: ∇loss = −2|a| ∇⟨r, G(x, λ)⟩ / ‖∇R‖², r the residual, G = ∇_θ Σ λ_i s_i.
        That is one backward pass through G and none through a. Runs go one at a time: on a CPU,
        ``vmap`` over runs was slower per run than this loop.
        """
        values, grads_x, grads_lam = [], [], []
        for run_x, run_lam, run_beta in zip(x, lam, beta, strict=True):
            run_x, run_lam = run_x.detach().requires_grad_(), run_lam.detach().requires_grad_()
            with torch.enable_grad():
                score_grad = self._score_grad(run_x, run_lam, run_beta)
                with torch.no_grad():
                    scale, residual = self._residual(score_grad, len(run_lam))
                    values.append(self._value(scale, residual, score_grad))
                inner = sum((residual[k] * g).sum() for k, g in score_grad.items())
                grad_x, grad_lam = torch.autograd.grad(inner, (run_x, run_lam))
            factor = -2 * abs(scale) / self.prior_norm
            grads_x.append(factor * grad_x)
            grads_lam.append(factor * grad_lam)
        return (torch.stack(grads_x), torch.stack(grads_lam)), torch.stack(values)

    def weight_scale(self, x: torch.Tensor, lam: torch.Tensor, beta: torch.Tensor) -> float:
        """The factor a that turns one run's λ into the weights of its measure."""
        return max(float(self._scale(self._score_grad(x, lam, beta), len(lam))), 0.0)


class _Adam:
    """Adam with one learning rate per run (the leading axis), state kept as plain tensors."""

    def __init__(self, shapes: list[torch.Tensor], lrs: list[torch.Tensor]):
        self.lrs = lrs
        self.first = [torch.zeros_like(t) for t in shapes]
        self.second = [torch.zeros_like(t) for t in shapes]
        self.count = 0

    def step(self, tensors: list[torch.Tensor], grads: list[torch.Tensor], beta1=0.9, beta2=0.999) -> None:
        self.count += 1
        for t, g, m, v, lr in zip(tensors, grads, self.first, self.second, self.lrs, strict=True):
            m.mul_(beta1).add_(g, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            m_hat = m / (1 - beta1**self.count)
            v_hat = v / (1 - beta2**self.count)
            t.sub_(lr.view(-1, *[1] * (t.ndim - 1)) * m_hat / (v_hat.sqrt() + 1e-12))

    def state(self) -> dict:
        return {"first": self.first, "second": self.second, "count": self.count}

    def load(self, state: dict) -> None:
        self.first, self.second, self.count = list(state["first"]), list(state["second"]), state["count"]


def _optimise_batch(
    loss: StationarityLoss,
    settings: list[RunSettings],
    config: StationarityConfig,
    target: AttackTarget,
    store: RunStore | None,
    on_step: Callable[[int, torch.Tensor], None] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """Optimise the runs in ``settings`` together; returns x, λ, β, final losses and diverged indices."""
    params = next(iter(loss.params.values()))
    device, dtype = params.device, params.dtype
    shape = (len(settings), config.points, *target.input_shape)
    mean = torch.as_tensor(target.mean, dtype=dtype, device=device)

    def per_run(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    x = torch.stack([_initial_images(s, config, shape[2:], dtype) for s in settings]).to(device)
    x = torch.minimum(torch.maximum(x, -mean), 1 - mean)
    lam = torch.stack(
        [
            torch.rand(config.points, generator=torch.Generator().manual_seed(s.index), dtype=dtype)
            for s in settings
        ]
    ).to(device)
    lam_min = per_run([s.lambda_min for s in settings])[:, None]
    lam = torch.maximum(lam, lam_min)
    beta = per_run([s.beta for s in settings])
    lr = per_run([s.lr for s in settings])
    optimiser = _Adam([x, lam], [lr, lr * config.lambda_lr_factor])
    stopped = torch.zeros(len(settings), dtype=torch.bool, device=device)
    losses = torch.full((len(settings),), math.nan, dtype=dtype, device=device)
    start, indices = 0, [s.index for s in settings]
    state = store.batch_state(indices[0], device) if store else None
    if state is not None and state.get("runs") == indices:  # a batch of other runs (--runs changed) restarts
        x, lam, stopped, losses = state["x"], state["lam"], state["stopped"], state["losses"]
        start = state["step"]
        optimiser.load(state["adam"])
    for step in progress(range(start, config.steps), config.steps - start, f"runs {settings[0].index}+"):
        (grad_x, grad_lam), values = loss.value_and_grad(x, lam, beta)
        finite = (
            torch.isfinite(values)
            & torch.isfinite(grad_x).flatten(1).all(1)
            & torch.isfinite(grad_lam).all(1)
        )
        stopped |= ~finite
        losses = torch.where(stopped, losses, values)
        keep = (~stopped).to(dtype)
        grad_x = torch.nan_to_num(grad_x) * keep.view(-1, 1, 1, 1, 1)
        grad_lam = torch.nan_to_num(grad_lam) * keep[:, None]
        optimiser.step([x, lam], [grad_x, grad_lam])
        x = torch.minimum(torch.maximum(x, -mean), 1 - mean)
        lam = torch.maximum(lam, lam_min)
        if on_step:
            on_step(step, values)
        if store and (step + 1) % config.checkpoint_every == 0 and step + 1 < config.steps:
            state = {"x": x, "lam": lam, "stopped": stopped, "losses": losses, "step": step + 1}
            store.save_batch_state(indices[0], {**state, "adam": optimiser.state(), "runs": indices})
    losses = torch.where(stopped, losses, vmap(loss)(x, lam, beta))
    diverged = [s.index for s, bad in zip(settings, stopped.tolist(), strict=True) if bad]
    return x, lam, beta, losses, diverged


def _initial_images(settings: RunSettings, config: StationarityConfig, shape: tuple, dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + settings.index)
    return settings.init_scale * torch.randn(config.points, *shape, generator=generator, dtype=dtype)


def stationary_points(
    model: TrainedModel | nn.Module | AttackTarget,
    config: StationarityConfig = StationarityConfig(),
    store: RunStore | None = None,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
) -> StationarityResult:
    """Run the attack on ``model`` and return the selected reconstruction.

    ``model`` is a model trained by nn-recon, any classifier ``nn.Module`` taking images in [0, 1]
    (its input shape and class count read from it; pass :func:`as_target` of it to give them), or
    an :class:`AttackTarget`. The network is moved to ``config.device`` and ``config.dtype``.
    With a ``store``, every finished run and the state of a batch in progress are kept there;
    calling again with the same store skips finished runs and resumes the batch.
    """
    device, dtype = resolve_device(config.device), resolve_dtype(config.dtype)
    target = as_target(model)
    labels_np = candidate_labels(config.points, target.num_classes)
    if store:
        store.open(target, config)
    target.network.to(device, dtype)
    labels = torch.as_tensor(labels_np, device=device)
    loss = StationarityLoss(target, labels, config.objective, config.weight_decay)
    measures: dict[int, WeightedMeasure] = {}
    diverged: list[int] = []
    pending = []
    for index in range(config.runs):
        finished = store.finished_run(index) if store else None
        if finished is None:
            pending.append(RunSettings.draw(config, index))
        else:
            measures[index] = finished
    mean = target.mean[None]
    for start in range(0, len(pending), config.runs_per_batch):
        batch = pending[start : start + config.runs_per_batch]
        started = time.perf_counter()
        x, lam, beta, losses, bad = _optimise_batch(loss, batch, config, target, store, on_step)
        seconds = (time.perf_counter() - started) / len(batch)
        diverged += bad
        for i, run in enumerate(batch):
            if run.index in bad:
                continue
            scale = loss.weight_scale(x[i], lam[i], beta[i])
            measures[run.index] = WeightedMeasure(
                {"image": (x[i].cpu().numpy() + mean).clip(0, 1), "label": labels_np},
                (scale * lam[i]).cpu().numpy(),
                {**asdict(run), "loss": float(losses[i]), "seconds": seconds, "objective": config.objective},
            )
            if store:
                store.save_run(run.index, measures[run.index])
        if store:
            store.drop_batch_state(batch[0].index)
    runs = [measures[i] for i in sorted(measures)]
    if not runs:
        raise ReconError(f"all {config.runs} runs diverged (NaN loss); lower the --lr range and run again")
    return StationarityResult(select(runs, config), runs, diverged)


def select(runs: list[WeightedMeasure], config: StationarityConfig) -> WeightedMeasure:
    """Pool the runs; drop points whose weight is below ``prune_fraction`` of their run's largest,
    and points with a heavier near-duplicate (NCC at or above ``duplicate_ncc``) of the same class."""
    kept = [run.weights > config.prune_fraction * run.weights.max() for run in runs]
    images = np.concatenate([run.points["image"][k] for run, k in zip(runs, kept, strict=True)])
    labels = np.concatenate([run.points["label"][k] for run, k in zip(runs, kept, strict=True)])
    weights = np.concatenate([run.weights[k] for run, k in zip(runs, kept, strict=True)])
    run_of_point = np.concatenate(
        [np.full(int(k.sum()), run.meta["index"]) for run, k in zip(runs, kept, strict=True)]
    )
    order = np.argsort(-weights, kind="stable")
    images, labels, weights, run_of_point = images[order], labels[order], weights[order], run_of_point[order]
    duplicate = np.zeros(len(order), dtype=bool)
    for start in range(0, len(order), 1024):  # blocks keep the NCC matrix small for many runs
        block = slice(start, start + 1024)
        similarity = pairwise_ncc(images[block], images[: start + 1024])
        heavier = (
            np.arange(similarity.shape[1])[None, :] < np.arange(start, start + similarity.shape[0])[:, None]
        )
        same_class = labels[block, None] == labels[None, : start + 1024]
        duplicate[block] = np.any((similarity >= config.duplicate_ncc) & heavier & same_class, axis=1)
    unique = ~duplicate
    meta = {
        "attack": "stationarity",
        "config": asdict(config),
        "runs": [dict(run.meta) for run in runs],
        "run_of_point": run_of_point[unique],
    }
    return WeightedMeasure({"image": images[unique], "label": labels[unique]}, weights[unique], meta)
