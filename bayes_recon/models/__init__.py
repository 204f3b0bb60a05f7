"""The model registry: posteriordb posterior name → NumPyro model, free and fixed data, supports.

For Gaussian linear regressions an entry also says which design the likelihood sees, so the
oracle (``bayes_recon.oracle``) and the linear-model statistics can be computed.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.constraints import Constraint

from bayes_recon.models import regression as m
from bayes_recon.pseudo import Dummy
from recon_core.errors import ReconError

Columns = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class LinearGaussian:
    """y ~ Normal(X β, σ): ``design`` maps data columns to (X (n, p), y (n,)) as the likelihood sees them."""

    design: Callable[[Columns], tuple[np.ndarray, np.ndarray]]
    coefficients: Callable[[Mapping[str, Any]], Any] = lambda params: params["beta"]
    sigma: str = "sigma"


@dataclass(frozen=True)
class Entry:
    posterior: str
    model: Callable
    free: tuple[str, ...]
    support: Mapping[str, Constraint]
    fixed: tuple[str, ...] = ()
    prepare: Callable[[Mapping[str, Any]], dict[str, np.ndarray]] | None = None
    linear: LinearGaussian | None = None

    def model_data(self, raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """posteriordb's data dict → the model's keyword arguments (free and fixed)."""
        data = self.prepare(raw) if self.prepare else dict(raw)
        names = self.free + self.fixed
        missing = [n for n in names if n not in data]
        if missing:
            raise ReconError(
                f"the data of {self.posterior} lacks {missing}; is it the posterior's own data set?"
            )
        return {n: np.asarray(data[n], dtype=float) for n in names}


def _columns(*names: str) -> Callable[[Columns], tuple[np.ndarray, np.ndarray]]:
    """Design [1, names[:-1]...] and response names[-1]."""

    def design(c: Columns) -> tuple[np.ndarray, np.ndarray]:
        x = np.stack([np.ones(len(c[names[-1]]))] + [np.asarray(c[n], float) for n in names[:-1]], -1)
        return x, np.asarray(c[names[-1]], float)

    return design


def _kid_interaction(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    x, y = _columns("mom_hs", "mom_iq", "kid_score")(c)
    return np.concatenate([x, (c["mom_hs"] * c["mom_iq"])[:, None]], -1), y


def _mesquite(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    volume = np.log(c["diam1"] * c["diam2"] * c["canopy_height"])
    return np.stack([np.ones_like(volume), volume], -1), np.log(c["weight"])


def _nes_prepare(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    age = np.asarray(raw["age_discrete"])
    data = {k: np.asarray(v, float) for k, v in raw.items() if k != "age_discrete"}
    data.update(age30_44=(age == 2) * 1.0, age45_64=(age == 3) * 1.0, age65up=(age == 4) * 1.0)
    return data


def _blr_design(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(c["X"], float), np.asarray(c["y"], float)


REAL, POSITIVE, BINARY = constraints.real, constraints.positive, constraints.boolean
SCORE = constraints.interval(0.0, 200.0)  # Stan: vector<lower=0, upper=200>

ENTRIES: tuple[Entry, ...] = (
    Entry(
        "kidiq-kidscore_momiq",
        m.kidscore_momiq,
        ("mom_iq", "kid_score"),
        {"mom_iq": SCORE, "kid_score": SCORE},
        linear=LinearGaussian(_columns("mom_iq", "kid_score")),
    ),
    Entry(
        "kidiq-kidscore_momhs",
        m.kidscore_momhs,
        ("mom_hs", "kid_score"),
        {"mom_hs": BINARY, "kid_score": SCORE},
        linear=LinearGaussian(_columns("mom_hs", "kid_score")),
    ),
    Entry(
        "kidiq-kidscore_momhsiq",
        m.kidscore_momhsiq,
        ("mom_hs", "mom_iq", "kid_score"),
        {"mom_hs": BINARY, "mom_iq": SCORE, "kid_score": SCORE},
        linear=LinearGaussian(_columns("mom_hs", "mom_iq", "kid_score")),
    ),
    Entry(
        "kidiq-kidscore_interaction",
        m.kidscore_interaction,
        ("mom_hs", "mom_iq", "kid_score"),
        {"mom_hs": BINARY, "mom_iq": SCORE, "kid_score": SCORE},
        linear=LinearGaussian(_kid_interaction),
    ),
    Entry(
        "earnings-earn_height",
        m.earn_height,
        ("height", "earn"),
        {"height": POSITIVE, "earn": REAL},
        linear=LinearGaussian(_columns("height", "earn")),
    ),
    Entry(
        "kilpisjarvi_mod-kilpisjarvi",
        m.kilpisjarvi,
        ("x", "y"),
        {"x": REAL, "y": REAL},
        fixed=("pmualpha", "psalpha", "pmubeta", "psbeta"),
        linear=LinearGaussian(
            _columns("x", "y"), coefficients=lambda p: jnp.stack([p["alpha"], p["beta"]], -1)
        ),
    ),
    Entry(
        "mesquite-logmesquite_logvolume",
        m.logmesquite_logvolume,
        ("diam1", "diam2", "canopy_height", "weight"),
        {"diam1": POSITIVE, "diam2": POSITIVE, "canopy_height": POSITIVE, "weight": POSITIVE},
        linear=LinearGaussian(_mesquite),
    ),
    Entry("sblrc-blr", m.blr, ("X", "y"), {"X": REAL, "y": REAL}, linear=LinearGaussian(_blr_design)),
    Entry(
        "nes2000-nes",
        m.nes,
        (*m.NES_COVARIATES, "partyid7"),
        # race_adj (1, 1.5, 2), educ1 (1-4) and gender (1, 2) are not coded as posteriordb's info says
        # ({0, .5, 1}, {0, 1}); only the age dummies built in _nes_prepare are 0/1, one age group each.
        {
            **{k: REAL for k in ("real_ideo", "race_adj", "educ1", "gender", "income", "partyid7")},
            **{k: Dummy("age_discrete") for k in ("age30_44", "age45_64", "age65up")},
        },
        prepare=_nes_prepare,
        linear=LinearGaussian(_columns(*m.NES_COVARIATES, "partyid7")),
    ),
)

REGISTRY: dict[str, Entry] = {e.posterior: e for e in ENTRIES}

OUT_OF_SCOPE = {
    "eight_schools-eight_schools_noncentered": (
        "eight_schools has a latent effect per school (theta_trans[j] sits in the data plate): each data "
        "point has its own parameter, so the posterior over the shared parameters does not pin down a "
        "data measure and the weighted-posterior attack does not apply. Choose a model whose only "
        "latent variables are shared by all data points."
    ),
}


def lookup(name: str) -> Entry:
    """The registry entry for a posterior name, or an error listing close names."""
    if name in REGISTRY:
        return REGISTRY[name]
    if name in OUT_OF_SCOPE:
        raise ReconError(f"{name} is out of scope: {OUT_OF_SCOPE[name]}")
    close = difflib.get_close_matches(name, list(REGISTRY), n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ReconError(
        f"no registered model for posterior {name!r}.{hint} Registered: {', '.join(sorted(REGISTRY))}. "
        "For another model, call bayes_recon.reconstruct with your own NumPyro model."
    )
