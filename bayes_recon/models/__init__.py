"""The model registry: posteriordb posterior name → NumPyro model, free and fixed data, supports.

For Gaussian linear regressions an entry also says which design the likelihood sees, so the
oracle (``bayes_recon.oracle``) and the linear-model statistics can be computed; where the design
centres or standardises a column by constants of the data set (Stan's ``x - mean(x)``), the entry's
spec takes them from the model's fixed arguments (:meth:`Entry.linear_given`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
    """y ~ Normal(X β, σ): ``design_of`` maps data columns, with ``constants`` (the model's fixed arguments
    a design reads, such as a centring mean), to (X (n, p), y (n,)) as the likelihood sees them."""

    design_of: Callable[[Columns], tuple[np.ndarray, np.ndarray]]
    coefficients: Callable[[Mapping[str, Any]], Any] = lambda params: params["beta"]
    sigma: str = "sigma"
    constants: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)  # arrays: no ==

    def design(self, columns: Columns) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of the data ``columns`` (the free ones)."""
        return self.design_of({**self.constants, **columns})


@dataclass(frozen=True)
class Entry:
    posterior: str
    model: Callable
    free: tuple[str, ...]
    support: Mapping[str, Constraint]
    fixed: tuple[str, ...] = ()
    prepare: Callable[[Mapping[str, Any]], dict[str, np.ndarray]] | None = None
    linear: LinearGaussian | None = None

    def linear_given(self, fixed: Mapping[str, Any]) -> LinearGaussian | None:
        """The linear spec with the data set's constants (``fixed``: the model's fixed arguments)."""
        if self.linear is None:
            return None
        return replace(self.linear, constants={k: np.asarray(fixed[k], float) for k in self.fixed})

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


def _intercept(*columns: np.ndarray) -> np.ndarray:
    return np.stack([np.ones(len(columns[0]))] + [np.asarray(c, float) for c in columns], -1)


def _logearn_height(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    return _intercept(c["height"]), np.log(c["earn"])


def _logearn_interaction(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    height, male = np.asarray(c["height"], float), np.asarray(c["male"], float)
    return _intercept(height, male, height * male), np.log(c["earn"])


def _logearn_interaction_z(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    z = (np.asarray(c["height"], float) - c["height_mean"]) / c["height_sd"]
    male = np.asarray(c["male"], float)
    return _intercept(z, male, z * male), np.log(c["earn"])


def _diamonds_design(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    return _intercept(*(np.asarray(c["X"], float) - c["means_X"]).T), np.asarray(c["Y"], float)


def _logearn_logheight_male(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    return _intercept(np.log(c["height"]), c["male"]), np.log(c["earn"])


def _log10earn_height(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    return _intercept(c["height"]), np.log10(c["earn"])


def _kid_interaction_c2(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    hs, iq = np.asarray(c["mom_hs"], float) - 0.5, np.asarray(c["mom_iq"], float) - 100.0
    return _intercept(hs, iq, hs * iq), np.asarray(c["kid_score"], float)


def _logmesquite(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    logs = (np.log(c[k]) for k in ("diam1", "diam2", "canopy_height", "total_height", "density"))
    return _intercept(*logs, c["group"]), np.log(c["weight"])


def _logmesquite_logva(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    area = np.log(c["diam1"] * c["diam2"])
    return _intercept(area + np.log(c["canopy_height"]), area, c["group"]), np.log(c["weight"])


def _logmesquite_logvas(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    area = np.log(c["diam1"] * c["diam2"])
    volume, shape = area + np.log(c["canopy_height"]), np.log(c["diam1"] / c["diam2"])
    x = _intercept(volume, area, shape, np.log(c["total_height"]), np.log(c["density"]), c["group"])
    return x, np.log(c["weight"])


def _centred_kid(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    data = {k: np.asarray(v, float) for k, v in raw.items()}
    return {**data, "mom_hs_mean": data["mom_hs"].mean(), "mom_iq_mean": data["mom_iq"].mean()}


def _standardised_height(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    data = {k: np.asarray(v, float) for k, v in raw.items()}
    return {**data, "height_mean": data["height"].mean(), "height_sd": data["height"].std(ddof=1)}


def _mom_work(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    work = np.asarray(raw["mom_work"])
    return {"kid_score": raw["kid_score"], **{f"work{k}": (work == k) * 1.0 for k in (2, 3, 4)}}


def _windows(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    y, k = np.asarray(raw["y"], float), int(raw["K"])
    return {"window": np.lib.stride_tricks.sliding_window_view(y, k + 1)}


def _ar_design(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    window = np.asarray(c["window"], float)
    k = window.shape[-1] - 1
    return _intercept(*window[:, k - 1 :: -1].T), window[:, k]


def _diamonds(raw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    x = np.asarray(raw["X"], float)[:, 1:]  # brms's design: column 1 is the intercept
    return {"X": x, "Y": raw["Y"], "means_X": x.mean(axis=0)}


REAL, POSITIVE, BINARY = constraints.real, constraints.positive, constraints.boolean
SCORE = constraints.interval(0.0, 200.0)  # Stan: vector<lower=0, upper=200>
MESQUITE = ("diam1", "diam2", "canopy_height", "total_height", "density", "group")
MESQUITE_SUPPORT = {**{k: POSITIVE for k in MESQUITE[:-1]}, "group": BINARY}


def _nes(year: int) -> Entry:
    return Entry(
        f"nes{year}-nes",
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
    )


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
    *(_nes(year) for year in (1972, 1976, 1980, 1984, 1988, 1992, 1996, 2000)),
    # Covariates are positive where the model takes their log, else real as Stan declares them
    # (a positive height used raw beside log(earn) would leave the polynomial statistics of
    # bayes_recon.identifiability, which logs every positive column or none).
    Entry(
        "earnings-logearn_height",
        m.logearn_height,
        ("height", "earn"),
        {"height": REAL, "earn": POSITIVE},
        linear=LinearGaussian(_logearn_height),
    ),
    Entry(
        "earnings-log10earn_height",
        m.log10earn_height,
        ("height", "earn"),
        {"height": REAL, "earn": POSITIVE},
        linear=LinearGaussian(_log10earn_height),
    ),
    Entry(
        "earnings-logearn_interaction",
        m.logearn_interaction,
        ("height", "male", "earn"),
        {"height": REAL, "male": BINARY, "earn": POSITIVE},
        linear=LinearGaussian(_logearn_interaction),
    ),
    # Stan standardises height by the data's mean and sd: given as known constants, the rows are
    # i.i.d., and the linear spec reads them (Entry.linear_given).
    Entry(
        "earnings-logearn_interaction_z",
        m.logearn_interaction_z,
        ("height", "male", "earn"),
        {"height": REAL, "male": BINARY, "earn": POSITIVE},
        fixed=("height_mean", "height_sd"),
        prepare=_standardised_height,
        linear=LinearGaussian(_logearn_interaction_z),
    ),
    Entry(
        "earnings-logearn_logheight_male",
        m.logearn_logheight_male,
        ("height", "male", "earn"),
        {"height": POSITIVE, "male": BINARY, "earn": POSITIVE},
        linear=LinearGaussian(_logearn_logheight_male),
    ),
    # centred at the data's means: known constants, as for logearn_interaction_z. No LinearGaussian: the
    # oracle minimises over the span of the statistics, not the set a data set can reach, and with this
    # design (a binary column centred, times another) it left it: N 136 with Σ mom_hs 151 (true: 434).
    Entry(
        "kidiq_with_mom_work-kidscore_interaction_c",
        m.kidscore_interaction_c,
        ("mom_hs", "mom_iq", "kid_score"),
        {"mom_hs": BINARY, "mom_iq": REAL},
        fixed=("mom_hs_mean", "mom_iq_mean"),
        prepare=_centred_kid,
    ),
    Entry(
        "kidiq_with_mom_work-kidscore_interaction_c2",
        m.kidscore_interaction_c2,
        ("mom_hs", "mom_iq", "kid_score"),
        {"mom_hs": BINARY, "mom_iq": REAL},
        linear=LinearGaussian(_kid_interaction_c2),
    ),
    Entry(
        "kidiq_with_mom_work-kidscore_mom_work",
        m.kidscore_mom_work,
        ("work2", "work3", "work4", "kid_score"),
        {k: Dummy("mom_work") for k in ("work2", "work3", "work4")},
        prepare=_mom_work,
        linear=LinearGaussian(_columns("work2", "work3", "work4", "kid_score")),
    ),
    Entry(
        "mesquite-logmesquite",
        m.logmesquite,
        (*MESQUITE, "weight"),
        {**MESQUITE_SUPPORT, "weight": POSITIVE},
        linear=LinearGaussian(_logmesquite),
    ),
    Entry(
        "mesquite-logmesquite_logva",
        m.logmesquite_logva,
        ("diam1", "diam2", "canopy_height", "group", "weight"),
        {k: MESQUITE_SUPPORT[k] for k in ("diam1", "diam2", "canopy_height", "group")} | {"weight": POSITIVE},
        linear=LinearGaussian(_logmesquite_logva),
    ),
    Entry(
        "mesquite-logmesquite_logvas",
        m.logmesquite_logvas,
        (*MESQUITE, "weight"),
        {**MESQUITE_SUPPORT, "weight": POSITIVE},
        linear=LinearGaussian(_logmesquite_logvas),
    ),
    Entry(
        "mesquite-mesquite",
        m.mesquite,
        (*MESQUITE, "weight"),
        {**{k: REAL for k in MESQUITE[:-1]}, "group": BINARY},
        linear=LinearGaussian(_columns(*MESQUITE, "weight")),
    ),
    # The series as a measure over its (K+1)-windows: Stan's likelihood is a product over windows
    # (the first K values enter as lags only). The windows overlap in the data; the measure does
    # not know that, so a reconstruction recovers windows, not one series.
    Entry(
        "arK-arK",
        m.ark_windows,
        ("window",),
        {"window": REAL},
        prepare=_windows,
        linear=LinearGaussian(
            _ar_design, coefficients=lambda p: jnp.concatenate([p["alpha"][..., None], p["beta"]], -1)
        ),
    ),
    # brms centres the design at its column means: known constants, as for logearn_interaction_z.
    # X holds continuous columns and polynomial contrasts of categorical ones; all taken as real.
    Entry(
        "diamonds-diamonds",
        m.diamonds,
        ("X", "Y"),
        {"X": REAL},
        fixed=("means_X",),
        prepare=_diamonds,
        linear=LinearGaussian(
            _diamonds_design, coefficients=lambda p: jnp.concatenate([p["Intercept"][..., None], p["b"]], -1)
        ),
    ),
)

REGISTRY: dict[str, Entry] = {e.posterior: e for e in ENTRIES}

# Why each other posterior of posteriordb has no entry: the attack needs reference draws and a
# likelihood that is a product over i.i.d. data rows given the parameters (a group effect indexed
# by a fixed column is fine; a latent variable per row, a series or a joint density of all rows is not).
_SERIES = "{}: each observation depends on the ones before it; the rows are one series, not i.i.d."
_ODE = (
    "{}: the rows are one trajectory over time; the mean at a pseudo-time needs an ODE solve (not translated)"
)
_HMM = "hidden Markov model: a latent state chain couples the rows"


def _undrawn(family: str, iid: bool) -> str:
    if iid:
        return f"no reference draws in posteriordb ({family}; rows i.i.d. given θ, in scope once sampled)"
    return f"no reference draws in posteriordb (and {family})"


_PER_ROW = "a latent variable per row"
_IRT = "item response theory, long format: person and item effects by fixed indices"
_CAPTURE = "capture-recapture with data augmentation: a latent inclusion per individual"
_LDA = "topic model: a latent topic mixture per document"
_RADON_HIER = "hierarchical linear regression, county effects through a fixed index"

OUT_OF_SCOPE: dict[str, str] = {
    "eight_schools-eight_schools_noncentered": (
        "eight_schools has a latent effect per school (theta_trans[j] sits in the data plate): each data "
        "point has its own parameter, so the posterior over the shared parameters does not pin down a "
        "data measure and the weighted-posterior attack does not apply. Choose a model whose only "
        "latent variables are shared by all data points."
    ),
    "arma-arma11": _SERIES.format("ARMA(1,1)"),
    "garch-garch11": _SERIES.format("GARCH(1,1), a variance recursion"),
    "bball_drive_event_0-hmm_drive_0": _HMM,
    "bball_drive_event_1-hmm_drive_1": _HMM,
    "hmm_example-hmm_example": _HMM,
    "gp_pois_regr-gp_pois_regr": "Gaussian process: a latent f per row, coupled through the kernel",
    "gp_pois_regr-gp_regr": "Gaussian process regression: one multivariate normal of all rows",
    "hudson_lynx_hare-lotka_volterra": _ODE.format("Lotka-Volterra ODE"),
    "one_comp_mm_elim_abs-one_comp_mm_elim_abs": _ODE.format("pharmacokinetic ODE"),
    "eight_schools-eight_schools_centered": _undrawn("a latent effect per school", iid=False),
    "mcycle_gp-accel_gp": _undrawn("Gaussian process (basis-function approximation)", iid=False),
    "GLMM_Poisson_data-GLMM_Poisson_model": _undrawn(f"Poisson GLMM with {_PER_ROW}", iid=False),
    "GLMM_data-GLMM1_model": _undrawn("Poisson GLMM, site effects through a fixed index", iid=True),
    "GLM_Binomial_data-GLM_Binomial_model": _undrawn("binomial GLM", iid=True),
    "GLM_Poisson_Data-GLM_Poisson_model": _undrawn("Poisson GLM", iid=True),
    "M0_data-M0_model": _undrawn(_CAPTURE, iid=False),
    "Mb_data-Mb_model": _undrawn(_CAPTURE, iid=False),
    "Mh_data-Mh_model": _undrawn(_CAPTURE, iid=False),
    "Mt_data-Mt_model": _undrawn(_CAPTURE, iid=False),
    "Mtbh_data-Mtbh_model": _undrawn(_CAPTURE, iid=False),
    "Mth_data-Mth_model": _undrawn(_CAPTURE, iid=False),
    **{
        f"Rate_{k}_data-Rate_{k}_model": _undrawn("binomial counts of one or two groups", iid=True)
        for k in range(1, 6)
    },
    "Survey_data-Survey_model": _undrawn("one binomial count with an unknown number of trials", iid=False),
    "bones_data-bones_model": _undrawn("graded response model: a latent maturity per child", iid=False),
    "butterfly-multi_occupancy": _undrawn("occupancy model: latent effects per species", iid=False),
    **{
        f"dogs-{model}": _undrawn("learning model: each trial depends on the dog's earlier trials", iid=False)
        for model in ("dogs", "dogs_hierarchical", "dogs_log", "dogs_nonhierarchical")
    },
    "dugongs_data-dugongs_model": _undrawn("nonlinear growth regression", iid=True),
    **{
        f"ecdc{date}-covid19imperial_{version}": _undrawn("epidemic renewal model, a time series", iid=False)
        for date in ("0401", "0501")
        for version in ("v2", "v3")
    },
    "election88-election88_full": _undrawn(
        "hierarchical logistic regression, group effects through fixed indices", iid=True
    ),
    "fims_Aus_Jpn_irt-2pl_latent_reg_irt": _undrawn(_IRT, iid=True),
    "hmm_gaussian_simulated-hmm_gaussian": _undrawn(_HMM, iid=False),
    "iohmm_reg_simulated-iohmm_reg": _undrawn(_HMM, iid=False),
    "irt_2pl-irt_2pl": _undrawn("item response theory: a latent difficulty per item (a row)", iid=False),
    "loss_curves-losscurve_sislob": _undrawn("loss curves, cohort effects through a fixed index", iid=True),
    "low_dim_gauss_mix_collapse-low_dim_gauss_mix_collapse": _undrawn(
        "Gaussian mixture, marginalised", iid=True
    ),
    "lsat_data-lsat_model": _undrawn("item response theory: a latent ability per student (a row)", iid=False),
    "mcycle_splines-accel_splines": _undrawn("spline regression of mean and log scale", iid=True),
    "mnist-nn_rbm1bJ100": _undrawn("Bayesian neural network classifier", iid=True),
    "mnist_100-nn_rbm1bJ10": _undrawn("Bayesian neural network classifier", iid=True),
    "nes_logit_data-nes_logit_model": _undrawn("logistic regression", iid=True),
    "normal_2-normal_mixture": _undrawn("Gaussian mixture, marginalised", iid=True),
    "normal_5-normal_mixture_k": _undrawn("Gaussian mixture, marginalised", iid=True),
    "ovarian-logistic_regression_rhs": _undrawn("logistic regression with a horseshoe prior", iid=True),
    "pilots-pilots": _undrawn("crossed group effects through fixed indices", iid=True),
    "prideprejudice_chapter-ldaK5": _undrawn(_LDA, iid=False),
    "prideprejudice_paragraph-ldaK5": _undrawn(_LDA, iid=False),
    "prostate-logistic_regression_rhs": _undrawn("logistic regression with a horseshoe prior", iid=True),
    **{
        f"radon_{data}-{model}": _undrawn(_RADON_HIER, iid=True)
        for data in ("all", "mn")
        for model in (
            "radon_hierarchical_intercept_centered",
            "radon_hierarchical_intercept_noncentered",
            "radon_partially_pooled_centered",
            "radon_partially_pooled_noncentered",
            "radon_variable_intercept_centered",
            "radon_variable_intercept_noncentered",
            "radon_variable_intercept_slope_centered",
            "radon_variable_intercept_slope_noncentered",
            "radon_variable_slope_centered",
            "radon_variable_slope_noncentered",
        )
    },
    **{
        f"radon_{data}-radon_county_intercept": _undrawn("linear regression with county intercepts", iid=True)
        for data in ("all", "mn")
    },
    **{f"radon_{data}-radon_pooled": _undrawn("linear regression", iid=True) for data in ("all", "mn")},
    "radon_mod-radon_county": _undrawn(_RADON_HIER, iid=True),
    "rats_data-rats_model": _undrawn(
        "hierarchical growth curves, rat effects through a fixed index", iid=True
    ),
    "rstan_downloads-prophet": _undrawn("prophet trend and seasonality, a time series", iid=False),
    "sat-hier_2pl": _undrawn(_IRT, iid=True),
    "science_irt-grsm_latent_reg_irt": _undrawn(_IRT, iid=True),
    **{
        f"seeds_data-{model}": _undrawn(f"binomial GLM with {_PER_ROW} (plate)", iid=False)
        for model in ("seeds_centered_model", "seeds_model", "seeds_stanified_model")
    },
    "sesame_data-sesame_one_pred_a": _undrawn("linear regression", iid=True),
    "sir-sir": _undrawn("SIR epidemic ODE", iid=False),
    "soil_carbon-soil_incubation": _undrawn("soil carbon ODE", iid=False),
    "state_wide_presidential_votes-hierarchical_gp": _undrawn("hierarchical Gaussian processes", iid=False),
    "surgical_data-surgical_model": _undrawn("a latent rate per hospital (row)", iid=False),
    "synthetic_grid_RBF_kernels-kronecker_gp": _undrawn("Gaussian process", iid=False),
    **{
        f"{data}-ldaK2": _undrawn(_LDA, iid=False)
        for data in ("three_docs1200", "three_men1", "three_men2", "three_men3")
    },
    "timssAusTwn_irt-gpcm_latent_reg_irt": _undrawn(_IRT, iid=True),
    "traffic_accident_nyc-bym2_offset_only": _undrawn(
        "spatial ICAR model: a latent effect per area", iid=False
    ),
    "uk_drivers-state_space_stochastic_level_stochastic_seasonal": _undrawn(
        "state-space time series", iid=False
    ),
    **{
        f"wells_data-{model}": _undrawn("logistic regression", iid=True)
        for model in (
            "wells_daae_c_model",
            "wells_dae_c_model",
            "wells_dae_inter_model",
            "wells_dae_model",
            "wells_dist",
            "wells_dist100_model",
            "wells_dist100ars_model",
            "wells_interaction_c_model",
            "wells_interaction_model",
        )
    },
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
