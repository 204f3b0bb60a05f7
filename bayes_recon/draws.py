"""Posterior draws in, as {site: (S, ...) array}: a dict, a NumPyro MCMC, ArviZ, a pandas DataFrame,
posteriordb's reference draws, or Stan names.

Stan names (``beta[1]``, ``sigma``, ``Omega[2,3]``, or CmdStan's CSV spelling ``beta.1``,
``Omega.2.3``) are 1-based and flattened; they are mapped to NumPyro sites by name and index.
Chains are concatenated, also where a dict keeps them apart (chain, draw, ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from bayes_recon.posteriordb import chains_to_draws
from recon_core.errors import ReconError

_STAN_NAME = re.compile(r"^(?P<site>[^\[\]]+?)(\[(?P<index>[0-9, ]+)\]|\.(?P<dotted>[0-9]+(\.[0-9]+)*))?$")


def as_draws(source: Any) -> dict[str, np.ndarray]:
    """Draws from a dict, a NumPyro ``MCMC``, an ArviZ ``InferenceData`` or ``DataTree``, a pandas
    ``DataFrame`` of one column per Stan name (CmdStanPy's ``draws_pd()``), or posteriordb's reference
    draws: the list of chains its ``Posterior.reference_draws()`` returns, or that ``Posterior``."""
    if hasattr(source, "get_samples"):  # numpyro.infer.MCMC
        return {k: np.asarray(v) for k, v in source.get_samples().items()}
    if callable(getattr(source, "reference_draws", None)):  # posteriordb's Posterior
        source = source.reference_draws()
    if isinstance(source, (list, tuple)):
        return group_stan_names(chains_to_draws(list(source), "the draws (a list of chains)"))
    if hasattr(source, "columns") and hasattr(source, "to_numpy"):  # a pandas DataFrame
        columns = {str(c): np.asarray(source[c].to_numpy()) for c in source.columns}
        held = [c for c, v in columns.items() if v.dtype == object]
        if held:
            raise ReconError(
                f"the DataFrame's column(s) {held[:5]} hold objects, not one number per draw (a DataFrame "
                "made from posteriordb's chains holds a chain's list in each cell); pass one row per draw, "
                "or the list of chains itself"
            )
        return group_stan_names(columns)
    posterior = _arviz_posterior(source)
    if posterior is not None:
        out = {}
        for name, var in posterior.data_vars.items():
            values = np.asarray(var.values)  # (chain, draw, ...)
            out[str(name)] = values.reshape((-1, *values.shape[2:]))
        return group_stan_names(out)
    if isinstance(source, Mapping):
        return group_stan_names({str(k): np.asarray(v) for k, v in source.items()})
    raise ReconError(
        f"cannot read posterior draws from a {type(source).__name__}; pass a dict of arrays "
        "(MCMC.get_samples()), a NumPyro MCMC, an ArviZ InferenceData/DataTree, a pandas DataFrame or "
        "posteriordb's reference draws (a list of chains)"
    )


def group_stan_names(arrays: dict[str, np.ndarray], what: str = "draws") -> dict[str, np.ndarray]:
    """Stan-named arrays (``beta[1]``, ``beta.1``) grouped into sites, if any name has an index."""
    if any((m := _STAN_NAME.match(k)) and (m["index"] or m["dotted"]) for k in arrays):
        return from_stan_names(arrays, what)
    return arrays


def _arviz_posterior(source: Any) -> Any:
    """The posterior group as an xarray Dataset, for arviz 0.2x InferenceData and 1.x DataTree."""
    group = None
    if hasattr(source, "groups") and callable(getattr(source, "groups", None)):
        if "posterior" in source.groups():
            group = source.posterior
    elif hasattr(source, "children") and "posterior" in getattr(source, "children", {}):
        group = source["posterior"]
    if group is None:
        return None
    return group.to_dataset() if hasattr(group, "to_dataset") else group


def from_stan_names(draws: Mapping[str, np.ndarray], what: str = "draws") -> dict[str, np.ndarray]:
    """{"beta[1]": (S,), "beta[2]": (S,), "sigma": (S,)} → {"beta": (S, 2), "sigma": (S,)}; also
    ``beta.1``, ``beta.2`` (CmdStan CSV headers)."""
    grouped: dict[str, dict[tuple[int, ...], np.ndarray]] = {}
    for name, values in draws.items():
        match = _STAN_NAME.match(name)
        if match is None:
            raise ReconError(
                f"cannot read the parameter name {name!r} of the {what}; expected e.g. 'beta[1]' or 'sigma'"
            )
        written = match["index"] or match["dotted"]
        index = tuple(int(i) - 1 for i in re.split(r"[,.]", written)) if written else ()
        if any(i < 0 for i in index):
            raise ReconError(f"the name {name!r} of the {what} has index 0; Stan names count from 1")
        try:
            values = np.asarray(values, dtype=float)
        except (TypeError, ValueError) as err:
            raise ReconError(f"the {what} of {name!r} are not all numbers ({err})") from None
        if index and values.ndim != 1:
            raise ReconError(
                f"the {what} of {name!r} have shape {values.shape}; an indexed Stan name holds one number "
                "per draw"
            )
        grouped.setdefault(match["site"], {})[index] = values
    out = {}
    for site, parts in grouped.items():
        if list(parts) == [()]:
            out[site] = parts[()]
            continue
        shape = tuple(max(i[d] for i in parts) + 1 for d in range(len(next(iter(parts)))))
        missing = sorted(set(np.ndindex(shape)) - set(parts))
        if missing:
            names = ", ".join(f"{site}[{','.join(str(i + 1) for i in index)}]" for index in missing[:5])
            more = " ..." if len(missing) > 5 else ""
            raise ReconError(f"the {what} of {site!r} miss some indices of its shape {shape}: {names}{more}")
        n = len(next(iter(parts.values())))
        array = np.empty((n, *shape))
        for index, values in parts.items():
            array[(slice(None), *index)] = values
        out[site] = array
    return out


def chains_flattened(
    draws: Mapping[str, np.ndarray], expected: Mapping[str, tuple[int, ...]]
) -> Mapping[str, np.ndarray]:
    """Draws kept by chain, (chain, draw, ...) as ``MCMC.get_samples(group_by_chain=True)`` gives them,
    as (chain·draw, ...): where every site has the model's shape after the same two leading sizes."""
    arrays = {k: np.asarray(draws[k]) for k in expected}
    leading = {v.shape[:2] for v in arrays.values()}
    if len(leading) != 1 or not all(
        v.shape[2:] == tuple(expected[k]) and v.ndim >= 2 for k, v in arrays.items()
    ):
        return draws
    return {**draws, **{k: v.reshape((-1, *v.shape[2:])) for k, v in arrays.items()}}


def check_draws(
    draws: Mapping[str, np.ndarray], expected: Mapping[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """Validate draws against the model's latent sites and their shapes; keep only those sites."""
    missing = [k for k in expected if k not in draws]
    if missing:
        raise ReconError(
            f"the draws lack the model's latent site(s) {missing}; they have {sorted(draws)}. "
            "Are these draws from this model? (Stan names like 'beta[1]' are mapped to the site 'beta'.)"
        )
    draws = chains_flattened(draws, expected)
    n_draws = {len(np.atleast_1d(draws[k])) for k in expected}
    if len(n_draws) != 1:
        raise ReconError(f"the sites have different numbers of draws: {n_draws}; flatten chains the same way")
    if n_draws == {0}:
        raise ReconError("the draws are empty (0 draws); the attack needs posterior draws (hundreds or more)")
    out = {}
    for site, shape in expected.items():
        values = np.asarray(draws[site], dtype=float)
        if values.shape[1:] != tuple(shape):
            raise ReconError(
                f"site {site!r} has draws of shape {values.shape[1:]} per draw but the model's "
                f"{site!r} has shape {tuple(shape)}"
            )
        bad = ~np.isfinite(values)
        if bad.any():
            rows = np.unique(np.nonzero(bad.reshape(len(values), -1))[0])
            first = np.argwhere(bad)[0]
            # the element as Stan and posteriordb name it; the draw as NumPy counts it
            element = ",".join(str(i + 1) for i in first[1:])
            where = f"{site}[{element}] (indices from 1)" if len(first) > 1 else site
            raise ReconError(
                f"site {site!r} has {len(rows)} draw(s) with NaN or inf (first at draw {rows[0]}: "
                f"{where} = {values[tuple(first)]}); drop those draws (or check the sampler's "
                "diagnostics) and try again"
            )
        # Only a whole site: some entries of a constrained value never move (a Cholesky factor's first row).
        # A parameter that does not vary in the unconstrained space is refused by prepare_release.
        if len(values) > 1 and (np.ptp(values.reshape(len(values), -1), axis=0) == 0).all():
            raise ReconError(
                f"site {site!r} has the same value in every draw. The attack reads the data "
                "from how the posterior draws vary, so it needs draws from the posterior (MCMC), "
                "not a point estimate repeated; for a single released θ see nn_recon's stationarity "
                "attack (the Dirac-posterior case)."
            )
        out[site] = values
    if next(iter(n_draws)) < 10:
        raise ReconError(f"only {next(iter(n_draws))} draws; the divergence needs many (hundreds or more)")
    return out


def spread_rows(n_draws: int, most: int) -> np.ndarray:
    """Up to ``most`` of ``n_draws`` rows, evenly spread (over the chains, stored one after another)."""
    return np.linspace(0, n_draws - 1, min(n_draws, most)).round().astype(int)
