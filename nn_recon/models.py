"""Target networks of the attack papers' shape, written once for training, batching and double-backward.

MLPs and small CNNs with ReLU and a bias on the first layer only, so the network is positively
homogeneous in its parameters (the setting of the KKT conditions). Under :class:`SurrogateReLU`
every ReLU of any network (``nn.ReLU``, ``F.relu``, ``torch.relu``, ``aten.relu`` in an exported
program) keeps its values but differentiates as sigmoid(βz) (the derivative of softplus_β), which
the attack needs to differentiate through. Everything else goes through
:func:`torch.func.functional_call` with a parameter dict.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from recon_core.errors import ReconError

ARCHITECTURE_KINDS = ("mlp", "cnn")


@dataclass(frozen=True)
class Architecture:
    """A network: ``kind`` mlp (hidden widths) or cnn (conv channels, 3x3 stride 2), input shape, outputs.

    ``num_outputs`` is 1 for a binary task (the sign of the output is the class) and K for K classes.
    """

    kind: str
    widths: tuple[int, ...]
    input_shape: tuple[int, int, int]
    num_outputs: int

    def __post_init__(self) -> None:
        if self.kind not in ARCHITECTURE_KINDS:
            raise ReconError(f"unknown architecture {self.kind!r}; choose one of {ARCHITECTURE_KINDS}")
        if not self.widths or min(self.widths) < 1:
            raise ReconError(f"architecture widths must be positive integers, got {self.widths}")
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))

    @classmethod
    def parse(cls, spec: str, input_shape: tuple[int, int, int], num_outputs: int) -> Architecture:
        """From ``"mlp:1000,1000"`` or ``"cnn:16,32"``."""
        kind, _, widths = spec.partition(":")
        try:
            parsed = tuple(int(w) for w in widths.split(",")) if widths else ()
        except ValueError:
            parsed = None
        if parsed is None or not parsed:
            raise ReconError(f"architecture {spec!r} must look like mlp:1000,1000 or cnn:16,32")
        return cls(kind, parsed, input_shape, num_outputs)

    @property
    def spec(self) -> str:
        return f"{self.kind}:{','.join(map(str, self.widths))}"

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "widths": list(self.widths),
            "input_shape": list(self.input_shape),
            "num_outputs": self.num_outputs,
        }

    @classmethod
    def from_dict(cls, values: dict) -> Architecture:
        return cls(
            values["kind"], tuple(values["widths"]), tuple(values["input_shape"]), values["num_outputs"]
        )


def relu_with_surrogate_gradient(z: torch.Tensor, beta: torch.Tensor | float | None) -> torch.Tensor:
    """ReLU's values; if ``beta`` is given, the gradient sigmoid(βz) of softplus_β (twice differentiable)."""
    if beta is None:
        return F.relu(z)
    smooth = F.softplus(z * beta) / beta
    return F.relu(z).detach() + (smooth - smooth.detach())


_RELUS = {F.relu, torch.relu, torch.relu_, torch.Tensor.relu, torch.Tensor.relu_}
_RELUS |= {torch.ops.aten.relu.default, torch.ops.aten.relu_.default}  # in exported programs


class SurrogateReLU(TorchFunctionMode):
    """Within ``with SurrogateReLU(beta):`` every ReLU call is :func:`relu_with_surrogate_gradient`
    (out of place, also for ``inplace=True``), whatever module or function makes it."""

    def __init__(self, beta: torch.Tensor | float) -> None:
        super().__init__()
        self.beta = beta

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _RELUS:
            return relu_with_surrogate_gradient(args[0], self.beta)
        return func(*args, **(kwargs or {}))


class Network(nn.Module):
    """An MLP or CNN of :class:`Architecture`; bias on the first layer only, ReLU between layers."""

    def __init__(self, architecture: Architecture) -> None:
        super().__init__()
        self.architecture = architecture
        channels, height, width = architecture.input_shape
        layers: list[nn.Module] = []
        if architecture.kind == "mlp":
            sizes = [channels * height * width, *architecture.widths]
            for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
                layers.append(nn.Linear(fan_in, fan_out, bias=i == 0))
            flat = sizes[-1]
        else:
            sizes = [channels, *architecture.widths]
            for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
                layers.append(nn.Conv2d(fan_in, fan_out, 3, stride=2, padding=1, bias=i == 0))
                height, width = math.ceil(height / 2), math.ceil(width / 2)
            flat = sizes[-1] * height * width
        self.hidden = nn.ModuleList(layers)
        self.readout = nn.Linear(flat, architecture.num_outputs, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs (n, num_outputs) of images (n, C, H, W)."""
        h = x.flatten(1) if self.architecture.kind == "mlp" else x
        for layer in self.hidden:
            h = F.relu(layer(h))
        return self.readout(h.flatten(1))

    def scale_first_layer(self, factor: float) -> None:
        """Shrink the first layer at initialisation, as the attack papers do (their "small init")."""
        with torch.no_grad():
            for p in self.hidden[0].parameters():
                p.mul_(factor)


def build_network(architecture: Architecture, seed: int, first_layer_scale: float = 1.0) -> Network:
    """A freshly initialised network, reproducible from ``seed``."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        network = Network(architecture)
    finally:
        torch.random.set_rng_state(generator_state)
    network.scale_first_layer(first_layer_scale)
    return network


def margins(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The quantity a correct classifier makes positive: y·Φ (binary, y = ±1) or Φ_y − max_{j≠y} Φ_j."""
    if outputs.shape[-1] == 1:
        return (2 * labels - 1).to(outputs.dtype) * outputs[..., 0]
    own = outputs.gather(-1, labels[..., None])[..., 0]
    others = outputs.masked_fill(F.one_hot(labels, outputs.shape[-1]).bool(), -torch.inf)
    return own - others.amax(-1)


def predict(outputs: torch.Tensor) -> torch.Tensor:
    """Class indices from outputs: the sign for one output, the argmax for several."""
    return (outputs[..., 0] > 0).long() if outputs.shape[-1] == 1 else outputs.argmax(-1)


def class_logits(outputs: torch.Tensor) -> torch.Tensor:
    """One logit per class: K outputs as they are, a binary network's one output z as (−z/2, z/2),
    whose softmax (1 − σ(z), σ(z)) is the probability the sign of z stands for."""
    return torch.cat([-outputs / 2, outputs / 2], -1) if outputs.shape[-1] == 1 else outputs


# Model inversion (GMI / KEDMI with LOMMA) reads the features the readout sees.

_LINEARS = {F.linear, torch.ops.aten.linear.default}  # nn.Linear, and a linear layer in an exported program


class _LastLinearInput(TorchFunctionMode):
    """Within ``with _LastLinearInput() as seen:``, ``seen.features`` is the input of the last linear
    layer called, whatever module or exported program calls it."""

    def __init__(self) -> None:
        super().__init__()
        self.features: torch.Tensor | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _LINEARS:
            self.features = args[0]
        return func(*args, **(kwargs or {}))


def outputs_and_features(network: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The network's outputs and its penultimate features: the input of the last linear layer it
    calls, flattened (for a :class:`Network`, what ``network.readout`` reads). A network that calls
    no linear layer has none: a clear error."""
    with _LastLinearInput() as seen:
        outputs = network(x)
    if seen.features is None:
        raise ReconError(
            "the network calls no linear layer, so it has no penultimate features: LOM needs the "
            "target's (use --loss ce or ma), the KNN distance the evaluation model's"
        )
    return outputs, seen.features.flatten(1)


def penultimate(network: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The penultimate features of :func:`outputs_and_features`."""
    return outputs_and_features(network, x)[1]
