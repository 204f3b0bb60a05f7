"""Networks the user brings: a module from their Python file plus a state_dict, or a torch.export program.

``FILE.py:NAME`` imports FILE.py (this RUNS the file's code, as ``import`` does) and takes NAME, a
class or factory called with no arguments that returns an ``nn.Module``; its weights are a state_dict
read with ``torch.load(weights_only=True)`` (never code). A ``.pt2`` file written by
``torch.export.save`` holds the graph and the weights and runs none of the user's code.

The input shape and the class count come from the caller where given, otherwise from the module: the
first Linear's ``in_features`` (a square one-channel image) or an exported program's example input,
and the width of its output on two zero images (one logit: two classes).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sys
from pathlib import Path

import torch
from torch import nn

from nn_recon.checkpoint import load_torch_file, load_weights
from recon_core.errors import ReconError


def file_digest(*paths: str | Path) -> str:
    """SHA-256 of the files' bytes, in order: what the --out fingerprint records of the model."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def _import_file(path: Path) -> object:
    name = f"nn_recon_user_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ReconError(f"{path} cannot be imported as Python; pass --model FILE.py:NAME")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise ReconError(f"importing {path} failed ({type(error).__name__}: {error}); fix the file") from None
    return module


def is_user_network(model: str) -> bool:
    """Whether ``--model`` names the user's network: a .pt2, or FILE.py:NAME."""
    return model.endswith(".pt2") or model.rpartition(":")[0].endswith(".py")


def load_user_network(spec: str, weights: str | Path) -> nn.Module:
    """``FILE.py:NAME`` built with no arguments, with the state_dict in ``weights`` loaded into it."""
    file, _, name = spec.rpartition(":")
    path = Path(file)
    if not file or not name or path.suffix != ".py":
        raise ReconError(f"--model {spec!r} must be FILE.py:NAME (a class or factory in FILE.py), or a .pt2")
    if not path.is_file():
        raise ReconError(f"model source {path} does not exist")
    weights = Path(weights)
    if not weights.is_file():
        raise ReconError(f"weights file {weights} does not exist; pass the state_dict saved with torch.save")
    factory = getattr(_import_file(path), name, None)
    if factory is None or not callable(factory):
        raise ReconError(f"{path} defines no class or function named {name!r}")
    try:
        network = factory()
    except Exception as error:
        raise ReconError(
            f"{spec}() failed ({type(error).__name__}: {error}); "
            "NAME must build the network when called with no arguments"
        ) from None
    if not isinstance(network, nn.Module):
        raise ReconError(f"{spec}() returned a {type(network).__name__}, not a torch.nn.Module")
    state = load_torch_file(weights, "a state_dict", "save network.state_dict() with torch.save")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ReconError(f"{weights} is not a state_dict (a dict of tensors); save network.state_dict()")
    try:
        load_weights(network, state, weights)
    except RuntimeError as error:
        first = str(error).strip().splitlines()
        raise ReconError(
            f"{weights} does not fit {spec}: {' '.join(line.strip() for line in first[:3])}; "
            "pass the weights saved from this network"
        ) from None
    return network.eval()


def load_exported(path: str | Path) -> tuple[nn.Module, tuple[int, ...]]:
    """The module of a ``torch.export`` program and the (C, H, W) of its example input."""
    path = Path(path)
    if not path.is_file():
        raise ReconError(f"exported program {path} does not exist")
    try:
        program = torch.export.load(path)
    except Exception as error:
        raise ReconError(
            f"{path} is not a program saved by torch.export.save ({type(error).__name__}); export it again"
        ) from None
    inputs = program.graph_signature.user_inputs
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    value = placeholders[inputs[0]].meta.get("val") if inputs and inputs[0] in placeholders else None
    if value is None or len(value.shape) < 2:
        raise ReconError(f"{path} takes no image batch as its first input; export network(images)")
    if isinstance(value.shape[0], int):
        raise ReconError(
            f"{path} was exported for a fixed batch of {value.shape[0]}; export it with "
            'dynamic_shapes=({0: torch.export.Dim("batch")},) so that it takes any number of images'
        )
    return program.module(), tuple(int(s) for s in value.shape[1:])


def infer_input_shape(network: nn.Module) -> tuple[int, int, int]:
    """(1, s, s) when the first parametrised layer is a Linear of s² inputs; else a clear error."""
    layers = [m for m in network.modules() if next(m.parameters(recurse=False), None) is not None]
    first = layers[0] if layers else None
    side = math.isqrt(first.in_features) if isinstance(first, nn.Linear) else 0
    if not side or side * side != first.in_features:
        raise ReconError("the network's input shape cannot be read from it; pass --input-shape C,H,W")
    return (1, side, side)


def output_width(network: nn.Module, input_shape: tuple[int, ...]) -> int:
    """How many logits ``network`` gives per image, from two zero images of ``input_shape``."""
    parameter = next(network.parameters(), None)
    if parameter is None:
        raise ReconError("the network has no parameters to attack")
    x = torch.zeros(2, *input_shape, dtype=parameter.dtype, device=parameter.device)
    try:
        with torch.no_grad():
            outputs = network(x)
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise ReconError(
            f"the network does not take images of shape {tuple(input_shape)} ({type(error).__name__}: "
            f"{first_line}); pass its --input-shape C,H,W"
        ) from None
    if not isinstance(outputs, torch.Tensor) or outputs.ndim != 2 or len(outputs) != 2:
        shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
        raise ReconError(
            f"the network gives {shape} for 2 images, not (2, logits); make its forward return the logits"
        )
    return outputs.shape[1]


def check_classes(width: int, num_classes: int | None) -> int:
    """The class count: ``num_classes`` if given, else the logits' (one logit: two classes); a
    count the logits do not fit is a clear error."""
    classes = num_classes or max(2, width)
    if width != classes and not (width == 1 and classes == 2):
        raise ReconError(
            f"the network gives {width} logit(s) per image, which do not fit --classes {classes}; "
            "pass the class count it was trained for (one logit or two for two classes)"
        )
    return classes
